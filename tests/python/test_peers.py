"""How peers are timed: the output policy they share with the candidates."""


def test_fresh_outputs_keeps_the_last_n_results_alive():
    """A timed peer keeps its last n outputs alive (one per rotation set), so no call can be
    handed the block of one of the n - 1 calls before it; the oldest is released after n
    more calls, and the results are the peer's own."""
    import gc
    import weakref

    import torch

    from superopt.run.peers import fresh_outputs

    calls = []

    def peer(x):
        calls.append(x)
        return torch.full((1024,), float(x))

    timed = fresh_outputs(peer, 3)
    outs = [timed(i) for i in range(3)]
    assert [float(o[0]) for o in outs] == [0.0, 1.0, 2.0] and calls == [0, 1, 2]
    assert len({o.data_ptr() for o in outs}) == 3
    first = weakref.ref(outs[0])
    del outs
    gc.collect()
    assert first() is not None  # still held: two more calls may not reuse its block
    timed(3)
    gc.collect()
    assert first() is None  # the fourth call released the oldest
