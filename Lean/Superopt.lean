import Superopt.IR.Dag
import Superopt.IR.Dsl
import Superopt.IR.Workloads
import Superopt.IR.Registry
import Superopt.IR.Laws
import Superopt.IR.Semantics
import Superopt.Wire.Msgpack
import Superopt.Wire.Messages
import Superopt.Derive.Plan
import Superopt.Derive.Rules
import Superopt.Derive.Enumerator
import Superopt.Proofs.Bools
import Superopt.Proofs.RuleLemmas
import Superopt.Proofs.PlanSemantics
import Superopt.Proofs.PlanDenote
import Superopt.Proofs.Indep
import Superopt.Proofs.Validate
import Superopt.Proofs.Derivation
import Superopt.Proofs.Soundness
import Superopt.Ffi

/-!
# Superopt: a Lean 4 → TileLang tensor-program superoptimizer

The Lean half of the project, one folder per stage of the Python package
(`python/superopt/{ir,derive,wire}`):

* `Superopt.IR.*`: the DAG IR over named axes (`Dag`), its DSL (`Dsl`), the scalar laws (`Laws`),
  the denotational semantics (`Semantics`), the workload graphs (`Workloads`) and the registry
  of named graphs (`Registry`);
* `Superopt.Derive.*`: kernel plans (`Plan`), the rewrite rules' sites and applications
  (`Rules`) and the canonical enumerator (`Enumerator`);
* `Superopt.Wire.*`: the msgpack codec (`Msgpack`) and the messages (`Messages`) shared with the
  Python backend;
* `Superopt.Proofs.*`: the lemmas behind the rules (`RuleLemmas`), the semantics of plans and
  the theorem that well-formed plans denote their graph (`PlanSemantics`, `PlanDenote`), the
  check of algebraic rewrites (`Indep`, `Validate`), the step checker and verified derivations
  (`Derivation`), and the theorem of each rule id and `Superopt.derive_sound` (`Soundness`);
  `Bools` holds the small Boolean facts the checkers' proofs use;
* `Superopt.Ffi`: the FFI bridge to the backend.

The executable `lake exe superopt` is `Lean/Main.lean`.

This root module imports every module of the library.
-/
