// bridge.cpp: the C ABI of superopt_bridge.h, over CPython embedded with pybind11.
//
// Shape of every entry point (the pybind11 embedding rules of docs STYLE.md):
//   * one interpreter per process, started once under std::call_once, never finalised;
//     the starting thread drops the GIL right after start-up, so any thread may enter;
//   * the GIL is taken at each entry (py::gil_scoped_acquire) and every Python object
//     lives inside that scope: no pybind11 object outlives a call, none is static;
//   * py::error_already_set, std::exception and everything else are caught at each entry,
//     so nothing is thrown across the C ABI; failures become wire error responses
//     (wire_error.hpp);
//   * types are checked at the boundary: the request goes in as `bytes`, and the result
//     must be non-empty `bytes`, copied out into a malloc'd buffer.
//
// Built by bridge/build.sh (see bridge/README.md for the flags).

#include "superopt_bridge.h"

#include <pybind11/embed.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "wire_error.hpp"

namespace py = pybind11;

#ifndef SUPEROPT_DEFAULT_PYTHON_EXECUTABLE
// build.sh defines this as the `sys.executable` of the python3 whose headers and libpython
// the library is built against; empty means: let CPython work out its own program name.
#define SUPEROPT_DEFAULT_PYTHON_EXECUTABLE ""
#endif

namespace {

/// Longest error message (bytes) put into a response; longer ones are cut.
constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 20;

/// Module and function the bridge calls.
constexpr const char *kModule = "superopt.bridge";
constexpr const char *kFunction = "handle";

/// What starting the interpreter gave. Plain C++ only (no pybind11 objects in statics);
/// allocated once and never destroyed, like the interpreter itself, so that threads still
/// inside a call at process exit never see it torn down.
struct StartState {
    int status = SUPEROPT_BRIDGE_ERR_INIT;
    std::string message = "the Python interpreter was never started";
};

std::once_flag g_start_once;
StartState *g_start = nullptr;

/// Environment variable `name`, or `fallback` when unset.
std::string env_or(const char *name, const char *fallback) {
    const char *value = std::getenv(name);
    return value != nullptr ? std::string(value) : std::string(fallback);
}

/// `s` split at ':' with empty entries dropped.
std::vector<std::string> split_path_list(const std::string &s) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= s.size()) {
        std::size_t end = s.find(':', start);
        if (end == std::string::npos) end = s.size();
        if (end > start) parts.push_back(s.substr(start, end - start));
        start = end + 1;
    }
    return parts;
}

/// Put `entries` at the front of sys.path, in order, moving any that are already there.
/// Needs the GIL; throws py::error_already_set.
void prepend_sys_path(const std::vector<std::string> &entries) {
    py::list sys_path = py::module_::import("sys").attr("path");
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        // File-system encoding, not UTF-8: a path is whatever bytes the OS gave us.
        py::object entry = py::reinterpret_steal<py::object>(
            PyUnicode_DecodeFSDefaultAndSize(it->data(), static_cast<Py_ssize_t>(it->size())));
        if (!entry) throw py::error_already_set();
        while (sys_path.contains(entry)) sys_path.attr("remove")(entry);
        sys_path.attr("insert")(0, entry);
    }
}

/// Make libpython's symbols global, so that extension modules (which do not link
/// libpython) resolve even when this library was dlopen'ed with RTLD_LOCAL.
void promote_libpython_to_global() {
    Dl_info info;
    if (dladdr(reinterpret_cast<void *>(&Py_InitializeFromConfig), &info) != 0 &&
        info.dli_fname != nullptr) {
        // Deliberately never dlclose'd: the interpreter is never finalised either.
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    }
}

