/-!
# msgpack: the canonical encoder and the hardened decoder

The wire between Lean and Python is msgpack, versioned and specified in `docs/wire.md`. This
module is the codec only (values ↔ bytes); `Superopt.Wire` maps graphs, derivations, requests
and responses to values.

## Main definitions

* `Superopt.MsgValue`: a msgpack value (maps keep their keys in insertion order; keys are
  strings).
* `Superopt.MsgValue.encode`: the *canonical* bytes of a value (docs/wire.md section 1):
  big-endian; non-negative integers in the smallest unsigned form (positive fixint, `cc`–`cf`),
  negative ones in the smallest signed form (negative fixint, `d0`–`d3`); every float as
  float64 `cb` with NaN written as `7ff8000000000000`; strings `a0`/`d9`/`da`/`db`; binary
  `c4`–`c6`; arrays `90`/`dc`/`dd`; maps `80`/`de`/`df`.
* `Superopt.Msgpack.decode`: the reader (docs/wire.md section 2). It accepts non-canonical
  forms (`cd 00 05`, float32 `ca`) and rejects truncated input, the byte `c1`, trailing bytes,
  ext types, invalid UTF-8, non-string or repeated map keys, nesting deeper than 64 containers,
  messages over 64 MiB and length headers the remaining input cannot hold.

## Implementation notes

The decoder is structurally recursive on a *fuel* argument, the number of container levels
still allowed, so a hostile input of 100 000 nested `91` bytes is rejected after 64 levels
instead of exhausting the stack. Lengths are checked against the remaining input before any
loop over them. The encoder is a `partial def` (a fold over the value) because `MsgValue` is a
nested inductive. Integers outside `[-2^63, 2^64)` have no msgpack form; the encoder saturates
them (the wire layer only writes sizes and ids `< 2^31`).

Mirrors `superopt.wire.encode` / `superopt.wire.decode` (msgpack-python's `packb` with
`use_bin_type=True`); the golden vectors `tests/golden/*.msgpack` pin the bytes of both.
-/

namespace Superopt

/-- A msgpack value. Map keys are strings, in insertion order. -/
inductive MsgValue where
  /-- `nil` (`c0`). -/
  | nil
  /-- A boolean (`c2`/`c3`). -/
  | bool (b : Bool)
  /-- An integer; encodable when `-2^63 ≤ i < 2^64`. -/
  | int (i : Int)
  /-- A float64 (`cb`). -/
  | float (f : Float)
  /-- A UTF-8 string. -/
  | str (s : String)
  /-- Binary data. -/
  | bin (bytes : ByteArray)
  /-- An array. -/
  | arr (items : List MsgValue)
  /-- A map with string keys, in insertion order. -/
  | map (entries : List (String × MsgValue))
  deriving Inhabited

namespace Msgpack

/-- Deepest container nesting the decoder accepts (the top-level map is depth 1). -/
def maxDepth : Nat := 64

/-- Longest message the decoder accepts, in bytes (64 MiB). -/
def maxMessageBytes : Nat := 64 * 1024 * 1024

/-- The bits every NaN is written as. -/
def canonicalNaNBits : UInt64 := 0x7ff8000000000000

/-! ## Encoding -/

/-- Append the `width` low-order bytes of `n`, most significant first. -/
def pushBE (out : ByteArray) (n : Nat) (width : Nat) : ByteArray := Id.run do
  let mut out := out
  for i in [0:width] do
    let shift := 8 * (width - 1 - i)
    out := out.push (UInt8.ofNat (n / 2 ^ shift % 256))
  return out

