#include "apps/tools/http_head.hpp"

#include <algorithm>
#include <cstring>

namespace rw::tools::http {

namespace {

// RFC 9110 5.6.2: the characters of a token (methods, field names).
bool tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
    return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

// A field value's characters: visible ASCII, obs-text, space and tab.
bool value_char(char c) {
  auto u = static_cast<unsigned char>(c);
  return u == ' ' || u == '\t' || (u >= 0x21 && u != 0x7f);
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i] >= 'A' && a[i] <= 'Z' ? char(a[i] - 'A' + 'a') : a[i];
    auto y = b[i] >= 'A' && b[i] <= 'Z' ? char(b[i] - 'A' + 'a') : b[i];
    if (x != y)
      return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

bad refuse(int status, const char* why) {
  return bad{status, why};
}

bool is_prefix(std::string_view prefix, std::string_view of) {
  return prefix.size() <= of.size() && of.compare(0, prefix.size(), prefix) == 0;
}

// The request line after "METHOD ": "TARGET SP HTTP-VERSION". Empty optional: fine.
std::variant<std::monostate, bad> check_rest_of_request_line(std::string_view rest,
                                                             std::string_view& target) {
  auto sp = rest.find(' ');
  if (sp == std::string_view::npos)
    return refuse(400,
                  "the request line has no HTTP version (HTTP/1.0 or HTTP/1.1 only)");
  target = rest.substr(0, sp);
  auto version = rest.substr(sp + 1);
  if (target.empty() || target.front() != '/')
    return refuse(400, "the request target is not a path (origin-form, starting with /)");
  for (char c : target)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
      return refuse(400, "the request target has a character other than visible ASCII");
  if (version == "HTTP/1.1" || version == "HTTP/1.0")
    return {};
  if (version.size() == 8 && version.compare(0, 5, "HTTP/") == 0 && version[5] >= '0'
      && version[5] <= '9' && version[6] == '.' && version[7] >= '0' && version[7] <= '9')
    return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
  return refuse(400, "the request line is malformed (METHOD /path HTTP/1.1)");
}

} // namespace

parse_result parse_head(std::string_view in, size_t max) {
  // Every decision is made at a byte and depends only on the bytes before it and that
  // byte; the scan stops at `max`. Hence the prefix stability the header promises.
  const size_t limit = std::min(in.size(), max);
  auto out_of_bytes = [&]() -> parse_result {
    if (limit == max)
      return refuse(431,
                    "the request head (request line and header fields) is too large");
    return incomplete{};
  };
  size_t pos = 0;
  // Empty lines before the request line are ignored (RFC 9112 2.2).
  while (pos < limit && (in[pos] == '\n' || in[pos] == '\r')) {
    if (in[pos] == '\n') {
      ++pos;
      continue;
    }
    if (pos + 1 == limit)
      return out_of_bytes();
    if (in[pos + 1] != '\n')
      return refuse(400, "a bare carriage return in the request head");
    pos += 2;
  }
  // The method, byte by byte: refused as soon as it cannot be GET or HEAD.
  static constexpr std::string_view get = "GET", head = "HEAD";
  const size_t method_start = pos;
  std::string_view method;
  for (;; ++pos) {
    if (pos == limit)
      return out_of_bytes();
    char c = in[pos];
    auto so_far = in.substr(method_start, pos - method_start);
    if (c == ' ' && !so_far.empty()) {
      if (so_far != get && so_far != head)
        return refuse(405, "only GET and HEAD are served");
      method = so_far;
      ++pos;
      break;
    }
    if (!tchar(c))
      return refuse(400, "the request line does not start with a method");
    auto longer = in.substr(method_start, pos - method_start + 1);
    if (!is_prefix(longer, get) && !is_prefix(longer, head))
      return refuse(405, "only GET and HEAD are served");
  }
  // Then whole lines: the rest of the request line, the fields, the empty line.
  request r;
  r.method = method;
  bool request_line = true;
  bool have_authorization = false;
  size_t line_start = pos;
  while (true) {
    auto window = in.substr(line_start, limit - line_start);
    auto nl = window.find('\n');
    if (nl == std::string_view::npos)
      return out_of_bytes();
    auto line = window.substr(0, nl);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    size_t next = line_start + nl + 1;
    if (line.find('\r') != std::string_view::npos)
      return refuse(400, "a bare carriage return in the request head");
    if (request_line) {
      auto checked = check_rest_of_request_line(line, r.target);
      if (auto* b = std::get_if<bad>(&checked))
        return std::move(*b);
      request_line = false;
    } else if (line.empty()) {
      r.head_bytes = next;
      return r;
    } else {
      if (line.front() == ' ' || line.front() == '\t')
        return refuse(400,
                      "a folded header line (obsolete line folding is not accepted)");
      auto colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0)
        return refuse(400, "a header line without a field name and a colon");
      auto name = line.substr(0, colon);
      if (!std::all_of(name.begin(), name.end(), tchar))
        return refuse(400, "a header field name with a character other than a token's");
      auto raw = line.substr(colon + 1);
      if (!std::all_of(raw.begin(), raw.end(), value_char))
        return refuse(400, "a header field value with a control character");
      auto value = trim(raw);
      if (iequals(name, "transfer-encoding"))
        return refuse(413, "a request body (Transfer-Encoding) is not accepted");
      if (iequals(name, "content-length")) {
        if (value.empty() || !std::all_of(value.begin(), value.end(), [](char c) {
              return c >= '0' && c <= '9';
            }))
          return refuse(400, "Content-Length is not a number");
        if (value.find_first_not_of('0') != std::string_view::npos)
          return refuse(413, "a request body (Content-Length above 0) is not accepted");
      }
      if (iequals(name, "authorization")) {
        if (have_authorization)
          return refuse(400, "more than one Authorization field");
        have_authorization = true;
        r.authorization = value;
      }
    }
    line_start = next;
  }
}

std::string_view target_path(std::string_view target) {
  return target.substr(0, std::min(target.find('?'), target.find('#')));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

} // namespace rw::tools::http