/// Start the interpreter (or adopt the host's), apply SUPEROPT_PYTHONPATH, drop the GIL.
/// Runs once per process; never throws.
void start_interpreter(StartState &state) {
    try {
        const std::vector<std::string> paths =
            split_path_list(env_or("SUPEROPT_PYTHONPATH", ""));
        if (Py_IsInitialized() != 0) {
            // Loaded into a process that already runs Python: use that interpreter, and
            // leave its GIL and its lifetime to it.
            py::gil_scoped_acquire gil;
            try {
                prepend_sys_path(paths);
            } catch (py::error_already_set &e) {
                state.message = std::string("cannot apply SUPEROPT_PYTHONPATH: ") + e.what();
                return;
            }
            state.status = SUPEROPT_BRIDGE_OK;
            state.message.clear();
            return;
        }

        promote_libpython_to_global();

        PyConfig config;
        PyConfig_InitPythonConfig(&config);
        config.parse_argv = 0;
        // The host (Lean) owns SIGINT and friends.
        config.install_signal_handlers = 0;
        const std::string program =
            env_or("SUPEROPT_PYTHON_EXECUTABLE", SUPEROPT_DEFAULT_PYTHON_EXECUTABLE);
        if (!program.empty()) {
            // sys.executable, sys.prefix and a virtual environment's site-packages follow
            // from the program name; worker subprocesses then run this Python, not the host.
            PyStatus status =
                PyConfig_SetBytesString(&config, &config.program_name, program.c_str());
            if (PyStatus_Exception(status) != 0) {
                PyConfig_Clear(&config);
                state.message = std::string("cannot set the Python program name to '") +
                                program + "': " +
                                (status.err_msg != nullptr ? status.err_msg : "unknown error");
                return;
            }
        }
        // Clears `config`; throws std::runtime_error if CPython does not start.
        py::initialize_interpreter(&config, 0, nullptr, /*add_program_dir_to_path=*/false);

        // This thread holds the GIL now.
        std::string path_error;
        try {
            prepend_sys_path(paths);
        } catch (py::error_already_set &e) {
            path_error = std::string("cannot apply SUPEROPT_PYTHONPATH: ") + e.what();
        }
        // Drop the GIL for good: from here on each entry takes it (gil_scoped_acquire).
        // The thread state stays registered as the main one; it is never restored.
        (void)PyEval_SaveThread();

        if (!path_error.empty()) {
            state.message = path_error;
            return;
        }
        state.status = SUPEROPT_BRIDGE_OK;
        state.message.clear();
    } catch (const std::exception &e) {
        state.status = SUPEROPT_BRIDGE_ERR_INIT;
        state.message = std::string("cannot start the Python interpreter: ") + e.what();
    } catch (...) {
        state.status = SUPEROPT_BRIDGE_ERR_INIT;
        state.message = "cannot start the Python interpreter: unknown C++ exception";
    }
}

/// The start-up outcome, starting the interpreter on first use. Thread-safe.
/// Throws std::bad_alloc only.
const StartState &ensure_started() {
    std::call_once(g_start_once, [] {
        g_start = new StartState();  // never deleted; see StartState
        start_interpreter(*g_start);
    });
    return *g_start;
}

/// Store `bytes` into a new malloc'd buffer at *response. False when out of memory.
bool copy_out(const char *bytes, std::size_t n, uint8_t **response, std::size_t *response_len) {
    auto *buffer = static_cast<uint8_t *>(std::malloc(n == 0 ? 1 : n));
    if (buffer == nullptr) return false;
    if (n != 0) std::memcpy(buffer, bytes, n);
    *response = buffer;
    *response_len = n;
    return true;
}

/// Write the error response for `message` to *response and return `status`
/// (SUPEROPT_BRIDGE_ERR_NOMEM if even that fails). Never throws.
int fail(int status, std::string_view message, uint8_t **response, std::size_t *response_len) {
    *response = nullptr;
    *response_len = 0;
    try {
        std::string text(message.substr(0, kMaxMessageBytes));
        if (message.size() > kMaxMessageBytes) text += " [truncated]";
        const std::string bytes = superopt::bridge::error_response("internal", text, "");
        if (!copy_out(bytes.data(), bytes.size(), response, response_len)) {
            return SUPEROPT_BRIDGE_ERR_NOMEM;
        }
        return status;
    } catch (...) {  // std::bad_alloc
        return SUPEROPT_BRIDGE_ERR_NOMEM;
    }
}

/// Import superopt.bridge, call handle(request) and copy its bytes out. Needs the
/// interpreter started; takes the GIL itself. Throws std::bad_alloc and, for bugs in this
/// file, other C++ exceptions; Python errors come back as statuses.
int call_handle(const uint8_t *request, std::size_t request_len, uint8_t **response,
                std::size_t *response_len) {
    int status = SUPEROPT_BRIDGE_OK;
    std::string message;
    {
        py::gil_scoped_acquire gil;
        // Every Python object of this call lives in this block, inside the GIL.
        py::object handle;
        try {
            handle = py::module_::import(kModule).attr(kFunction);
        } catch (py::error_already_set &e) {
            status = SUPEROPT_BRIDGE_ERR_IMPORT;
            message = std::string("cannot import ") + kModule + "." + kFunction + ": " + e.what();
        }
        if (status == SUPEROPT_BRIDGE_OK) {
            try {
                py::bytes payload(reinterpret_cast<const char *>(request), request_len);
                py::object result = handle(payload);
                if (!py::isinstance<py::bytes>(result)) {
                    status = SUPEROPT_BRIDGE_ERR_PYTHON;
                    message = std::string(kModule) + "." + kFunction + " returned " +
                              Py_TYPE(result.ptr())->tp_name + ", expected bytes";
                } else {
                    char *data = nullptr;
                    Py_ssize_t size = 0;
                    if (PyBytes_AsStringAndSize(result.ptr(), &data, &size) != 0) {
                        throw py::error_already_set();
                    }
                    if (size == 0) {
                        status = SUPEROPT_BRIDGE_ERR_PYTHON;
                        message = std::string(kModule) + "." + kFunction +
                                  " returned empty bytes, expected a msgpack map";
                    } else if (!copy_out(data, static_cast<std::size_t>(size), response,
                                         response_len)) {
                        return SUPEROPT_BRIDGE_ERR_NOMEM;
                    } else {
                        return SUPEROPT_BRIDGE_OK;
                    }
                }
            } catch (py::error_already_set &e) {
                status = SUPEROPT_BRIDGE_ERR_PYTHON;
                message = std::string(kModule) + "." + kFunction + " raised " + e.what();
            }
        }
    }  // Python objects released, then the GIL.
    return fail(status, message, response, response_len);
}

}  // namespace