/-- Append the smallest msgpack form of the integer `i` (unsigned forms for `i ≥ 0`, signed
forms for `i < 0`), saturating outside `[-2^63, 2^64)`. -/
def pushInt (out : ByteArray) (i : Int) : ByteArray :=
  if i ≥ 0 then
    let n := i.toNat
    if n ≤ 0x7f then out.push (UInt8.ofNat n)
    else if n ≤ 0xff then pushBE (out.push 0xcc) n 1
    else if n ≤ 0xffff then pushBE (out.push 0xcd) n 2
    else if n ≤ 0xffffffff then pushBE (out.push 0xce) n 4
    else if n ≤ 0xffffffffffffffff then pushBE (out.push 0xcf) n 8
    else pushBE (out.push 0xcf) 0xffffffffffffffff 8
  else
    if i ≥ -32 then out.push (UInt8.ofNat (i + 256).toNat)
    else if i ≥ -128 then pushBE (out.push 0xd0) (i + 256).toNat 1
    else if i ≥ -32768 then pushBE (out.push 0xd1) (i + 65536).toNat 2
    else if i ≥ -2147483648 then pushBE (out.push 0xd2) (i + 4294967296).toNat 4
    else if i ≥ -9223372036854775808 then
      pushBE (out.push 0xd3) (i + 18446744073709551616).toNat 8
    else pushBE (out.push 0xd3) 0x8000000000000000 8

/-- The IEEE-754 binary64 bits written for `f`: its own bits, or `7ff8000000000000` for
every NaN. -/
def floatBits (f : Float) : UInt64 := if f.isNaN then canonicalNaNBits else f.toBits

/-- Append a float64 (`cb` + 8 bytes). -/
def pushFloat (out : ByteArray) (f : Float) : ByteArray :=
  pushBE (out.push 0xcb) (floatBits f).toNat 8

/-- Append a string header for `len` UTF-8 bytes. -/
def pushStrHeader (out : ByteArray) (len : Nat) : ByteArray :=
  if len ≤ 31 then out.push (UInt8.ofNat (0xa0 + len))
  else if len ≤ 0xff then pushBE (out.push 0xd9) len 1
  else if len ≤ 0xffff then pushBE (out.push 0xda) len 2
  else pushBE (out.push 0xdb) len 4

/-- Append a string (header, then its UTF-8 bytes). -/
def pushStr (out : ByteArray) (s : String) : ByteArray :=
  let bytes := s.toUTF8
  pushStrHeader out bytes.size ++ bytes

/-- Append binary data (`c4`/`c5`/`c6` header, then the bytes). -/
def pushBin (out : ByteArray) (b : ByteArray) : ByteArray :=
  let len := b.size
  let out :=
    if len ≤ 0xff then pushBE (out.push 0xc4) len 1
    else if len ≤ 0xffff then pushBE (out.push 0xc5) len 2
    else pushBE (out.push 0xc6) len 4
  out ++ b

/-- Append an array header for `n` items. -/
def pushArrHeader (out : ByteArray) (n : Nat) : ByteArray :=
  if n ≤ 15 then out.push (UInt8.ofNat (0x90 + n))
  else if n ≤ 0xffff then pushBE (out.push 0xdc) n 2
  else pushBE (out.push 0xdd) n 4

/-- Append a map header for `n` pairs. -/
def pushMapHeader (out : ByteArray) (n : Nat) : ByteArray :=
  if n ≤ 15 then out.push (UInt8.ofNat (0x80 + n))
  else if n ≤ 0xffff then pushBE (out.push 0xde) n 2
  else pushBE (out.push 0xdf) n 4

/-- Append the canonical encoding of `v` to `out`. -/
partial def encodeInto (out : ByteArray) : MsgValue → ByteArray
  | .nil => out.push 0xc0
  | .bool b => out.push (if b then 0xc3 else 0xc2)
  | .int i => pushInt out i
  | .float f => pushFloat out f
  | .str s => pushStr out s
  | .bin b => pushBin out b
  | .arr items => items.foldl encodeInto (pushArrHeader out items.length)
  | .map entries =>
    entries.foldl (fun acc kv => encodeInto (pushStr acc kv.1) kv.2)
      (pushMapHeader out entries.length)

/-! ## Decoding -/

/-- The error text for input that ends inside a value. -/
def truncatedMsg : String := "truncated message: the input ends inside a value"

/-- What one header byte (with its length or payload) says: a complete scalar, or a container
of `count` items (arrays) or pairs (maps) whose contents start at `next`. -/
inductive Head where
  /-- A complete scalar value; the next value starts at `next`. -/
  | value (v : MsgValue) (next : Nat)
  /-- An array of `count` items starting at `next`. -/
  | arr (count : Nat) (next : Nat)
  /-- A map of `count` key/value pairs starting at `next`. -/
  | map (count : Nat) (next : Nat)

