#include "worker/answer_slots.hpp"

#include <algorithm>

namespace rw::actors {

answer_slots::answer_slots(const std::vector<uint32_t>& chunk_counts) {
  for (auto count : chunk_counts) {
    slots_.push_back(std::make_unique<slot>());
    slots_.back()->arrived.assign(count, 0);
    last_.push_back(std::make_unique<last_op>());
  }
}

void answer_slots::arm(uint32_t tensor, const armed_op& op,
                       const std::vector<uint8_t>& replica_awaited) {
  auto& s = *slots_[tensor];
  std::lock_guard<std::mutex> guard{s.mtx};
  auto count = static_cast<uint32_t>(s.arrived.size());
  s.op = op;
  s.remaining = count;
  s.answered = 0;
  s.wake_at = 0;
  s.staleness = 0;
  s.changed = 0;
  std::fill(s.arrived.begin(), s.arrived.end(), 0);
  s.mirror = false;
  s.push_clock = op.expect_update && op.version > 0 ? op.version - 1 : op.version;
  s.mirrored.assign(count, 1);
  for (uint32_t c = 0; c < count && c < replica_awaited.size(); ++c)
    if (replica_awaited[c] != 0) {
      s.mirror = true;
      s.mirrored[c] = 0;
      ++s.remaining;
    }
}

void answer_slots::subscribe(uint32_t tensor, float* dst,
                             std::function<void(uint64_t)> on_version) {
  auto& s = *slots_[tensor];
  std::lock_guard<std::mutex> guard{s.mtx};
  s.sub_dst = dst;
  s.on_version = std::move(on_version);
  s.sub_versions.assign(s.arrived.size(), UINT64_MAX);
  s.sub_min = UINT64_MAX;
}

bool answer_slots::wake_when_answered(uint32_t tensor, uint64_t seq, uint32_t answered) {
  auto& s = *slots_[tensor];
  std::lock_guard<std::mutex> guard{s.mtx};
  if (s.op.seq != seq || s.answered >= answered)
    return true;
  s.wake_at = answered;
  return false;
}

bool answer_slots::chunk_arrived(uint32_t tensor, uint32_t chunk) const {
  auto& s = *slots_[tensor];
  std::lock_guard<std::mutex> guard{s.mtx};
  return chunk < s.arrived.size() && s.arrived[chunk] != 0
         && (chunk >= s.mirrored.size() || s.mirrored[chunk] != 0);
}

bool answer_slots::belongs(const slot& s, bool is_update, bool unchanged,
                           uint64_t clock) {
  if (s.op.seq == 0)
    return false;
  if (unchanged)
    return s.op.expect_update && s.op.changes_only && clock + 1 == s.op.version;
  return s.op.expect_update == is_update
         && (is_update ? clock >= s.op.version : clock == s.op.version);
}

answer_verdict answer_slots::begin(uint32_t tensor, uint32_t chunk, bool is_update,
                                   bool unchanged, uint64_t clock, bool length_ok,
                                   float*& dst) {
  dst = nullptr;
  if (tensor >= slots_.size() || chunk >= slots_[tensor]->arrived.size())
    return answer_verdict::stale;
  auto& s = *slots_[tensor];
  std::lock_guard<std::mutex> guard{s.mtx};
  if (!belongs(s, is_update, unchanged, clock))
    return answer_verdict::stale;
  if (!is_update)
    return answer_verdict::ack;
  if (!length_ok)
    return answer_verdict::bad_length;
  if (s.op.dst == nullptr)
    return answer_verdict::stale; // an update armed with nowhere to land: refused
  ++s.landings;
  dst = s.op.dst;
  return answer_verdict::land;
}

void answer_slots::landed(uint32_t tensor) {
  if (tensor >= slots_.size())
    return;
  auto& s = *slots_[tensor];
  to_tell t;
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    end_landing(s, t);
  }
  tell(tensor, std::move(t));
}

void answer_slots::answered(uint32_t tensor, uint32_t chunk, uint32_t staleness,
                            bool changed, bool landing) {
  if (tensor >= slots_.size())
    return;
  auto& s = *slots_[tensor];
  to_tell t;
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    if (landing)
      end_landing(s, t); // an operation that ended while this landed: not counted below
    if (s.op.seq != 0)
      count(tensor, s, chunk, staleness, changed, t);
  }
  tell(tensor, std::move(t));
}

bool answer_slots::answer_whole(uint32_t tensor, uint32_t chunk, bool is_update,
                                bool unchanged, uint64_t clock, uint32_t staleness,
                                copy_into copy) {
  if (tensor >= slots_.size() || chunk >= slots_[tensor]->arrived.size())
    return false;
  auto& s = *slots_[tensor];
  to_tell t;
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    if (!belongs(s, is_update, unchanged, clock))
      return false;
    if (is_update && copy)
      copy(s.op.dst);
    count(tensor, s, chunk, is_update ? staleness : 0, is_update, t);
  }
  tell(tensor, std::move(t));
  return true;
}

void answer_slots::replica_acked(uint32_t tensor, uint32_t chunk, uint64_t clock) {
  if (tensor >= slots_.size())
    return;
  auto& s = *slots_[tensor];
  to_tell t;
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    if (s.op.seq != 0 && s.mirror && clock == s.push_clock)
      count_mirror(tensor, s, chunk, t);
  }
  tell(tensor, std::move(t));
}

