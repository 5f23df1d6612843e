// bridge_test.cpp: drives the C ABI of bridge/superopt_bridge.h as the Lean side would.
//
// Usage:
//   bridge_test [--lib PATH] [--init-path DIR] [--stub] [--expect-import-failure]
//               [--expect-init-failure] [--expect-executable PATH] [--dump DIR]
//               [GOLDEN.request.msgpack ...]
//
//   --lib PATH                load the bridge with dlopen(PATH, RTLD_NOW | RTLD_LOCAL)
//                             instead of the copy linked in (required when built with
//                             -DSUPEROPT_BRIDGE_TEST_NO_LINK);
//   --init-path DIR           pass DIR to superopt_bridge_init (default: NULL);
//   --stub                    the superopt.bridge on the path is the test stub of
//                             tests/bridge/test_bridge.py: also run the cases that need it
//                             (Python exceptions, non-bytes results, sys.executable);
//   --expect-import-failure   superopt.bridge cannot be imported: check that every call
//                             answers an error response with status "import";
//   --expect-init-failure     the interpreter cannot start (e.g. PYTHONHOME=/nonexistent):
//                             check status "init" and an error response;
//   --expect-executable PATH  (with --stub) sys.executable must equal PATH;
//   --dump DIR                write responses and wire_error.hpp samples to DIR, for the
//                             pytest to compare with msgpack-python byte for byte;
//   GOLDEN files              each X.request.msgpack is sent; the response must equal
//                             X.response.msgpack byte for byte when that file exists, and
//                             be a msgpack map with "v" == 2 otherwise.
//
// Prints one "PASS name" / "FAIL name: why" line per check, then "N passed, M failed".
// Exit status 0 iff nothing failed.

#include "superopt_bridge.h"
#include "wire_error.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------
// The ABI, through function pointers: linked symbols, or dlsym'ed from --lib.

struct Api {
    int (*init)(const char *) = nullptr;
    int (*call)(const uint8_t *, size_t, uint8_t **, size_t *) = nullptr;
    void (*free_response)(uint8_t *) = nullptr;
    const char *(*status_name)(int) = nullptr;
};

Api g_api;

