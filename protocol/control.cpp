#include "protocol/control.hpp"

#include <algorithm>
#include <cstring>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>

#include "runtime/optimizer_fields.hpp"
#include "schemas/control.capnp.h"

namespace rw::protocol {

namespace {

bytes to_bytes(capnp::MessageBuilder& msg) {
  auto words = capnp::messageToFlatArray(msg);
  auto raw = words.asBytes();
  bytes out(raw.size());
  std::memcpy(out.data(), raw.begin(), raw.size());
  return out;
}

// Runs `fn(reader)` over untrusted bytes; a decode failure becomes errc::bad_frame.
template <class Fn>
errc read_message(const std::byte* data, size_t size, std::string& why, Fn fn) {
  if (size == 0 || size % sizeof(capnp::word) != 0) {
    why = fmt::format("control payload of {} bytes is not a whole number of words", size);
    return errc::bad_frame;
  }
  // Copy into word-aligned memory: control frames are rare and small.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
  std::memcpy(words.begin(), data, size);
  try {
    capnp::ReaderOptions opts;
    // A well-formed message is read in a few passes over its words (a list is counted
    // each time it is fetched); a reader that reads far more is being amplified (a
    // 568-byte welcome listing 434176 zero-size tensors was found by
    // tests/fuzz/fuzz_welcome), so the budget scales with the message, not a constant.
    opts.traversalLimitInWords = std::min<uint64_t>(1 << 20, 8 * words.size() + 1024);
    opts.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader{words.asPtr(), opts};
    return fn(reader);
  } catch (const kj::Exception& e) {
    why = fmt::format("control payload does not decode: {}", e.getDescription().cStr());
    return errc::bad_frame;
  }
}

void set_tensors(capnp::List<schema::TensorSpec>::Builder ts, const job_spec& spec) {
  for (unsigned i = 0; i < ts.size(); ++i) {
    ts[i].setName(spec.tensors[i].name);
    ts[i].setElements(spec.tensors[i].elements);
    ts[i].setHasInit(spec.tensors[i].has_init);
  }
}

void get_tensors(capnp::List<schema::TensorSpec>::Reader ts, job_spec& spec) {
  spec.tensors.clear();
  for (auto t : ts)
    spec.tensors.push_back({t.getName().cStr(), t.getElements(), t.getHasInit()});
}

// The optimizer's kind and the consistency model off the wire, checked.
errc get_kinds(schema::Optimizer::Reader o, uint16_t model, job_spec& spec,
               std::string& why) {
  auto kind = static_cast<uint16_t>(o.getKind());
  if (kind > static_cast<uint16_t>(optimizer_kind::lars)) {
    why = fmt::format("unknown optimizer kind {}", kind);
    return errc::bad_frame;
  }
  spec.optimizer.kind = static_cast<optimizer_kind>(kind);
  runtime::get_hyper_parameters(o, spec.optimizer);
  if (model > static_cast<uint16_t>(consistency_spec::async)) {
    why = fmt::format("unknown consistency model {}", model);
    return errc::bad_frame;
  }
  spec.consistency.model = static_cast<consistency_spec::model_t>(model);
  return errc::ok;
}

void set_compression(schema::Compression::Builder c, const compression_spec& z) {
  c.setKind(static_cast<schema::CompressionKind>(z.kind));
  c.setRatio(z.ratio);
  c.setUpdates(z.updates);
  c.setWarmup(z.warmup);
}

// The compression off the wire, checked: a known kind (its ratio, warm-up and updates are checked
// with the rest of the spec, rw::validate).
errc get_compression(schema::Compression::Reader c, job_spec& spec, std::string& why) {
  auto kind = static_cast<uint16_t>(c.getKind());
  if (kind > static_cast<uint16_t>(compression_spec::topk)) {
    why = fmt::format("unknown compression kind {}", kind);
    return errc::bad_frame;
  }
  spec.compression.kind = static_cast<compression_spec::kind_t>(kind);
  spec.compression.ratio = c.getRatio();
  spec.compression.updates = c.getUpdates();
  spec.compression.warmup = c.getWarmup();
  return errc::ok;
}

} // namespace

bytes encode(const hello_msg& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::Hello>();
  root.setJobName(x.spec.name);
  root.setNumWorkers(x.spec.num_workers);
  root.setRank(x.rank);
  root.setChunkBytes(x.spec.chunk_bytes);
  auto o = root.initOptimizer();
  auto& s = x.spec.optimizer;
  o.setKind(static_cast<schema::OptimizerKind>(s.kind));
  runtime::set_hyper_parameters(o, s);
  set_tensors(root.initTensors(static_cast<unsigned>(x.spec.tensors.size())), x.spec);
  root.setShmSegment(x.shm_segment);
  root.setShmNonce(x.shm_nonce);
  root.setConsistency(static_cast<schema::ConsistencyModel>(x.spec.consistency.model));
  root.setStaleness(x.spec.consistency.staleness);
  root.setHasToken(x.has_token);
  root.setRack(x.rack);
  root.setPickedBy(x.picked_by);
  root.setMirror(x.mirror);
  root.setSpecFromJob(x.spec_from_job);
  set_compression(root.initCompression(), x.spec.compression);
  return to_bytes(msg);
}

bytes encode(const welcome_msg& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::Welcome>();
  root.setJobId(x.job_id);
  root.setNodeName(x.node_name);
  root.setCreated(x.created);
  auto eps = root.initEndpoints(static_cast<unsigned>(x.endpoints.size()));
  for (unsigned i = 0; i < eps.size(); ++i)
    eps.set(i, x.endpoints[i]);
  root.setEndpointIndex(x.endpoint_index);
  root.setNumShards(x.num_shards);
  auto shards = root.initShardEndpoints(static_cast<unsigned>(x.shard_endpoints.size()));
  for (unsigned i = 0; i < shards.size(); ++i) {
    auto list = shards[i].initEndpoints(
      static_cast<unsigned>(x.shard_endpoints[i].size()));
    for (unsigned j = 0; j < list.size(); ++j)
      list.set(j, x.shard_endpoints[i][j]);
  }
  root.setToken(x.token);
  root.setShm(x.shm);
  root.setShmHandover(x.shm_handover);
  root.setShmTicket(kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.shm_ticket.data()),
                                 x.shm_ticket.size()));
  auto nodes = root.initJobNodes(static_cast<unsigned>(x.job_nodes.size()));
  for (unsigned i = 0; i < nodes.size(); ++i)
    nodes.set(i, x.job_nodes[i]);
  auto names = root.initJobNodeNames(static_cast<unsigned>(x.job_node_names.size()));
  for (unsigned i = 0; i < names.size(); ++i)
    names.set(i, x.job_node_names[i]);
  root.setNodeIndex(x.node_index);
  root.setRingVnodes(x.ring_vnodes);
  root.setRingVersion(x.ring_version);
  root.setReplicas(x.replicas);
  root.setResumeClock(x.resume_clock);
  auto job = root.initJob();
  job.setName(x.spec.name);
  job.setNumWorkers(x.spec.num_workers);
  job.setChunkBytes(x.spec.chunk_bytes);
  auto o = job.initOptimizer();
  o.setKind(static_cast<schema::OptimizerKind>(x.spec.optimizer.kind));
  runtime::set_hyper_parameters(o, x.spec.optimizer);
  set_tensors(job.initTensors(static_cast<unsigned>(x.spec.tensors.size())), x.spec);
  job.setConsistency(static_cast<schema::ConsistencyModel>(x.spec.consistency.model));
  job.setStaleness(x.spec.consistency.staleness);
  set_compression(job.initCompression(), x.spec.compression);
  root.setFabric(x.fabric);
  return to_bytes(msg);
}

