#include "logic/chunk_state.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace rw::actors::detail {

chunk_state::chunk_state(uint32_t length, uint32_t workers, float* params, float* m,
                         float* v, bool wait_for_init, consistency_spec consistency,
                         float* d)
  : length_(length), workers_(workers), params_(params), m_(m), v_(v), d_(d),
    initialized_(!wait_for_init), held_(workers), arrived_(workers, false),
    ahead_(workers), consistency_(consistency), pushes_(workers, 0) {}

waiter chunk_state::push_waiter(transports::connection_ptr conn, uint32_t rank,
                                uint64_t clock) const {
  switch (consistency_.model) {
    case consistency_spec::bsp: return {std::move(conn), rank, clock + 1, 0, 0};
    case consistency_spec::ssp: {
      auto s = consistency_.staleness;
      return {std::move(conn), rank, 0, clock + 1 > s ? clock + 1 - s : 0, clock + 1};
    }
    case consistency_spec::async: break;
  }
  return {std::move(conn), rank, 0, 0, clock + 1};
}

bool chunk_state::needs(uint32_t rank) const noexcept {
  if (consistency_.model == consistency_spec::bsp)
    return step_open() && !arrived_[rank];
  for (auto& w : waiters_)
    if (w.min_pushes > pushes_[rank])
      return true;
  return false;
}

runtime::checkpoint::chunk_record chunk_state::snapshot(uint32_t tensor,
                                                        uint32_t chunk) const {
  runtime::checkpoint::chunk_record r;
  r.tensor = tensor;
  r.chunk = chunk;
  r.version = version_;
  r.params.assign(params_, params_ + length_);
  if (m_ != nullptr)
    r.m.assign(m_, m_ + length_);
  if (v_ != nullptr)
    r.v.assign(v_, v_ + length_);
  return r;
}

std::string chunk_state::restore(const runtime::checkpoint::chunk_record& r) {
  auto fits = [&](const std::vector<float>& xs, const float* dst, const char* what) {
    if (dst == nullptr ? xs.empty() : xs.size() == length_)
      return std::string{};
    return fmt::format("chunk {}/{}: the checkpoint's {} has {} floats, the chunk {}",
                       r.tensor, r.chunk, what, xs.size(), dst == nullptr ? 0u : length_);
  };
  for (auto why :
       {fits(r.params, params_, "parameters"), fits(r.m, m_, "optimizer array m"),
        fits(r.v, v_, "optimizer array v")})
    if (!why.empty())
      return why;
  std::memcpy(params_, r.params.data(), size_t{length_} * sizeof(float));
  if (m_ != nullptr)
    std::memcpy(m_, r.m.data(), size_t{length_} * sizeof(float));
  if (v_ != nullptr)
    std::memcpy(v_, r.v.data(), size_t{length_} * sizeof(float));
  version_ = r.version;
  initialized_ = true;
  packed_version_ = UINT64_MAX;
  return {};
}

std::string chunk_state::cannot_load(uint64_t clock) const {
  if (!initialized_)
    return "it has no initial values yet (rank 0 initialises it first)";
  if (!settled())
    return fmt::format("a step is in it (version {}): load between steps", version_);
  if (version_ != 0 && version_ != clock)
    return fmt::format("it is at version {}: a state loads into a chunk at version 0 "
                       "(before the job's first step), or one at the state's clock {}",
                       version_, clock);
  return {};
}

bool chunk_state::load_array(uint32_t k, const float* values) {
  auto* dst = const_cast<float*>(state_array(k));
  if (dst == nullptr)
    return false;
  std::memcpy(dst, values, size_t{length_} * sizeof(float));
  return true;
}

void chunk_state::load_version(uint64_t clock) {
  version_ = clock;
  packed_version_ = UINT64_MAX;
}

const std::vector<std::byte>& chunk_state::packed(uint16_t flag) const {
  if (packed_version_ != version_
      || packed_.size() != protocol::half_payload_bytes(flag, length_)) {
    packed_.resize(protocol::half_payload_bytes(flag, length_));
    protocol::narrow_half(flag, params_, length_, packed_.data());
    packed_version_ = version_;
  }
  return packed_;
}

bool chunk_state::init(const float* values) {
  if (initialized_ || version_ != 0)
    return false;
  std::memcpy(params_, values, size_t{length_} * sizeof(float));
  initialized_ = true;
  packed_version_ = UINT64_MAX;
  return true;
}