bool load_api(const std::string &lib, std::string &error) {
    if (lib.empty()) {
#ifdef SUPEROPT_BRIDGE_TEST_NO_LINK
        error = "built without the library linked in: pass --lib PATH";
        return false;
#else
        g_api.init = &superopt_bridge_init;
        g_api.call = &superopt_bridge_call;
        g_api.free_response = &superopt_bridge_free;
        g_api.status_name = &superopt_bridge_status_name;
        return true;
#endif
    }
    void *handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        error = std::string("dlopen failed: ") + dlerror();
        return false;
    }
    g_api.init = reinterpret_cast<int (*)(const char *)>(dlsym(handle, "superopt_bridge_init"));
    g_api.call = reinterpret_cast<int (*)(const uint8_t *, size_t, uint8_t **, size_t *)>(
        dlsym(handle, "superopt_bridge_call"));
    g_api.free_response =
        reinterpret_cast<void (*)(uint8_t *)>(dlsym(handle, "superopt_bridge_free"));
    g_api.status_name =
        reinterpret_cast<const char *(*)(int)>(dlsym(handle, "superopt_bridge_status_name"));
    if (!g_api.init || !g_api.call || !g_api.free_response || !g_api.status_name) {
        error = "a superopt_bridge_* symbol is missing from " + lib;
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------
// A small msgpack reader (everything the wire uses) and writer (maps of str to str/uint).

struct Value {
    enum Kind { Nil, Bool, Int, Float, Str, Bin, Array, Map, Ext } kind = Nil;
    bool b = false;
    long long i = 0;  // Int (uint64 above INT64_MAX is not needed here)
    double f = 0;
    std::string s;  // Str, Bin, Ext payload
    std::vector<Value> items;                         // Array
    std::vector<std::pair<Value, Value>> entries;     // Map, in wire order

    const Value *get(const std::string &key) const {
        if (kind != Map) return nullptr;
        for (const auto &kv : entries) {
            if (kv.first.kind == Str && kv.first.s == key) return &kv.second;
        }
        return nullptr;
    }
};

class Reader {
public:
    Reader(const uint8_t *p, size_t n) : p_(p), n_(n) {}

    // Decodes exactly one value spanning all the bytes; false with `error` otherwise.
    bool read_all(Value &v, std::string &error) {
        if (!read(v, 0)) {
            error = error_.empty() ? "truncated" : error_;
            return false;
        }
        if (pos_ != n_) {
            error = "trailing bytes after the first value";
            return false;
        }
        return true;
    }

private:
    bool need(size_t k) { return pos_ + k <= n_; }
    uint64_t be(size_t k) {
        uint64_t x = 0;
        for (size_t j = 0; j < k; ++j) x = (x << 8) | p_[pos_ + j];
        pos_ += k;
        return x;
    }
    bool bytes(size_t k, std::string &out) {
        if (!need(k)) return false;
        out.assign(reinterpret_cast<const char *>(p_ + pos_), k);
        pos_ += k;
        return true;
    }
    bool str(size_t k, Value &v) {
        v.kind = Value::Str;
        if (!bytes(k, v.s)) return false;
        if (superopt::bridge::sanitize_utf8(v.s) != v.s) {
            error_ = "a str that is not valid UTF-8";
            return false;
        }
        return true;
    }
    bool array(size_t k, Value &v, int depth) {
        v.kind = Value::Array;
        for (size_t j = 0; j < k; ++j) {
            v.items.emplace_back();
            if (!read(v.items.back(), depth + 1)) return false;
        }
        return true;
    }
    bool map(size_t k, Value &v, int depth) {
        v.kind = Value::Map;
        for (size_t j = 0; j < k; ++j) {
            v.entries.emplace_back();
            if (!read(v.entries.back().first, depth + 1)) return false;
            if (!read(v.entries.back().second, depth + 1)) return false;
        }
        return true;
    }
    bool read(Value &v, int depth) {
        if (depth > 64) {
            error_ = "nested too deep";
            return false;
        }
        if (!need(1)) return false;
        const uint8_t c = p_[pos_++];
        if (c <= 0x7f) { v.kind = Value::Int; v.i = c; return true; }
        if (c >= 0xe0) { v.kind = Value::Int; v.i = static_cast<int8_t>(c); return true; }
        if ((c & 0xf0) == 0x80) return map(c & 0x0f, v, depth);
        if ((c & 0xf0) == 0x90) return array(c & 0x0f, v, depth);
        if ((c & 0xe0) == 0xa0) return str(c & 0x1f, v);
        switch (c) {
            case 0xc0: v.kind = Value::Nil; return true;
            case 0xc2: v.kind = Value::Bool; v.b = false; return true;
            case 0xc3: v.kind = Value::Bool; v.b = true; return true;
            case 0xc4: case 0xc5: case 0xc6: {
                const size_t w = size_t{1} << (c - 0xc4);
                if (!need(w)) return false;
                v.kind = Value::Bin;
                return bytes(be(w), v.s);
            }
            case 0xc7: case 0xc8: case 0xc9: {
                const size_t w = size_t{1} << (c - 0xc7);
                if (!need(w + 1)) return false;
                const size_t k = be(w);
                ++pos_;  // ext type
                v.kind = Value::Ext;
                return bytes(k, v.s);
            }
            case 0xca: {
                if (!need(4)) return false;
                uint32_t u = static_cast<uint32_t>(be(4));
                float f;
                std::memcpy(&f, &u, 4);
                v.kind = Value::Float; v.f = f;
                return true;
            }
            case 0xcb: {
                if (!need(8)) return false;
                uint64_t u = be(8);
                double d;
                std::memcpy(&d, &u, 8);
                v.kind = Value::Float; v.f = d;
                return true;
            }
            case 0xcc: case 0xcd: case 0xce: case 0xcf: {
                const size_t w = size_t{1} << (c - 0xcc);
                if (!need(w)) return false;
                v.kind = Value::Int; v.i = static_cast<long long>(be(w));
                return true;
            }
            case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
                const size_t w = size_t{1} << (c - 0xd0);
                if (!need(w)) return false;
                const uint64_t u = be(w);
                const int shift = static_cast<int>(64 - 8 * w);
                v.kind = Value::Int;
                v.i = static_cast<long long>(u << shift) >> shift;
                return true;
            }
            case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: {
                const size_t k = size_t{1} << (c - 0xd4);
                if (!need(1 + k)) return false;
                ++pos_;
                v.kind = Value::Ext;
                return bytes(k, v.s);
            }
            case 0xd9: case 0xda: case 0xdb: {
                const size_t w = size_t{1} << (c - 0xd9);
                if (!need(w)) return false;
                return str(be(w), v);
            }
            case 0xdc: case 0xdd: {
                const size_t w = c == 0xdc ? 2 : 4;
                if (!need(w)) return false;
                return array(be(w), v, depth);
            }
            case 0xde: case 0xdf: {
                const size_t w = c == 0xde ? 2 : 4;
                if (!need(w)) return false;
                return map(be(w), v, depth);
            }
            default:  // 0xc1: never used
                error_ = "byte 0xc1";
                return false;
        }
    }

    const uint8_t *p_;
    size_t n_;
    size_t pos_ = 0;
    std::string error_;
};