/-- The big-endian unsigned number in the `width` bytes at `pos`.

Errors: the input ends before `pos + width`. -/
def readBE (bs : ByteArray) (pos width : Nat) : Except String Nat := do
  if pos + width > bs.size then throw truncatedMsg
  let mut n := 0
  for i in [0:width] do
    n := n * 256 + (bs.get! (pos + i)).toNat
  return n

/-- The two's-complement value of the `width`-byte number `n`. -/
def toSigned (n width : Nat) : Int :=
  if n ≥ 2 ^ (8 * width - 1) then Int.ofNat n - Int.ofNat (2 ^ (8 * width)) else Int.ofNat n

/-- The float64 whose IEEE-754 binary32 bits are `b` (a decoder also accepts float32). -/
def float32OfBits (b : Nat) : Float :=
  let sign := b / 2 ^ 31 % 2
  let exponent := b / 2 ^ 23 % 256
  let mantissa := b % 2 ^ 23
  let magnitude : Float :=
    if exponent == 255 then
      (if mantissa == 0 then 1.0 / 0.0 else 0.0 / 0.0)
    else if exponent == 0 then
      Float.scaleB (Float.ofNat mantissa) (-149)
    else
      Float.scaleB (Float.ofNat (mantissa + 2 ^ 23)) (Int.ofNat exponent - 150)
  if sign == 1 then -magnitude else magnitude

/-- The UTF-8 string of `len` bytes at `pos`, and the position after it.

Errors: truncated input; invalid UTF-8. -/
def readStr (bs : ByteArray) (pos len : Nat) : Except String Head := do
  if pos + len > bs.size then throw truncatedMsg
  match String.fromUTF8? (bs.extract pos (pos + len)) with
  | some s => return .value (.str s) (pos + len)
  | none => throw "a string is not valid UTF-8"

/-- The binary data of `len` bytes at `pos`, and the position after it. -/
def readBin (bs : ByteArray) (pos len : Nat) : Except String Head := do
  if pos + len > bs.size then throw truncatedMsg
  return .value (.bin (bs.extract pos (pos + len))) (pos + len)

/-- Read the header byte at `pos` and what it carries (a length, a number, a string).

Errors: truncated input, `c1`, ext types, invalid UTF-8. -/
def readHead (bs : ByteArray) (pos : Nat) : Except String Head := do
  if pos ≥ bs.size then throw truncatedMsg
  let b := (bs.get! pos).toNat
  let p := pos + 1
  if b ≤ 0x7f then return .value (.int (Int.ofNat b)) p
  else if b ≤ 0x8f then return .map (b - 0x80) p
  else if b ≤ 0x9f then return .arr (b - 0x90) p
  else if b ≤ 0xbf then readStr bs p (b - 0xa0)
  else if b ≥ 0xe0 then return .value (.int (Int.ofNat b - 256)) p
  else if b == 0xc0 then return .value .nil p
  else if b == 0xc1 then throw "invalid msgpack: the reserved type byte 0xc1"
  else if b == 0xc2 then return .value (.bool false) p
  else if b == 0xc3 then return .value (.bool true) p
  else if b == 0xc4 then readBin bs (p + 1) (← readBE bs p 1)
  else if b == 0xc5 then readBin bs (p + 2) (← readBE bs p 2)
  else if b == 0xc6 then readBin bs (p + 4) (← readBE bs p 4)
  else if b == 0xca then
    return .value (.float (float32OfBits (← readBE bs p 4))) (p + 4)
  else if b == 0xcb then
    return .value (.float (Float.ofBits (UInt64.ofNat (← readBE bs p 8)))) (p + 8)
  else if b == 0xcc then return .value (.int (Int.ofNat (← readBE bs p 1))) (p + 1)
  else if b == 0xcd then return .value (.int (Int.ofNat (← readBE bs p 2))) (p + 2)
  else if b == 0xce then return .value (.int (Int.ofNat (← readBE bs p 4))) (p + 4)
  else if b == 0xcf then return .value (.int (Int.ofNat (← readBE bs p 8))) (p + 8)
  else if b == 0xd0 then return .value (.int (toSigned (← readBE bs p 1) 1)) (p + 1)
  else if b == 0xd1 then return .value (.int (toSigned (← readBE bs p 2) 2)) (p + 2)
  else if b == 0xd2 then return .value (.int (toSigned (← readBE bs p 4) 4)) (p + 4)
  else if b == 0xd3 then return .value (.int (toSigned (← readBE bs p 8) 8)) (p + 8)
  else if b == 0xd9 then readStr bs (p + 1) (← readBE bs p 1)
  else if b == 0xda then readStr bs (p + 2) (← readBE bs p 2)
  else if b == 0xdb then readStr bs (p + 4) (← readBE bs p 4)
  else if b == 0xdc then return .arr (← readBE bs p 2) (p + 2)
  else if b == 0xdd then return .arr (← readBE bs p 4) (p + 4)
  else if b == 0xde then return .map (← readBE bs p 2) (p + 2)
  else if b == 0xdf then return .map (← readBE bs p 4) (p + 4)
  else throw s!"ext type (byte {b}) is not part of the wire format"

