#pragma once
// The head of an HTTP/1.x request (request line and header fields), for rw-node's
// metrics endpoint, which serves GET and HEAD only and never reads a request body.
//
// parse_head(bytes, max) looks at what has arrived so far and says one of:
//   incomplete  the head has not ended yet and may still be fine: read more
//   bad         refuse it with `status` (the connection closes after the answer):
//                 400 malformed request line or header field
//                 405 a method other than GET or HEAD (said as soon as the method is read)
//                 413 the request carries a body (Content-Length > 0, Transfer-Encoding)
//                 431 no end of the head within `max` bytes
//                 505 a version other than HTTP/1.0 or HTTP/1.1
//   request     the head is whole and acceptable: its fields are views into `bytes`
//
// Pure: no allocation but a refusal's text, reads `bytes` only, never past its end.
// Decisions are stable as bytes arrive: once a prefix is bad, every longer input is bad
// with the same status; once a prefix is a request, every longer input is the same one.

#include <cstddef>
#include <string>
#include <string_view>
#include <variant>

namespace rw::tools::http {

/// The default bound on a request's head: request line and every header, terminators
/// included.
inline constexpr size_t max_head_bytes = 8192;

struct incomplete {};

struct bad {
  int status; // 400, 405, 413, 431, 505
  std::string why;
};

struct request {
  std::string_view method;        // "GET" or "HEAD"
  std::string_view target;        // origin-form: starts with '/'; query included
  std::string_view authorization; // the Authorization field's value, trimmed; "" if none
  size_t head_bytes = 0;          // bytes up to and including the empty line
};

using parse_result = std::variant<incomplete, bad, request>;

parse_result parse_head(std::string_view bytes, size_t max = max_head_bytes);

/// The path of a target: up to its '?' or '#'.
std::string_view target_path(std::string_view target);

/// The standard reason phrase of the statuses the metrics endpoint answers with.
const char* reason_phrase(int status);

} // namespace rw::tools::http