/// A msgpack map of string keys to string or non-negative integer values, in order.
struct Field {
    std::string key;
    bool is_int;
    std::string text;
    uint32_t number;
};
Field str_field(std::string key, std::string text) {
    return {std::move(key), false, std::move(text), 0};
}
Field int_field(std::string key, uint32_t n) { return {std::move(key), true, "", n}; }

std::string pack(const std::vector<Field> &fields) {
    std::string out;
    out.push_back(static_cast<char>(0x80 | fields.size()));  // up to 15 fields
    for (const auto &f : fields) {
        superopt::bridge::put_str(out, f.key);
        if (!f.is_int) {
            superopt::bridge::put_str(out, f.text);
        } else if (f.number <= 0x7f) {
            out.push_back(static_cast<char>(f.number));
        } else {
            out.push_back(static_cast<char>(0xce));
            for (int shift = 24; shift >= 0; shift -= 8) {
                out.push_back(static_cast<char>((f.number >> shift) & 0xff));
            }
        }
    }
    return out;
}

std::string ping_request() { return pack({int_field("v", 2), str_field("kind", "ping")}); }

// ---------------------------------------------------------------------------------------
// Calls and checks.

struct Response {
    int status = -1;
    bool has_bytes = false;
    std::string bytes;
};

Response call_bridge(const std::string &request, bool null_request = false) {
    Response r;
    uint8_t *out = nullptr;
    size_t out_len = 0;
    const auto *data = null_request ? nullptr : reinterpret_cast<const uint8_t *>(request.data());
    r.status = g_api.call(data, request.size(), &out, &out_len);
    if (out != nullptr) {
        r.has_bytes = true;
        r.bytes.assign(reinterpret_cast<const char *>(out), out_len);
        g_api.free_response(out);
    }
    return r;
}

std::string status_text(int status) {
    return std::to_string(status) + " (" + g_api.status_name(status) + ")";
}

/// Empty when `r` carries a msgpack map with "v" == 2 and, if given, "kind" == kind;
/// otherwise why not. Fills `decoded`.
std::string check_map(const Response &r, const char *kind, Value &decoded) {
    decoded = Value();
    if (!r.has_bytes) return "no response bytes (status " + status_text(r.status) + ")";
    std::string error;
    Reader reader(reinterpret_cast<const uint8_t *>(r.bytes.data()), r.bytes.size());
    if (!reader.read_all(decoded, error)) return "response is not msgpack: " + error;
    if (decoded.kind != Value::Map) return "response is not a msgpack map";
    const Value *v = decoded.get("v");
    if (v == nullptr || v->kind != Value::Int || v->i != 2) return "response has no \"v\": 2";
    if (kind != nullptr) {
        const Value *k = decoded.get("kind");
        if (k == nullptr || k->kind != Value::Str) return "response has no str \"kind\"";
        if (k->s != kind) return "response kind is '" + k->s + "', expected '" + kind + "'";
    }
    return "";
}

