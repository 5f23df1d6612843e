import Superopt.Dag
import Superopt.Dsl
import Superopt.Workloads
import Superopt.Msgpack
import Superopt.Wire
import Superopt.Plan
import Superopt.Derive
import Superopt.Ffi
import Superopt.Laws
import Superopt.Semantics
import Superopt.Rules

/-!
# Superopt: a Lean 4 → TileLang tensor-program superoptimizer

The Lean half of the project: the DAG IR over named axes and its DSL (`Superopt.Dag`,
`Superopt.Dsl`), the five reference workloads (`Superopt.Workloads`), the semantics over an
abstract class of algebraic laws and the rewrite rules with their soundness theorems
(`Superopt.Laws`, `Superopt.Semantics`, `Superopt.Rules`), the msgpack wire shared with the
Python backend (`Superopt.Msgpack`, `Superopt.Wire`) and the FFI bridge to it
(`Superopt.Ffi`). The executable `lake exe superopt` is `Lean/Main.lean`.

This root module imports every module of the library.
-/
