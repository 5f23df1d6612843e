/*
 * lean_shim.c: the only file that includes lean/lean.h; turns a Lean ByteArray into a
 * bridge call and the response back into a ByteArray. Compiled by Lake (not buildable
 * without a Lean toolchain), linked with libsuperopt_bridge (bridge/README.md).
 *
 * Lean side (Lean/Superopt/FFI.lean):
 *
 *     @[extern "superopt_lean_bridge_call"]
 *     opaque bridgeCall (request : @& ByteArray) : IO ByteArray
 *
 * C signature, which depends on the toolchain (Lean PR #10625, "zero cost BaseIO",
 * released in v4.26.0, erased the IO world token from extern functions):
 *
 *     Lean < 4.26:  lean_obj_res superopt_lean_bridge_call(b_lean_obj_arg request,
 *                                                          lean_obj_arg world);
 *     Lean >= 4.26: lean_obj_res superopt_lean_bridge_call(b_lean_obj_arg request);
 *
 * chosen from LEAN_VERSION_MAJOR/MINOR (lean/version.h, included by lean.h); define
 * SUPEROPT_LEAN_IO_WORLD=0 or 1 to force one (e.g. for a nightly between the two).
 *
 * Ownership: `request` is borrowed (`@&`): read, never lean_dec'ed. The result is a new
 * IO result owned by the caller.
 *
 * Results:
 *   * the bridge produced response bytes (status ok, or any failure it could still encode,
 *     see superopt_bridge.h): `IO` success with those bytes. A Python-side or start-up
 *     failure is thus an ordinary wire error response {"v": 2, "kind": "error", ...}, and
 *     the Lean decoder handles every error in one place;
 *   * no bytes at all (out of memory, or a bug in the bridge): `IO` failure
 *     IO.userError "superopt bridge: no response (status N, name)".
 */
#include <lean/lean.h>

#include <stdio.h>
#include <string.h>

#include "superopt_bridge.h"

#ifndef SUPEROPT_LEAN_IO_WORLD
#if LEAN_VERSION_MAJOR > 4 || (LEAN_VERSION_MAJOR == 4 && LEAN_VERSION_MINOR >= 26)
#define SUPEROPT_LEAN_IO_WORLD 0
#else
#define SUPEROPT_LEAN_IO_WORLD 1
#endif
#endif

/* Visible from a shared library too (precompileModules, #eval in the editor). */
#if defined(_WIN32)
#define SUPEROPT_LEAN_SHIM_EXPORT __declspec(dllexport)
#else
#define SUPEROPT_LEAN_SHIM_EXPORT __attribute__((visibility("default")))
#endif

/* The call itself, the same for both signatures. */
static lean_obj_res superopt_lean_bridge_call_impl(b_lean_obj_arg request) {
    uint8_t *response = NULL;
    size_t response_len = 0;
    const int status = superopt_bridge_call(lean_sarray_cptr(request), lean_sarray_size(request),
                                            &response, &response_len);
    if (response == NULL) {
        char message[128];
        snprintf(message, sizeof message, "superopt bridge: no response (status %d, %s)", status,
                 superopt_bridge_status_name(status));
        return lean_io_result_mk_error(lean_mk_io_user_error(lean_mk_string(message)));
    }
    lean_object *bytes = lean_alloc_sarray(1, response_len, response_len);
    if (response_len != 0) memcpy(lean_sarray_cptr(bytes), response, response_len);
    superopt_bridge_free(response);
    return lean_io_result_mk_ok(bytes);
}

#if SUPEROPT_LEAN_IO_WORLD
SUPEROPT_LEAN_SHIM_EXPORT lean_obj_res superopt_lean_bridge_call(b_lean_obj_arg request,
                                                                 lean_obj_arg world) {
    (void)world; /* the world token is a scalar (lean_box(0)): nothing to release */
    return superopt_lean_bridge_call_impl(request);
}
#else
SUPEROPT_LEAN_SHIM_EXPORT lean_obj_res superopt_lean_bridge_call(b_lean_obj_arg request) {
    return superopt_lean_bridge_call_impl(request);
}
#endif