/// check_map for kind "error" plus the error map's str fields kind/message/path.
std::string check_error(const Response &r, Value &decoded, std::string *message = nullptr,
                        std::string *error_kind = nullptr) {
    std::string why = check_map(r, "error", decoded);
    if (!why.empty()) return why;
    const Value *e = decoded.get("error");
    if (e == nullptr || e->kind != Value::Map) return "error response without an \"error\" map";
    for (const char *field : {"kind", "message", "path"}) {
        const Value *x = e->get(field);
        if (x == nullptr || x->kind != Value::Str) {
            return std::string("error map without str \"") + field + "\"";
        }
    }
    if (message != nullptr) *message = e->get("message")->s;
    if (error_kind != nullptr) *error_kind = e->get("kind")->s;
    return "";
}

int g_passed = 0;
int g_failed = 0;
std::string g_dump_dir;

void report(const std::string &name, const std::string &why) {
    if (why.empty()) {
        ++g_passed;
        std::printf("PASS %s\n", name.c_str());
    } else {
        ++g_failed;
        std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
    }
    std::fflush(stdout);
}

void dump(const std::string &name, const std::string &bytes) {
    if (g_dump_dir.empty()) return;
    std::ofstream(g_dump_dir + "/" + name, std::ios::binary) << bytes;
}

bool read_file(const std::string &path, std::string &out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return true;
}

bool file_exists(const std::string &path) { return static_cast<bool>(std::ifstream(path)); }

std::string hex_prefix(const std::string &s, size_t n = 24) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (size_t j = 0; j < s.size() && j < n; ++j) {
        const auto c = static_cast<unsigned char>(s[j]);
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    if (s.size() > n) out += "...";
    return out;
}

// ---------------------------------------------------------------------------------------
// The checks.

/// wire_error.hpp alone: smallest string forms at each boundary, and UTF-8 repair.
void test_wire_error_writer() {
    struct Case { size_t n; std::string header; };
    const std::vector<Case> cases = {
        {0, "\xa0"}, {1, "\xa1"}, {31, "\xbf"}, {32, std::string("\xd9\x20", 2)},
        {255, "\xd9\xff"}, {256, std::string("\xda\x01\x00", 3)}, {65535, "\xda\xff\xff"},
        {65536, std::string("\xdb\x00\x01\x00\x00", 5)},
    };
    for (const auto &c : cases) {
        const std::string message(c.n, 'a');
        const std::string bytes = superopt::bridge::error_response("internal", message, "");
        const std::string head =
            std::string("\x83\xa1v\x02\xa4kind\xa5" "error\xa5" "error\x83\xa4kind\xa8internal"
                        "\xa7message");
        const std::string expected = head + c.header + message + std::string("\xa4path\xa0");
        const std::string name = "wire_error_str_" + std::to_string(c.n);
        report(name, bytes == expected ? "" : "bytes differ: " + hex_prefix(bytes, 64));
        dump("writer_" + std::to_string(c.n) + ".msgpack", bytes);
        dump("writer_" + std::to_string(c.n) + ".message", message);
    }
    // UTF-8 repair: each maximal ill-formed subpart becomes one U+FFFD.
    const std::vector<std::pair<std::string, std::string>> repairs = {
        {"h\xc3\xa9llo \xe2\x9c\x93", "h\xc3\xa9llo \xe2\x9c\x93"},  // valid, unchanged
        {"ab\xff" "cd", "ab\xef\xbf\xbd" "cd"},
        {"x\xe2\x9c", "x\xef\xbf\xbd"},                       // truncated 3-byte sequence
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // a surrogate: 3 subparts
        {"\xf0\x9f\x98\x80!", "\xf0\x9f\x98\x80!"},           // 4-byte, valid
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},             // overlong
    };
    int index = 0;
    for (const auto &r : repairs) {
        const std::string got = superopt::bridge::sanitize_utf8(r.first);
        report("wire_error_utf8_" + std::to_string(index),
               got == r.second ? ""
                               : "got " + hex_prefix(got) + ", expected " + hex_prefix(r.second));
        const std::string bytes = superopt::bridge::error_response("internal", r.first, "");
        dump("writer_utf8_" + std::to_string(index) + ".msgpack", bytes);
        dump("writer_utf8_" + std::to_string(index) + ".message", r.first);
        ++index;
    }
}