chunk_state::outcome chunk_state::push(uint32_t rank, uint64_t clock,
                                       runtime::buffer_ref data,
                                       std::chrono::steady_clock::time_point now) {
  if (consistency_.model != consistency_spec::bsp) {
    // A rank's pushes come in clock order; each is applied by the next complete_step.
    auto expected = pushes_[rank] + (held_[rank] ? 1 : 0);
    if (clock < expected)
      return outcome::duplicate;
    if (clock > expected || held_[rank])
      return outcome::too_far_ahead;
    held_[rank] = std::move(data);
    ++arrivals_;
    return step_ready() ? outcome::step_ready : outcome::counted;
  }
  if (clock < version_)
    return outcome::duplicate;
  if (clock > version_ + 1)
    return outcome::too_far_ahead;
  if (clock == version_ + 1) {
    if (ahead_[rank])
      return outcome::duplicate;
    ahead_[rank] = std::move(data);
    return outcome::counted;
  }
  if (arrived_[rank])
    return outcome::duplicate;
  if (arrivals_ == 0)
    opened_at_ = now;
  arrived_[rank] = true;
  ++arrivals_;
  held_[rank] = std::move(data);
  absorb_in_order();
  return step_ready() ? outcome::step_ready : outcome::counted;
}

void chunk_state::absorb_in_order() {
  auto& k = runtime::kernels();
  while (next_ < absorb_limit() && held_[next_]) {
    if (next_ == 0) {
      sum_ = std::move(held_[0]); // rank 0's buffer becomes the running sum
    } else if (sum_->writable()) {
      k.sum_into(sum_->floats(), held_[next_]->floats(), length_);
    } else {
      return; // read-only shared memory: summed when the step is complete
    }
    held_[next_].reset(); // back to the pool, or the worker's memory is free again
    ++next_;
  }
}

void chunk_state::apply_arrivals(const optimizer_spec& spec, float rescale) {
  auto& k = runtime::kernels();
  for (uint32_t r = 0; r < workers_; ++r) {
    if (!held_[r])
      continue;
    if (spec.kind == optimizer_kind::sum) // accumulate: the running sum of every push
      k.sum_into(params_, held_[r]->floats(), length_);
    else
      k.step(spec, rescale, version_ + 1, params_, held_[r]->floats(), nullptr, {m_, v_},
             length_);
    held_[r].reset();
    ++pushes_[r];
    ++version_;
  }
  arrivals_ = 0;
  min_pushes_ = *std::min_element(pushes_.begin(), pushes_.end());
}

void chunk_state::complete_step(const optimizer_spec& spec, float rescale,
                                std::chrono::steady_clock::time_point now) {
  if (consistency_.model != consistency_spec::bsp) {
    apply_arrivals(spec, rescale);
    return;
  }
  const float* inputs[64];
  std::vector<const float*> more;
  auto count = gather_inputs(inputs, more);
  runtime::step_inputs(runtime::kernels(), spec, rescale, version_ + 1, params_,
                       more.empty() ? inputs : more.data(), count, {m_, v_, d_}, length_);
  ++version_;
  release_inputs();
  open_next_step(now);
}

uint32_t chunk_state::gather_inputs(const float** in,
                                    std::vector<const float*>& more) const {
  if (summed_ || total_) { // the whole step's sum, from the home or made here
    in[0] = summed_ ? d_ : total_->floats();
    return 1;
  }
  uint32_t count = (next_ > 0 ? 1 : 0) + (workers_ - next_);
  if (count > 64) {
    more.resize(count);
    in = more.data();
  }
  uint32_t k = 0;
  if (next_ > 0)
    in[k++] = sum_->floats();
  for (uint32_t r = next_; r < workers_; ++r)
    in[k++] = held_[r]->floats();
  return count;
}

void chunk_state::release_inputs() {
  total_.reset();
  if (summed_)
    return; // already released by prepare_mirror
  sum_.reset();
  for (uint32_t r = next_; r < workers_; ++r)
    held_[r].reset();
}

void chunk_state::open_next_step(std::chrono::steady_clock::time_point now) {
  summed_ = false;
  total_ = std::move(total_ahead_);
  next_ = 0;
  arrivals_ = 0;
  std::fill(arrived_.begin(), arrived_.end(), false);
  for (uint32_t r = 0; r < workers_; ++r) {
    if (!ahead_[r])
      continue;
    if (arrivals_ == 0)
      opened_at_ = now;
    arrived_[r] = true;
    ++arrivals_;
    held_[r] = std::move(ahead_[r]);
  }
  absorb_in_order();
}

runtime::norm_parts chunk_state::prepare_layerwise(const optimizer_spec& spec,
                                                   float rescale) {
  // The summed gradient goes into d (rank order), then becomes the direction in place.
  sum_step_into(d_);
  layerwise_pending_ = true;
  return runtime::layerwise_prepare(spec, rescale, version_ + 1, params_, d_,
                                    {m_, v_, d_}, length_);
}