/-- The key of a map entry: a string, else an error. -/
def keyOf : MsgValue → Except String String
  | .str s => pure s
  | _ => throw "a map key is not a string"

/-- The error text for nesting deeper than `maxDepth`. -/
def tooDeepMsg : String := s!"nesting deeper than {maxDepth}"

/-- Decode one value at `pos`, allowing `fuel` more container levels below this one; returns
the value and the position after it.

Errors: any of `readHead`'s; too deep; a container count the remaining input cannot hold;
a non-string or repeated map key. -/
def decodeAt (bs : ByteArray) : Nat → Nat → Except String (MsgValue × Nat)
  | 0, pos => do
    match ← readHead bs pos with
    | .value v next => return (v, next)
    | _ => throw tooDeepMsg
  | fuel + 1, pos => do
    match ← readHead bs pos with
    | .value v next => return (v, next)
    | .arr count next =>
      -- every item takes at least one byte: reject impossible counts before looping
      if count > bs.size - next then throw truncatedMsg
      let mut items : Array MsgValue := #[]
      let mut p := next
      for _ in [0:count] do
        let (v, p') ← decodeAt bs fuel p
        items := items.push v
        p := p'
      return (.arr items.toList, p)
    | .map count next =>
      -- every pair takes at least two bytes
      if 2 * count > bs.size - next then throw truncatedMsg
      let mut entries : Array (String × MsgValue) := #[]
      let mut p := next
      for _ in [0:count] do
        let (k, p1) ← decodeAt bs fuel p
        let key ← keyOf k
        if entries.any (fun e => e.1 == key) then
          throw s!"map key '{key}' appears twice"
        let (v, p2) ← decodeAt bs fuel p1
        entries := entries.push (key, v)
        p := p2
      return (.map entries.toList, p)

/-- Decode one msgpack message (docs/wire.md section 2).

Errors (the `decode` kind of the wire): empty, longer than 64 MiB, malformed or truncated,
`c1`, ext types, invalid UTF-8, non-string or repeated map keys, nesting deeper than 64,
trailing bytes. -/
def decode (bs : ByteArray) : Except String MsgValue := do
  if bs.size == 0 then throw "empty message"
  if bs.size > maxMessageBytes then
    throw s!"message of {bs.size} bytes is longer than the limit {maxMessageBytes}"
  let (v, next) ← decodeAt bs maxDepth 0
  if next != bs.size then
    throw s!"{bs.size - next} trailing byte(s) after the message"
  return v

/-! ## Display -/

/-- The lowercase hex digit of `n < 16`. -/
def hexDigit (n : Nat) : Char :=
  if n < 10 then Char.ofNat (48 + n) else Char.ofNat (87 + n)

/-- The bytes as lowercase hex without separators, e.g. `"ccc8"`. -/
def hex (bs : ByteArray) : String :=
  bs.data.foldl (fun s b => (s.push (hexDigit (b.toNat / 16))).push (hexDigit (b.toNat % 16))) ""

/-- The bytes of a list of numbers `< 256` (for tests). -/
def bytesOf (xs : List Nat) : ByteArray :=
  xs.foldl (fun out x => out.push (UInt8.ofNat x)) ByteArray.empty

/-- Whether two byte arrays hold the same bytes. -/
def bytesEq (a b : ByteArray) : Bool := a.data == b.data

/-- A string literal with `"` and `\` escaped (for `MsgValue.render`). -/
def quoteStr (s : String) : String :=
  "\"" ++ s.foldl (fun acc c =>
    if c == '"' then acc ++ "\\\"" else if c == '\\' then acc ++ "\\\\" else acc.push c) "" ++
  "\""

end Msgpack

/-- The canonical msgpack bytes of `v` (docs/wire.md section 1).

Examples: `(MsgValue.int 200).encode` is `cc c8`; `(MsgValue.int (-33)).encode` is `d0 df`;
`(MsgValue.float 1.0).encode` is `cb 3f f0 00 00 00 00 00 00`. -/
def MsgValue.encode (v : MsgValue) : ByteArray := Msgpack.encodeInto ByteArray.empty v

/-- A JSON-like rendering for humans (floats via `toString`, binary as hex). -/
partial def MsgValue.render : MsgValue → String
  | .nil => "nil"
  | .bool b => if b then "true" else "false"
  | .int i => toString i
  | .float f => toString f
  | .str s => Msgpack.quoteStr s
  | .bin b => "bin:" ++ Msgpack.hex b
  | .arr items => "[" ++ ", ".intercalate (items.map MsgValue.render) ++ "]"
  | .map entries =>
    "{" ++ ", ".intercalate (entries.map fun kv => Msgpack.quoteStr kv.1 ++ ": " ++
      MsgValue.render kv.2) ++ "}"

/-- The value of key `k` of a map's entries, if present. -/
def MsgValue.lookup (entries : List (String × MsgValue)) (k : String) : Option MsgValue :=
  match entries.find? (fun kv => kv.1 == k) with
  | some kv => some kv.2
  | none => none

/-! ## Examples, checked when the module is built -/

open Msgpack in
#guard hex (MsgValue.int 5).encode == "05"
open Msgpack in
#guard hex (MsgValue.int 200).encode == "ccc8"
open Msgpack in
#guard hex (MsgValue.int 65536).encode == "ce00010000"
open Msgpack in
#guard hex (MsgValue.int (-1)).encode == "ff"
open Msgpack in
#guard hex (MsgValue.int (-33)).encode == "d0df"
open Msgpack in
#guard hex (MsgValue.int (-129)).encode == "d1ff7f"
open Msgpack in
#guard hex (MsgValue.bool true).encode == "c3"
open Msgpack in
#guard hex (MsgValue.float 1.0).encode == "cb3ff0000000000000"
open Msgpack in
#guard hex (MsgValue.float (0.0 / 0.0)).encode == "cb7ff8000000000000"
open Msgpack in
#guard hex (MsgValue.float 1e-5).encode == "cb3ee4f8b588e368f1"
open Msgpack in
#guard hex (MsgValue.map [("v", .int 1), ("kind", .str "ping")]).encode ==
  "82a17601a46b696e64a470696e67"
open Msgpack in
#guard match decode (bytesOf [0xcd, 0x00, 0x05]) with
  | .ok (.int i) => i == 5
  | _ => false
open Msgpack in
#guard match decode (bytesOf [0xc1]) with
  | .error _ => true
  | .ok _ => false
open Msgpack in
#guard match decode (bytesOf [0x05, 0x05]) with
  | .error _ => true
  | .ok _ => false
open Msgpack in
#guard match decode (bytesOf [0xdd, 0xff, 0xff, 0xff, 0xff, 0x00]) with
  | .error _ => true
  | .ok _ => false
open Msgpack in
#guard match decode (bytesOf ((List.replicate 65 0x91) ++ [0x00])) with
  | .error _ => true
  | .ok _ => false
open Msgpack in
#guard match decode (bytesOf ((List.replicate 63 0x91) ++ [0x90])) with
  | .ok _ => true
  | .error _ => false
open Msgpack in
#guard match decode (bytesOf [0x82, 0xa1, 0x61, 0x01, 0xa1, 0x61, 0x02]) with
  | .error _ => true
  | .ok _ => false

end Superopt