void test_status_names() {
    const std::vector<std::pair<int, std::string>> names = {
        {SUPEROPT_BRIDGE_OK, "ok"}, {SUPEROPT_BRIDGE_ERR_ARGUMENT, "argument"},
        {SUPEROPT_BRIDGE_ERR_INIT, "init"}, {SUPEROPT_BRIDGE_ERR_IMPORT, "import"},
        {SUPEROPT_BRIDGE_ERR_PYTHON, "python"}, {SUPEROPT_BRIDGE_ERR_NOMEM, "nomem"},
        {SUPEROPT_BRIDGE_ERR_INTERNAL, "internal"}, {99, "unknown"},
    };
    std::string why;
    for (const auto &n : names) {
        if (n.second != g_api.status_name(n.first)) why = "status " + std::to_string(n.first);
    }
    report("status_names", why);
}

void test_null_out_pointers() {
    const std::string req = ping_request();
    uint8_t *out = reinterpret_cast<uint8_t *>(0x1);
    size_t out_len = 7;
    const int s1 = g_api.call(reinterpret_cast<const uint8_t *>(req.data()), req.size(), nullptr,
                              &out_len);
    const int s2 = g_api.call(reinterpret_cast<const uint8_t *>(req.data()), req.size(), &out,
                              nullptr);
    std::string why;
    if (s1 != SUPEROPT_BRIDGE_ERR_ARGUMENT || out_len != 0) why = "NULL response pointer";
    if (s2 != SUPEROPT_BRIDGE_ERR_ARGUMENT || out != nullptr) why = "NULL response_len pointer";
    report("null_out_pointers", why);
}

void test_null_request_with_length() {
    const Response r = call_bridge(std::string(5, '\0'), /*null_request=*/true);
    Value d;
    std::string message;
    std::string why = check_error(r, d, &message);
    if (why.empty() && r.status != SUPEROPT_BRIDGE_ERR_ARGUMENT) {
        why = "status " + status_text(r.status) + ", expected argument";
    }
    if (why.empty() && message.find("NULL") == std::string::npos) why = "message: " + message;
    report("null_request_with_length", why);
}

void test_ping() {
    const Response r = call_bridge(ping_request());
    Value d;
    std::string why = check_map(r, "pong", d);
    if (why.empty() && r.status != SUPEROPT_BRIDGE_OK) why = "status " + status_text(r.status);
    dump("ping.msgpack", r.bytes);
    report("ping", why);
}

void test_malformed(const char *name, const std::string &request, bool null_request) {
    const Response r = call_bridge(request, null_request);
    Value d;
    std::string why = check_error(r, d);
    dump(std::string(name) + ".msgpack", r.bytes);
    report(name, why);
}

void test_golden(const std::string &request_path) {
    const std::string suffix = ".request.msgpack";
    const std::string name = "golden " + request_path;
    if (request_path.size() < suffix.size() ||
        request_path.compare(request_path.size() - suffix.size(), suffix.size(), suffix) != 0) {
        report(name, "not a *.request.msgpack file");
        return;
    }
    std::string request;
    if (!read_file(request_path, request)) {
        report(name, "cannot read");
        return;
    }
    const std::string response_path =
        request_path.substr(0, request_path.size() - suffix.size()) + ".response.msgpack";
    const Response r = call_bridge(request);
    if (!file_exists(response_path)) {
        Value d;
        const std::string why = check_map(r, nullptr, d);
        report(name + " (no golden response: shape only)", why);
        return;
    }
    std::string expected;
    if (!read_file(response_path, expected)) {
        report(name, "cannot read " + response_path);
        return;
    }
    if (!r.has_bytes) {
        report(name, "no response bytes (status " + status_text(r.status) + ")");
    } else if (r.bytes != expected) {
        report(name, "response differs from " + response_path + ": got " + hex_prefix(r.bytes) +
                         " (" + std::to_string(r.bytes.size()) + " bytes), expected " +
                         hex_prefix(expected) + " (" + std::to_string(expected.size()) + " bytes)");
    } else {
        report(name, "");
    }
}

