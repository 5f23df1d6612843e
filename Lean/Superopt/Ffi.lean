import Superopt.Wire.Msgpack
import Superopt.Wire.Messages

/-!
# The FFI bridge to the Python backend

One request in, one response out, both msgpack bytes (docs/wire.md). `bridgeCall` is the only
`@[extern]` declaration of the project; its C side is `bridge/lean_shim.c`
(`superopt_lean_bridge_call`), which calls `superopt_bridge_call` of
`build/bridge/libsuperopt_bridge.so` (CPython embedded with pybind11, built by
`bridge/build.sh`), which calls `superopt.bridge.handle(request: bytes) -> bytes`.

## Main definitions

* `Superopt.bridgeCall`: bytes → bytes.
* `Superopt.callPython`: a request value → the response value, turning an error response into
  an `IO` error.
* `Superopt.callBackend`: a request value → a decoded `Response`.

## Implementation notes

The request is borrowed (`@&`); the C side copies the response into a fresh `ByteArray`.
Python failures (an exception in `handle`, an interpreter that cannot start) come back as
ordinary wire error responses `{"v": 2, "kind": "error", "error": {...}}`; only a bridge that
produced no bytes at all (out of memory) is an `IO` error of `bridgeCall` itself. At run time
the backend's Python code is found through an editable install (`pip install -e .`) or
`SUPEROPT_PYTHONPATH=<repo>/python` (bridge/README.md).
-/

namespace Superopt

/-- Send one msgpack request to `superopt.bridge.handle` and return its msgpack response
(an error response too when Python failed).

Errors: `IO.userError` only when the bridge produced no bytes at all (out of memory). -/
@[extern "superopt_lean_bridge_call"]
opaque bridgeCall (request : @& ByteArray) : IO ByteArray

/-- The `IO` error for an error response: `superopt backend error [kind] at path: message`. -/
def backendError (e : WireError) : IO.Error :=
  IO.userError s!"superopt backend error [{e.kind}] at {e.path}: {e.message}"

/-- Send `req` through the bridge and return the decoded response value.

Errors: the bridge's own failure; a response that is not valid msgpack; an error response
`{"v": 2, "kind": "error", "error": {kind, message, path}}`, as
`superopt backend error [kind] at path: message`. -/
def callPython (req : MsgValue) : IO MsgValue := do
  let bytes ← bridgeCall req.encode
  match Msgpack.decode bytes with
  | .error msg =>
    throw (IO.userError s!"superopt backend error [decode] at : the response is not msgpack: {msg}")
  | .ok v =>
    match Response.ofMsg? v with
    | .ok (.error e) => throw (backendError e)
    | _ => pure v

/-- Send `req` through the bridge and decode the response (`Response`).

Errors: those of `callPython`; a response that does not match its schema. -/
def callBackend (req : MsgValue) : IO Response := do
  let v ← callPython req
  match Response.ofMsg? v with
  | .ok r => pure r
  | .error e => throw (IO.userError s!"malformed backend response: {e}")

/-- Ask the backend for its version (a `ping` request). -/
def pingBackend : IO String := do
  match ← callBackend Wire.pingRequest with
  | .pong version => pure version
  | _ => throw (IO.userError "the backend answered ping with something other than pong")

end Superopt
