/*
 * superopt_bridge.h: the C ABI between the Lean 4 half and the Python backend.
 *
 * One request in, one response out, both msgpack bytes (the wire of docs/wire.md). The
 * library embeds CPython through pybind11 and forwards every request to
 * `superopt.bridge.handle(request: bytes) -> bytes`.
 *
 * Threads: every function may be called from any thread, concurrently. Calls into Python
 * are serialised by the GIL, which the library takes at each entry and drops on return;
 * between calls no thread of the library holds it.
 *
 * Interpreter: started once per process, on the first call of superopt_bridge_init or
 * superopt_bridge_call, and never finalised (CPython cannot be restarted reliably, and
 * finalising at exit would race with threads still inside Python). If the host process
 * already runs an interpreter (the library was loaded into Python), that one is used.
 *
 * Errors: no C++ exception and no Python exception ever crosses these functions. Every
 * failure that can be reported as bytes is reported as a wire error response:
 *
 *     {"v": 2, "kind": "error",
 *      "error": {"kind": "internal", "message": <what failed>, "path": ""}}
 *
 * encoded exactly as msgpack-python's `packb` encodes that map (same key order, smallest
 * integer and string forms), so that Lean decodes one shape for every error.
 *
 * Environment, read when the interpreter starts:
 *   SUPEROPT_PYTHONPATH        entries joined by ':' put at the front of sys.path, first
 *                              entry first, moved there if already present (so the Lean
 *                              executable finds python/ of the checkout);
 *   SUPEROPT_PYTHON_EXECUTABLE the Python program the embedded interpreter takes as its own
 *                              (sys.executable: prefix, virtual environment, and the program
 *                              that worker subprocesses run); default: the python3 the
 *                              library was built with; empty: let CPython decide.
 *   PYTHONPATH, PYTHONHOME and the other PYTHON* variables keep their usual meaning.
 *
 * Example (C):
 *
 *     static const uint8_t ping[] = {0x82, 0xa1, 'v', 0x02, 0xa4, 'k', 'i', 'n', 'd',
 *                                    0xa4, 'p', 'i', 'n', 'g'};
 *     uint8_t *resp = NULL;
 *     size_t resp_len = 0;
 *     int status = superopt_bridge_call(ping, sizeof ping, &resp, &resp_len);
 *     if (resp != NULL) {
 *         use(resp, resp_len);           // a msgpack map with "v": 2, also when status != 0
 *         superopt_bridge_free(resp);
 *     }
 */
#ifndef SUPEROPT_BRIDGE_H
#define SUPEROPT_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define SUPEROPT_BRIDGE_API __declspec(dllexport)
#else
#define SUPEROPT_BRIDGE_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The wire protocol version this library writes into its own error responses. */
#define SUPEROPT_BRIDGE_WIRE_VERSION 2

/**
 * Status codes returned by superopt_bridge_init and superopt_bridge_call.
 *
 * For each code, "response" says what superopt_bridge_call leaves in *response.
 */
enum superopt_bridge_status {
    /** handle() ran and returned bytes; response: those bytes (which may themselves be a
        wire error response: a malformed request is answered, not failed). */
    SUPEROPT_BRIDGE_OK = 0,
    /** A NULL out-pointer, or request == NULL with request_len > 0; response: an error
        response when response and response_len are non-NULL, else nothing is written. */
    SUPEROPT_BRIDGE_ERR_ARGUMENT = 1,
    /** The interpreter could not start (this process will not get one); response: an
        error response. */
    SUPEROPT_BRIDGE_ERR_INIT = 2,
    /** `superopt.bridge` or its `handle` could not be imported (retried on the next
        call); response: an error response naming the Python exception. */
    SUPEROPT_BRIDGE_ERR_IMPORT = 3,
    /** handle() raised, or returned something other than non-empty bytes; response: an
        error response with the exception type, message and traceback. */
    SUPEROPT_BRIDGE_ERR_PYTHON = 4,
    /** Out of memory; response: NULL, *response_len = 0. */
    SUPEROPT_BRIDGE_ERR_NOMEM = 5,
    /** Any other C++ failure inside the library; response: an error response. */
    SUPEROPT_BRIDGE_ERR_INTERNAL = 6
};

/**
 * Start the embedded interpreter (once per process) and prepend `python_path` to sys.path.
 *
 * Optional: superopt_bridge_call starts the interpreter itself. Calling this first lets a
 * host report a broken Python set-up early and add a path without the environment.
 * SUPEROPT_PYTHONPATH is applied when the interpreter starts, then `python_path` (so the
 * argument comes first in sys.path). A path already in sys.path is moved to the front,
 * not added twice. Later calls, after the interpreter is up, only prepend their
 * `python_path`.
 *
 * @param python_path_or_null  a directory (UTF-8, NUL-terminated) or NULL; borrowed.
 * @return SUPEROPT_BRIDGE_OK, SUPEROPT_BRIDGE_ERR_INIT (no interpreter in this process),
 *         or SUPEROPT_BRIDGE_ERR_INTERNAL (the path could not be added).
 */
SUPEROPT_BRIDGE_API int superopt_bridge_init(const char *python_path_or_null);

/**
 * Send one msgpack request to `superopt.bridge.handle` and return its msgpack response.
 *
 * @param request       the request bytes; borrowed, only read during the call. May be
 *                      NULL when request_len is 0.
 * @param request_len   number of bytes at request.
 * @param response      out: a buffer allocated by this library with malloc, owned by the
 *                      caller from now on, released with superopt_bridge_free; NULL when no
 *                      response could be produced (SUPEROPT_BRIDGE_ERR_NOMEM, or the NULL
 *                      out-pointer case of SUPEROPT_BRIDGE_ERR_ARGUMENT).
 * @param response_len  out: number of bytes at *response (0 when *response is NULL).
 * @return a superopt_bridge_status. Whatever the status, when *response is non-NULL it is a
 *         msgpack map holding "v"; for every non-zero status it is the error response
 *         described at the top of this file, with "kind": "internal".
 *
 * Thread-safe; blocks while another thread runs Python (the GIL).
 */
SUPEROPT_BRIDGE_API int superopt_bridge_call(const uint8_t *request, size_t request_len,
                                             uint8_t **response, size_t *response_len);

/** Release a response of superopt_bridge_call; NULL is ignored. Never pass other memory. */
SUPEROPT_BRIDGE_API void superopt_bridge_free(uint8_t *response);

/**
 * A static, NUL-terminated name for a status code ("ok", "argument", "init", "import",
 * "python", "nomem", "internal"; "unknown" for any other value). Never free it.
 */
SUPEROPT_BRIDGE_API const char *superopt_bridge_status_name(int status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SUPEROPT_BRIDGE_H */