bytes encode(const error_msg& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::ErrorInfo>();
  root.setCode(static_cast<uint16_t>(x.code));
  root.setMessage(x.message);
  auto cs = root.initCandidates(static_cast<unsigned>(x.candidates.size()));
  for (unsigned i = 0; i < cs.size(); ++i)
    cs.set(i, x.candidates[i]);
  return to_bytes(msg);
}

bytes encode(const challenge_msg& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::Challenge>();
  root.setNonce(
    kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.nonce.data()), x.nonce.size()));
  return to_bytes(msg);
}

bytes encode(const proof_msg& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::Proof>();
  root.setMac(
    kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.mac.data()), x.mac.size()));
  return to_bytes(msg);
}

bytes encode(const attach_msg& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::AttachProof>();
  root.setNonce(
    kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.nonce.data()), x.nonce.size()));
  root.setMac(
    kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.mac.data()), x.mac.size()));
  return to_bytes(msg);
}

bytes encode(const located_msg& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::Located>();
  root.setCoordinator(x.coordinator);
  root.setNodeName(x.node_name);
  root.setRole(x.role);
  root.setTenantDoor(x.tenant_door);
  return to_bytes(msg);
}

bytes encode(const reroute_msg& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::Reroute>();
  root.setRingVersion(x.ring_version);
  root.setReplicas(x.replicas);
  auto nodes = root.initNodes(static_cast<unsigned>(x.nodes.size()));
  for (unsigned i = 0; i < x.nodes.size(); ++i)
    nodes.set(i, x.nodes[i]);
  auto addresses = root.initAddresses(static_cast<unsigned>(x.addresses.size()));
  for (unsigned i = 0; i < x.addresses.size(); ++i)
    addresses.set(i, x.addresses[i]);
  root.setKeptPushes(x.kept_pushes);
  return to_bytes(msg);
}

