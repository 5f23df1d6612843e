import Lake
open System Lake DSL

/-!
# The `superopt` Lake package

* `lean_lib Superopt` (`Lean/Superopt.lean` and `Lean/Superopt/{IR,Derive,Wire,Proofs}/*.lean`,
  `Lean/Superopt/Ffi.lean`), `linter.missingDocs` on;
* `lean_exe superopt` (`Lean/Main.lean`): `lake exe superopt attention`;
* `lean_exe superopt_tests` (`LeanTests/Main.lean`), the test driver: `lake test`;
* `lean_lib LeanTests` (`LeanTests/RulesTest.lean`): the law model and rule checks, built by
  `lake build` and imported by the test driver;
* `extern_lib superopt_lean_shim`: `bridge/lean_shim.c` (the only C file that includes
  `lean/lean.h`), compiled against the toolchain's headers. It calls `superopt_bridge_call` of
  `build/bridge/libsuperopt_bridge.so`, the CPython-embedding library that `bridge/build.sh`
  builds with g++ and pybind11 (bridge/README.md says why it is a shared library with its own
  private libstdc++: Lean links with LLVM's libc++). Building the shim's object runs
  `bridge/build.sh` first (a no-op when the library is up to date), and every executable links
  the library with an rpath to it.

Written against Lake of `leanprover/lean4:v4.15.0` (see docs/lean.md).
-/

/-- Where `bridge/build.sh` puts `libsuperopt_bridge.so`. -/
def bridgeLibDir : FilePath := __dir__ / "build" / "bridge"

/-- The flags that link an executable against `libsuperopt_bridge.so`. -/
def bridgeLinkArgs : Array String :=
  #[s!"-L{bridgeLibDir}", "-lsuperopt_bridge", s!"-Wl,-rpath,{bridgeLibDir}"]

package superopt where
  moreLinkArgs := bridgeLinkArgs

@[default_target]
lean_lib Superopt where
  srcDir := "Lean"
  leanOptions := #[⟨`linter.missingDocs, true⟩]

@[default_target]
lean_exe superopt where
  srcDir := "Lean"
  root := `Main

@[test_driver]
lean_exe superopt_tests where
  root := `LeanTests.Main

-- `LeanTests/RulesTest.lean`: the 𝔽₂ model of `ScalarLaws` (the laws are consistent), the rule
-- theorems instantiated at it, kernel checks on concrete tiles and `#eval` checks of the
-- semantics on `Float` (a failing check is an error, so it fails the build). Not under any other
-- library's roots, so it needs its own to be importable; `lake build` builds it, and so does
-- `lake test` (the test driver imports it).
@[default_target]
lean_lib LeanTests where
  roots := #[`LeanTests.RulesTest]

-- `bridge/lean_shim.c` compiled against the toolchain's `lean/lean.h`, after running
-- `bridge/build.sh` (which builds `build/bridge/libsuperopt_bridge.so` when it is stale).
target lean_shim.o pkg : FilePath := do
  let oFile := pkg.buildDir / "bridge" / "lean_shim.o"
  let srcJob ← inputTextFile <| pkg.dir / "bridge" / "lean_shim.c"
  let weakArgs := #["-I", (← getLeanIncludeDir).toString, "-I", (pkg.dir / "bridge").toString]
  buildO oFile srcJob weakArgs #["-fPIC", "-O2"] "cc" do
    proc { cmd := "bash", args := #[(pkg.dir / "bridge" / "build.sh").toString] }
    getLeanTrace

-- The static library of the Lean-side shim, linked into every executable of the package.
extern_lib superopt_lean_shim pkg := do
  let shimO ← lean_shim.o.fetch
  buildStaticLib (pkg.nativeLibDir / nameToStaticLib "superopt_lean_shim") #[shimO]
