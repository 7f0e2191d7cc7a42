#include "actors/door/requests.hpp"

#include <fmt/format.h>

namespace rw::actors::door {

namespace {

void put_u32(bytes& out, uint32_t x) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<std::byte>(x >> shift));
}

uint32_t get_u32(const bytes& in) {
  return (std::to_integer<uint32_t>(in[0]) << 24)
         | (std::to_integer<uint32_t>(in[1]) << 16)
         | (std::to_integer<uint32_t>(in[2]) << 8) | std::to_integer<uint32_t>(in[3]);
}

template <class... Ts>
void put_args(bytes& out, Ts&... xs) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  if (sink(xs...))
    throw std::logic_error("a tenant door request could not be serialized");
  auto* p = reinterpret_cast<const std::byte*>(buf.data());
  out.insert(out.end(), p, p + buf.size());
}

// Exactly the op's arguments: nothing missing, nothing after them.
template <class... Ts>
bool get_args(const bytes& in, Ts&... xs) {
  caf::binary_deserializer source{nullptr, reinterpret_cast<const char*>(in.data()) + 5,
                                  in.size() - 5};
  return !source(xs...) && source.remaining() == 0;
}

} // namespace

std::string to_string(op x) {
  switch (x) {
    case op::nodes: return "nodes";
    case op::jobs: return "jobs";
    case op::create: return "create";
    case op::status: return "status";
    case op::set: return "set";
    case op::stop: return "stop";
    case op::remove: return "delete";
  }
  return fmt::format("op {}", static_cast<unsigned>(x));
}

bytes encode(const request& x) {
  bytes out;
  put_u32(out, x.id);
  out.push_back(static_cast<std::byte>(x.op));
  auto copy = x; // CAF 0.17's inspectors take non-const references
  switch (x.op) {
    case op::nodes:
    case op::jobs: break;
    case op::create: put_args(out, copy.spec, copy.placement); break;
    case op::set: put_args(out, copy.name, copy.change); break;
    case op::status:
    case op::stop:
    case op::remove: put_args(out, copy.name); break;
  }
  return out;
}

errc decode(const bytes& plain, request& out, std::string& why) {
  if (plain.size() < 5) {
    why = "a request shorter than its id and op";
    return errc::bad_frame;
  }
  out.id = get_u32(plain);
  out.op = static_cast<op>(plain[4]);
  bool ok = false;
  switch (out.op) {
    case op::nodes:
    case op::jobs: ok = plain.size() == 5; break;
    case op::create: ok = get_args(plain, out.spec, out.placement); break;
    case op::set: ok = get_args(plain, out.name, out.change); break;
    case op::status:
    case op::stop:
    case op::remove: ok = get_args(plain, out.name); break;
    default:
      why = fmt::format("{}: not a request a tenant can make (ops 1 to 7: nodes, jobs, "
                        "create, status, set, stop, delete)",
                        to_string(out.op));
      return errc::unauthorized;
  }
  if (!ok) {
    why = fmt::format("{}: its arguments do not decode, or bytes follow them",
                      to_string(out.op));
    return errc::bad_frame;
  }
  return errc::ok;
}

namespace detail {
bytes reply_head(uint32_t id, uint8_t status) {
  bytes out;
  put_u32(out, id);
  out.push_back(static_cast<std::byte>(status));
  return out;
}
} // namespace detail

bytes encode_answer(uint32_t id) {
  return detail::reply_head(id, 0);
}

bytes encode_refusal(uint32_t id, errc code, const std::string& reason) {
  auto out = detail::reply_head(id, 1);
  auto c = static_cast<uint16_t>(code);
  out.push_back(static_cast<std::byte>(c >> 8));
  out.push_back(static_cast<std::byte>(c & 0xff));
  auto* p = reinterpret_cast<const std::byte*>(reason.data());
  out.insert(out.end(), p, p + reason.size());
  return out;
}

bool decode(const bytes& plain, reply& out) {
  if (plain.size() < 5)
    return false;
  out.id = get_u32(plain);
  auto status = std::to_integer<uint8_t>(plain[4]);
  if (status == 0) {
    out.code = errc::ok;
    out.answer.assign(plain.begin() + 5, plain.end());
    return true;
  }
  if (status != 1 || plain.size() < 7)
    return false;
  out.code = static_cast<errc>((std::to_integer<uint16_t>(plain[5]) << 8)
                               | std::to_integer<uint16_t>(plain[6]));
  out.reason.assign(reinterpret_cast<const char*>(plain.data()) + 7, plain.size() - 7);
  return true;
}

} // namespace rw::actors::door