extern "C" {

SUPEROPT_BRIDGE_API int superopt_bridge_init(const char *python_path_or_null) {
    try {
        const StartState &state = ensure_started();
        if (state.status != SUPEROPT_BRIDGE_OK) return state.status;
        if (python_path_or_null == nullptr || python_path_or_null[0] == '\0') {
            return SUPEROPT_BRIDGE_OK;
        }
        py::gil_scoped_acquire gil;
        try {
            prepend_sys_path({std::string(python_path_or_null)});
        } catch (py::error_already_set &) {
            return SUPEROPT_BRIDGE_ERR_INTERNAL;
        }
        return SUPEROPT_BRIDGE_OK;
    } catch (const std::bad_alloc &) {
        return SUPEROPT_BRIDGE_ERR_NOMEM;
    } catch (...) {
        return SUPEROPT_BRIDGE_ERR_INTERNAL;
    }
}

SUPEROPT_BRIDGE_API int superopt_bridge_call(const uint8_t *request, size_t request_len,
                                             uint8_t **response, size_t *response_len) {
    if (response == nullptr || response_len == nullptr) {
        if (response != nullptr) *response = nullptr;
        if (response_len != nullptr) *response_len = 0;
        return SUPEROPT_BRIDGE_ERR_ARGUMENT;
    }
    *response = nullptr;
    *response_len = 0;
    try {
        if (request == nullptr && request_len != 0) {
            return fail(SUPEROPT_BRIDGE_ERR_ARGUMENT,
                        "request is NULL but request_len is " + std::to_string(request_len),
                        response, response_len);
        }
        if (request_len > static_cast<size_t>(PY_SSIZE_T_MAX)) {
            return fail(SUPEROPT_BRIDGE_ERR_ARGUMENT,
                        "request_len " + std::to_string(request_len) + " exceeds PY_SSIZE_T_MAX",
                        response, response_len);
        }
        const StartState &state = ensure_started();
        if (state.status != SUPEROPT_BRIDGE_OK) {
            return fail(state.status, state.message, response, response_len);
        }
        return call_handle(request, request_len, response, response_len);
    } catch (const std::bad_alloc &) {
        superopt_bridge_free(*response);
        *response = nullptr;
        *response_len = 0;
        return SUPEROPT_BRIDGE_ERR_NOMEM;
    } catch (const std::exception &e) {
        superopt_bridge_free(*response);
        return fail(SUPEROPT_BRIDGE_ERR_INTERNAL,
                    std::string("C++ exception in the superopt bridge: ") + e.what(), response,
                    response_len);
    } catch (...) {
        superopt_bridge_free(*response);
        return fail(SUPEROPT_BRIDGE_ERR_INTERNAL,
                    "unknown C++ exception in the superopt bridge", response, response_len);
    }
}

SUPEROPT_BRIDGE_API void superopt_bridge_free(uint8_t *response) { std::free(response); }

SUPEROPT_BRIDGE_API const char *superopt_bridge_status_name(int status) {
    switch (status) {
        case SUPEROPT_BRIDGE_OK: return "ok";
        case SUPEROPT_BRIDGE_ERR_ARGUMENT: return "argument";
        case SUPEROPT_BRIDGE_ERR_INIT: return "init";
        case SUPEROPT_BRIDGE_ERR_IMPORT: return "import";
        case SUPEROPT_BRIDGE_ERR_PYTHON: return "python";
        case SUPEROPT_BRIDGE_ERR_NOMEM: return "nomem";
        case SUPEROPT_BRIDGE_ERR_INTERNAL: return "internal";
        default: return "unknown";
    }
}

}  // extern "C"