void answer_slots::replicas_changed(
  const std::function<bool(uint32_t, uint32_t)>& has_replica) {
  for (uint32_t tensor = 0; tensor < slots_.size(); ++tensor) {
    auto& s = *slots_[tensor];
    to_tell t;
    {
      std::lock_guard<std::mutex> guard{s.mtx};
      if (s.op.seq == 0 || !s.mirror)
        continue;
      for (uint32_t c = 0; c < s.mirrored.size() && s.op.seq != 0; ++c)
        if (s.mirrored[c] == 0 && !has_replica(tensor, c))
          count_mirror(tensor, s, c, t);
    }
    tell(tensor, std::move(t));
  }
}

bool answer_slots::fail(uint32_t tensor, errc code, std::string why) {
  if (tensor >= slots_.size())
    return false;
  auto& s = *slots_[tensor];
  to_tell t;
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    if (s.op.seq == 0)
      return false;
    complete(s, code, std::move(why), t);
  }
  tell(tensor, std::move(t));
  return true;
}

float* answer_slots::subscription(uint32_t tensor) const {
  if (tensor >= slots_.size())
    return nullptr;
  auto& s = *slots_[tensor];
  std::lock_guard<std::mutex> guard{s.mtx};
  return s.sub_dst;
}

void answer_slots::published(uint32_t tensor, uint32_t chunk, uint64_t version,
                             copy_into copy) {
  if (tensor >= slots_.size())
    return;
  auto& s = *slots_[tensor];
  uint64_t whole = UINT64_MAX;
  {
    std::lock_guard<std::mutex> guard{s.mtx};
    if (s.sub_dst == nullptr)
      return;
    if (copy)
      copy(s.sub_dst);
    whole = advance(s, chunk, version);
  }
  announce(tensor, whole);
}

void answer_slots::end_landing(slot& s, to_tell& t) {
  if (s.landings > 0)
    --s.landings;
  if (s.landings == 0 && s.held) {
    t.told = std::move(s.held);
    s.held.reset();
  }
}

void answer_slots::count(uint32_t tensor, slot& s, uint32_t chunk, uint32_t staleness,
                         bool changed, to_tell& t) {
  if (chunk < s.arrived.size()) {
    if (s.arrived[chunk] != 0)
      return; // answered already: this answers a re-sent request
    s.arrived[chunk] = 1;
  }
  s.staleness = std::max(s.staleness, staleness);
  s.changed += changed ? 1 : 0;
  --s.remaining;
  ++s.answered;
  if (s.wake_at != 0 && s.answered >= s.wake_at) {
    s.wake_at = 0;
    t.wake = true;
    t.wake_seq = s.op.seq;
  }
  finish_if_done(tensor, s, t);
}

void answer_slots::count_mirror(uint32_t tensor, slot& s, uint32_t chunk, to_tell& t) {
  if (chunk >= s.mirrored.size() || s.mirrored[chunk] != 0)
    return; // acked already (a re-sent push's repeat), or no replica awaited
  s.mirrored[chunk] = 1;
  --s.remaining;
  finish_if_done(tensor, s, t);
}

void answer_slots::finish_if_done(uint32_t tensor, slot& s, to_tell& t) {
  if (s.op.seq == 0 || s.remaining > 0)
    return;
  last_[tensor]->staleness.store(s.staleness, std::memory_order_release);
  last_[tensor]->changed.store(s.changed, std::memory_order_release);
  complete(s, errc::ok, {}, t);
}

void answer_slots::complete(slot& s, errc code, std::string why, to_tell& t) {
  outcome o{s.op.seq, code, std::move(why)};
  s.op.seq = 0; // nothing more lands in its buffer from here on (belongs)
  if (s.landings > 0)
    s.held = std::move(o);
  else
    t.told = std::move(o);
}

uint64_t answer_slots::advance(slot& s, uint32_t chunk, uint64_t version) {
  if (chunk >= s.sub_versions.size())
    return UINT64_MAX;
  auto& v = s.sub_versions[chunk];
  if (v != UINT64_MAX && v >= version)
    return UINT64_MAX;
  v = version;
  // Every chunk at least here: a whole new version of the tensor. A chunk with no
  // version yet holds every version back (UINT64_MAX would otherwise count as the
  // largest, and a version announced before that chunk had landed).
  if (std::find(s.sub_versions.begin(), s.sub_versions.end(), UINT64_MAX)
      != s.sub_versions.end())
    return UINT64_MAX;
  auto least = *std::min_element(s.sub_versions.begin(), s.sub_versions.end());
  if (s.sub_min != UINT64_MAX && least <= s.sub_min)
    return UINT64_MAX;
  s.sub_min = least;
  return least;
}

void answer_slots::tell(uint32_t tensor, to_tell t) {
  if (!events_)
    return;
  if (t.wake)
    events_->answered(tensor, t.wake_seq);
  if (!t.told)
    return;
  if (t.told->code == errc::ok)
    events_->done(tensor, t.told->seq);
  else
    events_->failed(tensor, t.told->seq, t.told->code, std::move(t.told->why));
}

void answer_slots::announce(uint32_t tensor, uint64_t version) {
  if (version == UINT64_MAX)
    return;
  std::function<void(uint64_t)> callback;
  {
    std::lock_guard<std::mutex> guard{slots_[tensor]->mtx};
    callback = slots_[tensor]->on_version;
  }
  if (callback)
    callback(version);
}

} // namespace rw::actors