errc decode(const std::byte* data, size_t size, hello_msg& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::Hello>();
    out.spec.name = root.getJobName().cStr();
    out.spec.num_workers = root.getNumWorkers();
    out.rank = root.getRank();
    out.spec.chunk_bytes = root.getChunkBytes();
    auto kinds = get_kinds(root.getOptimizer(),
                           static_cast<uint16_t>(root.getConsistency()), out.spec, why);
    if (kinds != errc::ok)
      return kinds;
    get_tensors(root.getTensors(), out.spec);
    out.shm_segment = root.getShmSegment().cStr();
    out.shm_nonce = root.getShmNonce();
    out.spec.consistency.staleness = root.getStaleness();
    out.has_token = root.getHasToken();
    out.rack = root.getRack().cStr();
    out.picked_by = root.getPickedBy().cStr();
    out.mirror = root.getMirror();
    out.spec_from_job = root.getSpecFromJob();
    return get_compression(root.getCompression(), out.spec, why);
  });
}

errc decode(const std::byte* data, size_t size, welcome_msg& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::Welcome>();
    out.job_id = root.getJobId();
    out.node_name = root.getNodeName().cStr();
    out.created = root.getCreated();
    out.endpoints.clear();
    for (auto e : root.getEndpoints())
      out.endpoints.emplace_back(e.cStr());
    out.endpoint_index = root.getEndpointIndex();
    out.num_shards = root.getNumShards();
    out.shard_endpoints.clear();
    for (auto s : root.getShardEndpoints()) {
      out.shard_endpoints.emplace_back();
      for (auto e : s.getEndpoints())
        out.shard_endpoints.back().push_back(e);
    }
    out.token = root.getToken();
    out.shm = root.getShm();
    out.shm_handover = root.getShmHandover().cStr();
    auto ticket = root.getShmTicket();
    out.shm_ticket.assign(reinterpret_cast<const char*>(ticket.begin()), ticket.size());
    out.job_nodes.clear();
    for (auto n : root.getJobNodes())
      out.job_nodes.emplace_back(n.cStr());
    out.job_node_names.clear();
    for (auto n : root.getJobNodeNames())
      out.job_node_names.emplace_back(n.cStr());
    out.node_index = root.getNodeIndex();
    out.ring_vnodes = root.getRingVnodes();
    out.ring_version = root.getRingVersion();
    out.replicas = root.getReplicas();
    out.resume_clock = root.getResumeClock();
    auto job = root.getJob();
    out.spec = job_spec{};
    out.spec.name = job.getName().cStr();
    out.spec.num_workers = job.getNumWorkers();
    out.spec.chunk_bytes = job.getChunkBytes();
    auto kinds = get_kinds(job.getOptimizer(),
                           static_cast<uint16_t>(job.getConsistency()), out.spec, why);
    if (kinds != errc::ok)
      return kinds;
    get_tensors(job.getTensors(), out.spec);
    out.spec.consistency.staleness = job.getStaleness();
    if (auto z = get_compression(job.getCompression(), out.spec, why); z != errc::ok)
      return z;
    out.fabric = root.getFabric().cStr();
    if (out.job_nodes.size() > 1
        && (out.job_node_names.size() != out.job_nodes.size()
            || out.node_index >= out.job_nodes.size() || out.ring_vnodes == 0)) {
      why = "welcome with an inconsistent list of the job's nodes";
      return errc::bad_frame;
    }
    if (out.num_shards == 0 || out.shard_endpoints.size() != out.num_shards
        || out.endpoint_index >= out.endpoints.size()) {
      why = "welcome with an inconsistent routing table";
      return errc::bad_frame;
    }
    for (auto& list : out.shard_endpoints) {
      if (list.empty()) {
        why = "welcome leaves a shard without an endpoint";
        return errc::bad_frame;
      }
      for (auto e : list)
        if (e >= out.endpoints.size()) {
          why = "welcome routes a shard to an endpoint that does not exist";
          return errc::bad_frame;
        }
    }
    return errc::ok;
  });
}

