#!/usr/bin/env bash
# build.sh: build the superopt bridge library (CPython embedded with pybind11).
#
# Usage: bridge/build.sh [--out DIR] [--static] [--lean-include DIR] [--print-link-flags]
#
#   --out DIR           output folder (default: <repo>/build/bridge)
#   --static            also build libsuperopt_bridge.a (for hosts linked by g++ itself)
#   --lean-include DIR  also compile lean_shim.c against DIR/lean/lean.h into
#                       libsuperopt_lean_shim.a (DIR is `$(lean --print-prefix)/include`)
#   --print-link-flags  print only the link flags, one line, nothing else (for a lakefile)
#
# Environment: PYTHON (default python3) is the Python to embed: its headers, its libpython,
# and its sys.executable as the interpreter's program name. CXX (default g++), CC (default
# cc). The build is skipped when the outputs are newer than every input.
#
# Output (in DIR):
#   libsuperopt_bridge.so      the C ABI of superopt_bridge.h; libstdc++ and libgcc linked
#                              in statically with their symbols hidden (so it coexists with
#                              Lean's own C++ runtime), libpython linked dynamically with an
#                              rpath to it; exports only superopt_bridge_* symbols
#   libsuperopt_bridge.a       (--static) bridge.o alone; link it with
#                              `python3-config --embed --ldflags` and -lstdc++
#   libsuperopt_lean_shim.a    (--lean-include) the Lean wrapper superopt_lean_bridge_call
#
# Last line printed (or the only one with --print-link-flags): the flags that link a program
# against the bridge, e.g.
#   -L/repo/build/bridge -lsuperopt_bridge -Wl,-rpath,/repo/build/bridge
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
out="$repo/build/bridge"
want_static=0
lean_include=""
print_only=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --static) want_static=1; shift ;;
        --lean-include) lean_include="$2"; shift 2 ;;
        --print-link-flags) print_only=1; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

PYTHON="${PYTHON:-python3}"
CXX="${CXX:-g++}"
CC="${CC:-cc}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

log() { if [[ $print_only -eq 0 ]]; then echo "$@"; fi; }
link_flags="-L$out -lsuperopt_bridge -Wl,-rpath,$out"

# Rebuild only when an input is newer than the library.
so="$out/libsuperopt_bridge.so"
stale=1
if [[ -f "$so" ]]; then
    stale=0
    for f in "$here/bridge.cpp" "$here/superopt_bridge.h" "$here/wire_error.hpp" \
             "$here/exports.map" "$0"; do
        if [[ "$f" -nt "$so" ]]; then stale=1; fi
    done
fi

if [[ $stale -eq 1 ]]; then
    py_includes="$("$PYTHON" -m pybind11 --includes)"
    py_ldflags="$("${PYTHON}-config" --embed --ldflags 2>/dev/null || true)"
    if [[ -z "$py_ldflags" ]]; then
        # python3-config may not sit next to $PYTHON (venvs): ask sysconfig instead.
        py_ldflags="$("$PYTHON" - <<'EOF'
import sysconfig as s
v = s.get_config_var
print(f"-L{v('LIBDIR')} -lpython{v('LDVERSION')} {v('LIBS') or ''} {v('SYSLIBS') or ''}")
EOF
)"
    fi
    py_libdir="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"
    py_exe="$("$PYTHON" -c 'import sys; print(sys.executable)')"

    cxxflags=(-std=c++17 -O2 -fPIC -fvisibility=hidden -Wall -Wextra)
    log "compiling bridge.cpp (python: $py_exe)"
    # shellcheck disable=SC2086
    "$CXX" "${cxxflags[@]}" $py_includes -I"$here" \
        -DSUPEROPT_DEFAULT_PYTHON_EXECUTABLE="\"$py_exe\"" \
        -c "$here/bridge.cpp" -o "$out/bridge.o"

    log "linking libsuperopt_bridge.so"
    # -static-libstdc++/-static-libgcc + --exclude-libs: the C++ runtime stays private to
    # the library (Lean executables link LLVM's libc++ and never libstdc++).
    # shellcheck disable=SC2086
    "$CXX" -shared -o "$so.tmp" "$out/bridge.o" \
        -Wl,-soname,libsuperopt_bridge.so \
        -static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL \
        -Wl,--version-script="$here/exports.map" -Wl,--no-undefined -Wl,--as-needed \
        $py_ldflags -Wl,-rpath,"$py_libdir" -ldl
    mv -f "$so.tmp" "$so"
fi

if [[ $want_static -eq 1 ]]; then
    log "archiving libsuperopt_bridge.a"
    rm -f "$out/libsuperopt_bridge.a"
    ar rcs "$out/libsuperopt_bridge.a" "$out/bridge.o"
fi

if [[ -n "$lean_include" ]]; then
    log "compiling lean_shim.c against $lean_include/lean/lean.h"
    "$CC" -std=c11 -O2 -fPIC -Wall -Wextra -I"$lean_include" -I"$here" \
        -c "$here/lean_shim.c" -o "$out/lean_shim.o"
    rm -f "$out/libsuperopt_lean_shim.a"
    ar rcs "$out/libsuperopt_lean_shim.a" "$out/lean_shim.o"
fi

log "built: $so"
echo "$link_flags"
