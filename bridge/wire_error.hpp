// wire_error.hpp: the one msgpack message the C++ side writes itself, the error response.
//
// Internal to bridge/ (included by bridge.cpp and by tests/bridge/bridge_test.cpp); not
// part of the C ABI. Header-only, standard C++17, no Python.
//
// The bytes equal msgpack-python's `msgpack.packb(obj)` (use_bin_type=True, the default of
// msgpack >= 1.0) for
//
//     obj = {"v": 2, "kind": "error",
//            "error": {"kind": kind, "message": message, "path": path}}
//
// with keys in exactly that order: a fixmap of 3, positive fixint 1, and each string in its
// smallest form (fixstr up to 31 bytes, then str8, str16, str32). Strings are made valid
// UTF-8 first: every maximal ill-formed subsequence becomes U+FFFD, as Python's
// `bytes.decode("utf-8", "replace")` does, because a msgpack str must hold UTF-8 and the
// Lean decoder rejects anything else.
//
// Example:
//     std::string b = superopt::bridge::error_response("internal", "boom", "");
//     // b == "\x83\xa1v\x01\xa4kind\xa5error\xa5error\x83\xa4kind\xa8internal"
//     //      "\xa7message\xa4boom\xa4path\xa0"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace superopt {
namespace bridge {

/// `s` with every maximal ill-formed UTF-8 subsequence replaced by U+FFFD (EF BF BD).
inline std::string sanitize_utf8(std::string_view s) {
    static constexpr char kReplacement[] = "\xef\xbf\xbd";
    std::string out;
    out.reserve(s.size());
    const auto *p = reinterpret_cast<const unsigned char *>(s.data());
    const std::size_t n = s.size();
    std::size_t i = 0;
    while (i < n) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            out.push_back(static_cast<char>(c));
            ++i;
            continue;
        }
        // Sequence length and the allowed range of the second byte (Unicode table 3-7).
        std::size_t len = 0;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
        } else if (c == 0xe0) {
            len = 3;
            lo = 0xa0;
        } else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) {
            len = 3;
        } else if (c == 0xed) {
            len = 3;
            hi = 0x9f;
        } else if (c == 0xf0) {
            len = 4;
            lo = 0x90;
        } else if (c >= 0xf1 && c <= 0xf3) {
            len = 4;
        } else if (c == 0xf4) {
            len = 4;
            hi = 0x8f;
        }
        if (len == 0) {  // 80..C1, F5..FF: never a lead byte
            out.append(kReplacement);
            ++i;
            continue;
        }
        std::size_t j = 1;  // bytes of the sequence that are valid so far
        for (; j < len && i + j < n; ++j) {
            const unsigned char b = p[i + j];
            const unsigned char blo = (j == 1) ? lo : 0x80;
            const unsigned char bhi = (j == 1) ? hi : 0xbf;
            if (b < blo || b > bhi) break;
        }
        if (j == len) {
            out.append(s.substr(i, len));
        } else {
            out.append(kReplacement);  // the maximal subpart p[i .. i+j) is one U+FFFD
        }
        i += j;
    }
    return out;
}

/// Append the msgpack str header and bytes of `s` (already valid UTF-8), smallest form.
inline void put_str(std::string &out, std::string_view s) {
    const std::size_t n = s.size();
    if (n <= 31) {
        out.push_back(static_cast<char>(0xa0 | n));
    } else if (n <= 0xff) {
        out.push_back(static_cast<char>(0xd9));
        out.push_back(static_cast<char>(n));
    } else if (n <= 0xffff) {
        out.push_back(static_cast<char>(0xda));
        out.push_back(static_cast<char>((n >> 8) & 0xff));
        out.push_back(static_cast<char>(n & 0xff));
    } else {
        // msgpack strings stop at 2^32 - 1 bytes; callers cap messages far below that.
        const std::uint32_t m = static_cast<std::uint32_t>(n);
        out.push_back(static_cast<char>(0xdb));
        out.push_back(static_cast<char>((m >> 24) & 0xff));
        out.push_back(static_cast<char>((m >> 16) & 0xff));
        out.push_back(static_cast<char>((m >> 8) & 0xff));
        out.push_back(static_cast<char>(m & 0xff));
    }
    out.append(s);
}

/// The wire error response {"v": 2, "kind": "error", "error": {kind, message, path}}.
///
/// Strings longer than 2^32 - 1 bytes after sanitising are not representable; callers
/// truncate messages first (bridge.cpp caps them at 1 MiB).
inline std::string error_response(std::string_view kind, std::string_view message,
                                  std::string_view path) {
    const std::string k = sanitize_utf8(kind);
    const std::string m = sanitize_utf8(message);
    const std::string p = sanitize_utf8(path);
    std::string out;
    out.reserve(48 + k.size() + m.size() + p.size());
    out.push_back(static_cast<char>(0x83));  // fixmap, 3 entries
    put_str(out, "v");
    out.push_back(static_cast<char>(0x02));  // positive fixint: protocol version 2 (superopt_bridge.h)
    put_str(out, "kind");
    put_str(out, "error");
    put_str(out, "error");
    out.push_back(static_cast<char>(0x83));  // fixmap, 3 entries
    put_str(out, "kind");
    put_str(out, k);
    put_str(out, "message");
    put_str(out, m);
    put_str(out, "path");
    put_str(out, p);
    return out;
}

}  // namespace bridge
}  // namespace superopt