const float* chunk_state::prepare_mirror() {
  sum_step_into(d_);
  summed_ = true;
  mirror_pending_ = true;
  return d_;
}

chunk_state::outcome chunk_state::push_total(uint64_t clock, runtime::buffer_ref sum) {
  if (clock < version_ || (clock == version_ && total_)
      || (clock == version_ + 1 && total_ahead_))
    return outcome::duplicate;
  if (clock > version_ + 1)
    return outcome::too_far_ahead;
  (clock == version_ ? total_ : total_ahead_) = std::move(sum);
  return step_ready() ? outcome::step_ready : outcome::counted;
}

float* chunk_state::prepare_relay() {
  sum_step_into(d_);
  relay_pending_ = true;
  return d_;
}

void chunk_state::sum_step_into(float* out) {
  if (summed_ && out == d_)
    return; // it is there
  const float* inputs[64];
  std::vector<const float*> more;
  auto count = gather_inputs(inputs, more);
  auto** in = more.empty() ? inputs : more.data();
  auto& k = runtime::kernels();
  if (count == 1)
    std::memcpy(out, in[0], size_t{length_} * sizeof(float));
  else
    k.add(out, in[0], in[1], length_);
  for (uint32_t j = 2; j < count; ++j)
    k.sum_into(out, in[j], length_);
  release_inputs();
}

void chunk_state::finish_relay(const float* params,
                               std::chrono::steady_clock::time_point now) {
  if (params == d_) // the answer came into the relay buffer: it becomes the parameters
    std::swap(params_, d_);
  else
    std::memcpy(params_, params, size_t{length_} * sizeof(float));
  ++version_;
  relay_pending_ = false;
  open_next_step(now);
}

void chunk_state::finish_layerwise(const optimizer_spec& spec, float trust,
                                   std::chrono::steady_clock::time_point now) {
  runtime::layerwise_apply(spec, trust, params_, {m_, v_, d_}, length_);
  ++version_;
  layerwise_pending_ = false;
  open_next_step(now);
}

std::vector<waiter> chunk_state::take_ready(bool by_lag) {
  std::vector<waiter> ready;
  if (!initialized_ || waiters_.empty())
    return ready;
  auto split = std::stable_partition(
    waiters_.begin(), waiters_.end(),
    [&](const waiter& w) { return w.version > version_ || w.min_pushes > min_pushes_; });
  std::move(split, waiters_.end(), std::back_inserter(ready));
  waiters_.erase(split, waiters_.end());
  if (by_lag && ready.size() > 1)
    std::stable_sort(ready.begin(), ready.end(), [](const waiter& a, const waiter& b) {
      return a.progress() < b.progress();
    });
  return ready;
}

std::vector<waiter> chunk_state::take_all() {
  std::vector<waiter> all;
  all.swap(waiters_);
  for (auto& s : subscribers_)
    all.push_back(s);
  subscribers_.clear();
  return all;
}

bool chunk_state::wait_once(waiter w) {
  for (auto& o : waiters_)
    if (o.conn == w.conn && o.rank == w.rank && o.version == w.version
        && o.min_pushes == w.min_pushes && o.ack_only == w.ack_only)
      return false;
  waiters_.push_back(std::move(w));
  return true;
}

bool chunk_state::may_wait(const transports::connection_ptr& conn) const noexcept {
  uint32_t mine = 0;
  for (auto& w : waiters_)
    if (w.conn == conn && ++mine >= defaults::max_waiting_pulls)
      return false;
  return true;
}

void chunk_state::subscribe(waiter w) {
  for (auto& s : subscribers_)
    if (s.conn == w.conn) {
      s = std::move(w);
      return;
    }
  subscribers_.push_back(std::move(w));
}

std::vector<waiter> chunk_state::publish() {
  std::vector<waiter> due;
  if (!initialized_)
    return due;
  subscribers_.erase(
    std::remove_if(subscribers_.begin(), subscribers_.end(),
                   [](const waiter& w) { return w.conn && !w.conn->is_open(); }),
    subscribers_.end());
  for (auto& s : subscribers_)
    if (s.version == UINT64_MAX || s.version < version_) { // new, or behind
      s.version = version_;
      due.push_back(s);
    }
  return due;
}

std::vector<uint32_t> chunk_state::missing_ranks() const {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < workers_; ++r)
    if (!arrived_[r])
      out.push_back(r);
  return out;
}

} // namespace rw::actors::detail
