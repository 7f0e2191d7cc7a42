#pragma once
// What a tenant asks through the tenant door (protocol/tenant_door.hpp), inside the
// session's sealed frames, and what the door answers (docs/wire-protocol.md, "The
// tenant door"):
//
//   request  id (4 bytes, big-endian), op (1 byte), the op's arguments
//   answer   id, 0, the answer                      the coordinator's answer
//   refusal  id, 1, errc (2 bytes, big-endian), reason (UTF-8)
//
// Arguments and answers are in CAF 0.17's binary encoding of the types in
// actors/cluster_messages.hpp (the encoding BASP carries them in). The ops are the
// only requests a tenant can make: anything else, or anything after an op's
// arguments, is refused.
//
//   op  name    arguments                  answer
//   1   nodes   -                          vector<node_info>
//   2   jobs    -                          vector<job_report> (the tenant's jobs)
//   3   create  job_spec, job_placement    job_created
//   4   status  job name                   job_report
//   5   set     job name, hyper_change     uint64_t (the highest clock reached)
//   6   stop    job name                   job_report
//   7   delete  job name                   nothing

#include <cstdint>
#include <string>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/cluster_messages.hpp"
#include "protocol/tenant_door.hpp"

namespace rw::actors::door {

using bytes = protocol::door::bytes;

enum class op : uint8_t { nodes = 1, jobs, create, status, set, stop, remove };

/// The op's name, for logs and errors ("op 9" for one that is none).
std::string to_string(op x);

struct request {
  uint32_t id = 0;
  door::op op = op::nodes;
  std::string name;        // status, set, stop, delete
  job_spec spec;           // create
  job_placement placement; // create
  hyper_change change;     // set
};

bytes encode(const request& x);
/// Reads a request a shell sent. errc::ok, or why it is not one (`why` for the log
/// and the refusal); `out.id` is set whenever the first 4 bytes arrived.
errc decode(const bytes& plain, request& out, std::string& why);

/// An answer to request `id`.
template <class T>
bytes encode_answer(uint32_t id, const T& answer);
bytes encode_answer(uint32_t id); // nothing (delete)
bytes encode_refusal(uint32_t id, errc code, const std::string& reason);

struct reply {
  uint32_t id = 0;
  errc code = errc::ok; // ok: `answer` holds the encoded answer
  std::string reason;
  bytes answer;
};
/// Reads the door's reply. False when it is not one.
bool decode(const bytes& plain, reply& out);

/// Reads an answer's encoding into `out`; false when it does not hold exactly one T.
template <class T>
bool decode_answer(const bytes& answer, T& out);

// --- templates -------------------------------------------------------------------

namespace detail {
bytes reply_head(uint32_t id, uint8_t status);
} // namespace detail

template <class T>
bytes encode_answer(uint32_t id, const T& answer) {
  auto out = detail::reply_head(id, 0);
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  auto copy = answer; // CAF 0.17's inspectors take non-const references
  if (sink(copy))
    throw std::logic_error("an answer could not be serialized");
  auto* p = reinterpret_cast<const std::byte*>(buf.data());
  out.insert(out.end(), p, p + buf.size());
  return out;
}

template <class T>
bool decode_answer(const bytes& answer, T& out) {
  caf::binary_deserializer source{nullptr, reinterpret_cast<const char*>(answer.data()),
                                  answer.size()};
  return !source(out) && source.remaining() == 0;
}

} // namespace rw::actors::door