/// Many threads at once, each mixing requests; every response must still be right.
void test_threads(bool stub) {
    constexpr int kThreads = 8;
    constexpr int kRounds = 25;
    std::atomic<int> bad{0};
    std::string first_error;
    std::mutex error_mutex;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int round = 0; round < kRounds; ++round) {
                const int which = (t + round) % (stub ? 4 : 2);
                std::string why;
                Value d;
                if (which == 0) {
                    why = check_map(call_bridge(ping_request()), "pong", d);
                } else if (which == 1) {
                    why = check_error(call_bridge(std::string("\xc1", 1)), d);
                } else if (which == 2) {
                    // Sleeps in Python (GIL released) before answering pong.
                    why = check_map(call_bridge(pack({int_field("v", 2),
                                                      str_field("kind", "test_sleep")})),
                                    "pong", d);
                } else {
                    const Response r = call_bridge(pack({int_field("v", 2),
                                                         str_field("kind", "test_raise"),
                                                         str_field("message", "thread boom")}));
                    why = check_error(r, d);
                    if (why.empty() && r.status != SUPEROPT_BRIDGE_ERR_PYTHON) {
                        why = "status " + status_text(r.status);
                    }
                }
                if (!why.empty()) {
                    ++bad;
                    std::lock_guard<std::mutex> lock(error_mutex);
                    if (first_error.empty()) first_error = why;
                }
            }
        });
    }
    for (auto &th : threads) th.join();
    report("threads_" + std::to_string(kThreads) + "x" + std::to_string(kRounds),
           bad == 0 ? "" : std::to_string(bad.load()) + " bad responses, first: " + first_error);
}

/// handle() misbehaving (stub only): each must be an error response, and the process lives.
void test_python_failures(const std::string &expect_executable) {
    struct Case {
        const char *name;
        std::vector<Field> request;
        std::vector<std::string> needles;  // substrings of the error message
    };
    const std::vector<Case> cases = {
        {"python_exception",
         {int_field("v", 2), str_field("kind", "test_raise"), str_field("message", "boom")},
         {"superopt.bridge.handle raised", "RuntimeError", "boom"}},
        {"python_returns_str", {int_field("v", 2), str_field("kind", "test_nonbytes")},
         {"returned str, expected bytes"}},
        {"python_returns_empty", {int_field("v", 2), str_field("kind", "test_empty")},
         {"empty bytes"}},
        {"python_system_exit", {int_field("v", 2), str_field("kind", "test_exit")},
         {"SystemExit"}},
        {"python_surrogate_message", {int_field("v", 2), str_field("kind", "test_surrogate")},
         {"superopt.bridge.handle raised"}},
        {"python_long_message",
         {int_field("v", 2), str_field("kind", "test_raise"), int_field("repeat", 70000)},
         {"RuntimeError", std::string(1000, 'x')}},
    };
    for (const auto &c : cases) {
        const Response r = call_bridge(pack(c.request));
        Value d;
        std::string message;
        std::string error_kind;
        std::string why = check_error(r, d, &message, &error_kind);
        if (why.empty() && r.status != SUPEROPT_BRIDGE_ERR_PYTHON) {
            why = "status " + status_text(r.status) + ", expected python";
        }
        if (why.empty() && error_kind != "internal") why = "error kind '" + error_kind + "'";
        for (const auto &needle : c.needles) {
            if (why.empty() && message.find(needle) == std::string::npos) {
                why = "message lacks '" + needle.substr(0, 40) + "': " + message.substr(0, 300);
            }
        }
        dump(std::string(c.name) + ".msgpack", r.bytes);
        report(c.name, why);
    }
    // Still alive and answering.
    Value d;
    report("alive_after_python_failures", check_map(call_bridge(ping_request()), "pong", d));

    // The interpreter runs the Python it was built for (multiprocessing spawns that one).
    const Response info = call_bridge(pack({int_field("v", 2), str_field("kind", "test_info")}));
    std::string why = check_map(info, "info", d);
    if (why.empty() && !expect_executable.empty()) {
        const Value *exe = d.get("executable");
        if (exe == nullptr || exe->kind != Value::Str) {
            why = "no executable in info";
        } else if (exe->s != expect_executable) {
            why = "sys.executable is '" + exe->s + "', expected '" + expect_executable + "'";
        }
    }
    report("sys_executable", why);
}