errc decode(const std::byte* data, size_t size, error_msg& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::ErrorInfo>();
    out.code = static_cast<errc>(root.getCode());
    out.message = root.getMessage().cStr();
    out.candidates.clear();
    for (auto c : root.getCandidates())
      out.candidates.emplace_back(c.cStr());
    return errc::ok;
  });
}

namespace {
std::vector<std::byte> copy_data(capnp::Data::Reader d) {
  auto* p = reinterpret_cast<const std::byte*>(d.begin());
  return {p, p + d.size()};
}
} // namespace

errc decode(const std::byte* data, size_t size, challenge_msg& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    out.nonce = copy_data(r.getRoot<schema::Challenge>().getNonce());
    return errc::ok;
  });
}

errc decode(const std::byte* data, size_t size, proof_msg& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    out.mac = copy_data(r.getRoot<schema::Proof>().getMac());
    return errc::ok;
  });
}

errc decode(const std::byte* data, size_t size, attach_msg& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::AttachProof>();
    out.nonce = copy_data(root.getNonce());
    out.mac = copy_data(root.getMac());
    return errc::ok;
  });
}

errc decode(const std::byte* data, size_t size, located_msg& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::Located>();
    out.coordinator = root.getCoordinator().cStr();
    out.node_name = root.getNodeName().cStr();
    out.role = root.getRole().cStr();
    out.tenant_door = root.getTenantDoor().cStr();
    return errc::ok;
  });
}

errc decode(const std::byte* data, size_t size, reroute_msg& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::Reroute>();
    out.ring_version = root.getRingVersion();
    out.replicas = root.getReplicas();
    out.nodes.clear();
    for (auto n : root.getNodes())
      out.nodes.emplace_back(n.cStr());
    if (out.nodes.empty()) {
      why = "a reroute names no node";
      return errc::bad_frame;
    }
    out.addresses.clear();
    for (auto a : root.getAddresses())
      out.addresses.emplace_back(a.cStr());
    out.kept_pushes = root.getKeptPushes();
    if (!out.addresses.empty() && out.addresses.size() != out.nodes.size()) {
      why = fmt::format("a reroute names {} nodes and {} addresses", out.nodes.size(),
                        out.addresses.size());
      return errc::bad_frame;
    }
    return errc::ok;
  });
}

