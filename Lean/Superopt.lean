import Superopt.IR.Dag
import Superopt.IR.Dsl
import Superopt.IR.Workloads
import Superopt.Wire.Msgpack
import Superopt.Wire.Messages
import Superopt.Derive.Plan
import Superopt.Derive.Rules
import Superopt.Derive.Enumerator
import Superopt.Ffi
import Superopt.IR.Laws
import Superopt.IR.Semantics
import Superopt.Proofs.RuleLemmas
import Superopt.Proofs.Soundness

/-!
# Superopt: a Lean 4 → TileLang tensor-program superoptimizer

The Lean half of the project, one folder per stage of the Python package
(`python/superopt/{ir,derive,wire}`):

* `Superopt.IR.*`: the DAG IR over named axes (`Dag`), its DSL (`Dsl`), the scalar laws (`Laws`),
  the denotational semantics (`Semantics`) and the reference workloads (`Workloads`);
* `Superopt.Derive.*`: kernel plans (`Plan`), the rewrite rules' sites and applications
  (`Rules`) and the canonical enumerator (`Enumerator`);
* `Superopt.Wire.*`: the msgpack codec (`Msgpack`) and the messages (`Messages`) shared with the
  Python backend;
* `Superopt.Proofs.*`: the lemmas behind the rules (`RuleLemmas`) and the soundness theorem of
  each rule id (`Soundness`);
* `Superopt.Ffi`: the FFI bridge to the backend.

The executable `lake exe superopt` is `Lean/Main.lean`.

This root module imports every module of the library.
-/
