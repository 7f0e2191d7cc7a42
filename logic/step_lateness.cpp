#include "logic/step_lateness.hpp"

#include <algorithm>

namespace rw::actors::detail {

step_lateness::step_lateness(uint32_t ranks) : ranks_(ranks) {}

const step_lateness::figures& step_lateness::of(uint32_t rank) const {
  static const figures none{};
  return rank < ranks_.size() ? ranks_[rank].f : none;
}

step_lateness::open_step* step_lateness::step_of(uint64_t clock) {
  auto it = std::find_if(open_.begin(), open_.end(),
                         [clock](const open_step& s) { return s.clock >= clock; });
  if (it != open_.end() && it->clock == clock)
    return &*it;
  if (open_.size() == max_open) {
    // Full: the oldest step waits for a rank that will not push it (it left, or the
    // job failed) and is given up on, unless this one would be older still.
    if (it == open_.begin())
      return nullptr;
    open_.pop_front();
    it = std::find_if(open_.begin(), open_.end(),
                      [clock](const open_step& s) { return s.clock > clock; });
  }
  open_step s;
  s.clock = clock;
  s.last.assign(ranks_.size(), clock_type::time_point{});
  s.chunks.assign(ranks_.size(), 0);
  return &*open_.insert(it, std::move(s));
}

std::optional<step_lateness::measured> step_lateness::arrived(uint32_t rank,
                                                              uint64_t clock,
                                                              clock_type::time_point at,
                                                              size_t chunks,
                                                              uint32_t ranks_in) {
  if (rank >= ranks_.size() || chunks == 0)
    return std::nullopt;
  auto* s = step_of(clock);
  if (s == nullptr)
    return std::nullopt;
  s->last[rank] = std::max(s->last[rank], at);
  if (++s->chunks[rank] != chunks || ++s->complete < ranks_in)
    return std::nullopt;
  auto m = measure(*s);
  open_.erase(std::find_if(open_.begin(), open_.end(),
                           [&m](const open_step& o) { return o.clock == m.clock; }));
  return m;
}

step_lateness::measured step_lateness::measure(const open_step& s) {
  measured m;
  m.clock = s.clock;
  auto first = clock_type::time_point::max();
  for (uint32_t r = 0; r < s.last.size(); ++r)
    if (s.chunks[r] != 0) {
      first = std::min(first, s.last[r]);
      if (s.last[r] > m.last) {
        m.last = s.last[r];
        m.slowest = r;
      }
    }
  m.first = first;
  if (steps_++ == 0)
    return m; // the first: the ranks' start, not their pace
  for (uint32_t r = 0; r < s.last.size(); ++r) {
    if (s.chunks[r] == 0)
      continue; // not in the step (left)
    auto late = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(s.last[r] - first).count());
    auto& st = ranks_[r];
    st.f.last_ns = late;
    st.f.max_ns = std::max(st.f.max_ns, late);
    ++st.f.steps;
    st.recent.push_back(late);
    st.recent_sum += late;
    if (st.recent.size() > window) {
      st.recent_sum -= st.recent.front();
      st.recent.pop_front();
    }
    st.f.recent_ns = st.recent_sum / st.recent.size();
  }
  return m;
}

} // namespace rw::actors::detail
