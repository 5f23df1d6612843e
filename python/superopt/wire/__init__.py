"""The msgpack wire format between Lean and Python (``docs/wire.md``).

:mod:`superopt.wire.codec` is the byte format (``Msgpack.lean``); :mod:`superopt.wire.fields`
the field checks, :mod:`superopt.wire.graph` the graph map and :mod:`superopt.wire.messages`
the other messages (together ``Messages.lean``). This face re-exports the public names so that
``from superopt import wire; wire.encode(...)`` keeps working.
"""

from ..derive.derivation import Derivation, Step
from . import messages
from .codec import MAX_DEPTH, MAX_MESSAGE_BYTES, decode, encode
from .fields import WIRE_VERSION, check_version
from .graph import graph_from_wire, graph_to_wire
from .messages import (DTYPES, PEER_STATUSES, REQUEST_KINDS, STATUSES, candidate_to_wire,
                       config_from_wire, config_to_wire, derivation_from_wire,
                       derivation_to_wire, derivations_response, derive_request, encode_error,
                       error_response, lower_request, lowered_response, parse_request,
                       peer_to_wire, ping_request, plan_to_wire, plans_response, pong_response,
                       replay_request, results_from_wire, results_to_wire, tune_request)

__all__ = [
    "WIRE_VERSION", "MAX_DEPTH", "MAX_MESSAGE_BYTES", "REQUEST_KINDS", "STATUSES",
    "PEER_STATUSES", "DTYPES", "encode", "decode", "graph_to_wire", "graph_from_wire", "Step",
    "Derivation", "derivation_to_wire", "derivation_from_wire", "config_to_wire",
    "config_from_wire", "ping_request", "derive_request", "lower_request", "replay_request",
    "tune_request", "parse_request", "check_version", "pong_response", "derivations_response",
    "lowered_response", "plan_to_wire", "plans_response", "candidate_to_wire", "peer_to_wire",
    "results_to_wire", "results_from_wire", "error_response", "encode_error", "messages",
]