void test_expected_failure(const char *name, int expected_status, const char *needle) {
    for (int attempt = 0; attempt < 2; ++attempt) {  // the second call must fail the same way
        const Response r = call_bridge(ping_request());
        Value d;
        std::string message;
        std::string why = check_error(r, d, &message);
        if (why.empty() && r.status != expected_status) {
            why = "status " + status_text(r.status) + ", expected " + status_text(expected_status);
        }
        if (why.empty() && message.find(needle) == std::string::npos) {
            why = "message lacks '" + std::string(needle) + "': " + message.substr(0, 300);
        }
        dump(std::string(name) + ".msgpack", r.bytes);
        report(std::string(name) + "_" + std::to_string(attempt), why);
    }
}

}  // namespace

int main(int argc, char **argv) {
    std::string lib;
    std::string init_path;
    std::string expect_executable;
    bool stub = false;
    bool expect_import_failure = false;
    bool expect_init_failure = false;
    std::vector<std::string> golden;
    for (int k = 1; k < argc; ++k) {
        const std::string arg = argv[k];
        if (arg == "--lib" && k + 1 < argc) {
            lib = argv[++k];
        } else if (arg == "--init-path" && k + 1 < argc) {
            init_path = argv[++k];
        } else if (arg == "--stub") {
            stub = true;
        } else if (arg == "--expect-import-failure") {
            expect_import_failure = true;
        } else if (arg == "--expect-init-failure") {
            expect_init_failure = true;
        } else if (arg == "--expect-executable" && k + 1 < argc) {
            expect_executable = argv[++k];
        } else if (arg == "--dump" && k + 1 < argc) {
            g_dump_dir = argv[++k];
        } else if (arg.rfind("--", 0) == 0) {
            std::fprintf(stderr, "bridge_test: unknown option %s\n", arg.c_str());
            return 2;
        } else {
            golden.push_back(arg);
        }
    }
    std::string error;
    if (!load_api(lib, error)) {
        std::printf("FAIL load_library: %s\n0 passed, 1 failed\n", error.c_str());
        return 1;
    }

    test_wire_error_writer();
    test_status_names();
    test_null_out_pointers();  // before the interpreter starts: must not need it

    if (expect_init_failure) {
        const int s = g_api.init(nullptr);
        report("init_fails",
               s == SUPEROPT_BRIDGE_ERR_INIT ? "" : "init returned " + status_text(s));
        test_expected_failure("init_failure", SUPEROPT_BRIDGE_ERR_INIT, "interpreter");
    } else {
        const int s = g_api.init(init_path.empty() ? nullptr : init_path.c_str());
        report("init", s == SUPEROPT_BRIDGE_OK ? "" : "init returned " + status_text(s));
        if (expect_import_failure) {
            test_expected_failure("import_failure", SUPEROPT_BRIDGE_ERR_IMPORT,
                                  "cannot import superopt.bridge.handle");
        } else {
            test_ping();
            test_malformed("malformed_c1", std::string("\xc1", 1), false);
            test_malformed("empty_request", std::string(), true);
            test_malformed("not_a_map", std::string("\x93\x01\x02\x03", 4), false);
            test_null_request_with_length();
            for (const auto &path : golden) test_golden(path);
            test_threads(stub);
            if (stub) test_python_failures(expect_executable);
        }
    }
    std::printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