bytes encode(const hyper_change& x) {
  capnp::MallocMessageBuilder msg;
  runtime::set_hyper_change(msg.initRoot<schema::HyperChange>(), x);
  return to_bytes(msg);
}

errc decode(const std::byte* data, size_t size, hyper_change& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::HyperChange>();
    out = hyper_change{};
    if (!runtime::get_hyper_change(root, out)) {
      why = fmt::format("hyper change with unknown fields (present bits {:#x})",
                        root.getPresent());
      return errc::bad_frame;
    }
    return errc::ok;
  });
}

bytes encode(const fabric_offer& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::FabricOffer>();
  root.setProvider(x.provider);
  root.setAddress(
    kj::arrayPtr(reinterpret_cast<const kj::byte*>(x.address.data()), x.address.size()));
  root.setSlotsAddress(x.slots_address);
  root.setSlotsKey(x.slots_key);
  root.setSlotBytes(x.slot_bytes);
  root.setSlotCount(x.slot_count);
  root.setConnIndex(x.conn_index);
  root.setCreditBatch(x.credit_batch);
  root.setFrameNotices(x.frame_notices);
  return to_bytes(msg);
}

errc decode(const std::byte* data, size_t size, fabric_offer& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::FabricOffer>();
    out.provider = root.getProvider().cStr();
    auto a = root.getAddress();
    out.address.assign(reinterpret_cast<const std::byte*>(a.begin()),
                       reinterpret_cast<const std::byte*>(a.end()));
    out.slots_address = root.getSlotsAddress();
    out.slots_key = root.getSlotsKey();
    out.slot_bytes = root.getSlotBytes();
    out.slot_count = root.getSlotCount();
    out.conn_index = root.getConnIndex();
    out.credit_batch = root.getCreditBatch();
    out.frame_notices = root.getFrameNotices();
    if (out.address.empty() || out.address.size() > 256) {
      why = fmt::format("a fabric offer with a {}-byte address (1 to 256)",
                        out.address.size());
      return errc::bad_frame;
    }
    if (out.slot_count == 0 || out.slot_count > 4096 || out.slot_bytes < 128) {
      why = fmt::format("a fabric offer of {} slots of {} bytes (1 to 4096 slots of at "
                        "least 128 bytes)",
                        out.slot_count, out.slot_bytes);
      return errc::bad_frame;
    }
    if (out.conn_index >= (1u << 20)) {
      why = fmt::format("a fabric offer with connection index {} (below 2^20)",
                        out.conn_index);
      return errc::bad_frame;
    }
    return errc::ok;
  });
}

bytes encode(const fabric_place& x) {
  capnp::MallocMessageBuilder msg;
  auto root = msg.initRoot<schema::FabricPlace>();
  root.setTensor(x.tensor);
  root.setAddress(x.address);
  root.setKey(x.key);
  root.setBytes(x.bytes);
  root.setChunkBytes(x.chunk_bytes);
  return to_bytes(msg);
}

errc decode(const std::byte* data, size_t size, fabric_place& out, std::string& why) {
  return read_message(data, size, why, [&](capnp::MessageReader& r) {
    auto root = r.getRoot<schema::FabricPlace>();
    out.tensor = root.getTensor();
    out.address = root.getAddress();
    out.key = root.getKey();
    out.bytes = root.getBytes();
    out.chunk_bytes = root.getChunkBytes();
    if (out.bytes == 0 || out.chunk_bytes == 0 || out.chunk_bytes % 4 != 0
        || out.address + out.bytes < out.address) {
      why = fmt::format("a fabric place of {} bytes in chunks of {} at {:#x}", out.bytes,
                        out.chunk_bytes, out.address);
      return errc::bad_frame;
    }
    return errc::ok;
  });
}

} // namespace rw::protocol
