"""Byte-level mutation shared by the wire and bridge fuzz tests (hypothesis draws the edits)."""

from hypothesis import strategies as st

#: Up to four (position, byte, how) edits; positions wrap around the payload's length.
EDITS = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255),
                           st.sampled_from(["set", "del", "ins"])), min_size=1, max_size=4)


def mutate(data: bytes, edits) -> bytes:
    """``data`` with each edit applied: overwrite, delete or insert one byte."""
    b = bytearray(data)
    for pos, byte, how in edits:
        pos %= len(b) + 1
        if how == "set" and pos < len(b):
            b[pos] = byte
        elif how == "del" and pos < len(b):
            del b[pos]
        else:
            b.insert(pos, byte)
    return bytes(b)
