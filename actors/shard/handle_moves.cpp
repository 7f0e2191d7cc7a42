// Moving chunks: a drained node's job held, fenced and reshaped (chunk_shard.hpp,
// "Moving"), and in-node balancing between the node's shards (expect, migrate, adopt).

#include "actors/shard/handlers.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "logic/chunk_state.hpp"
#include "logic/shard_answers.hpp"
#include "actors/shard/balance.hpp"
#include "actors/shard/hyper.hpp"
#include "actors/shard/checkpoint.hpp"
#include "actors/shard/job.hpp"
#include "actors/shard/moves.hpp"
#include "runtime/kernels.hpp"
#include "runtime/layerwise.hpp"
#include "runtime/trace.hpp"

namespace rw::actors::shard_impl {

// The pushes a move's first phase held, counted now (or dropped) as any other.
void serve_held(shard_core& self, uint32_t job_id, shard_job& job) {
  job.holding = false;
  auto held = std::move(job.held);
  job.held.clear();
  detail::shard_answers::holding together{self.state.answers};
  for (auto& p : held)
    changing(self, job_id, [&] { on_push(self, p); });
}

// A job moves, first phase: its pushes here wait for the fence (chunk_shard.hpp, "hold").
shard_refusal on_hold(shard_core& self, uint32_t job_id, settle_targets& reach) {
  auto& st = self.state;
  auto it = st.book->jobs.find(job_id);
  if (it == st.book->jobs.end())
    return no_live_job(st, job_id);
  auto& job = it->second;
  if (auto why = detail::cannot_settle(job); !why.empty())
    return {errc::invalid_spec, why};
  job.holding = true;
  reach = detail::settle_reach(job, st.settings.index);
  return {};
}

// Then its chunks here settle, then their copy (chunk_shard.hpp, "fence").
void on_fence(shard_core& self, uint32_t job_id, const settle_targets& targets,
              snapshot_reply_ptr reply) {
  auto& st = self.state;
  auto it = st.book->jobs.find(job_id);
  if (it == st.book->jobs.end()) {
    auto no = no_live_job(st, job_id);
    reply->fail(no.code, no.why);
    return;
  }
  auto& job = it->second;
  if (job.settle_reply) {
    reply->fail(errc::invalid_spec,
                fmt::format("job '{}' is moving already", job.spec.name));
    return;
  }
  if (!job.holding) {
    reply->fail(
      errc::internal,
      fmt::format("job '{}': a fence came without its hold first", job.spec.name));
    return;
  }
  job.settling = true;
  job.frozen = false;
  job.settle_reply = std::move(reply);
  job.settle_to = targets.by_tensor;
  serve_held(self, job_id, job);
  if (auto again = st.book->jobs.find(job_id); again != st.book->jobs.end())
    detail::check_settled(again->second, st.settings.index);
}

// The moved job's chunks here, from the copies (chunk_shard.hpp, "reshape").
shard_refusal on_reshape(shard_core& self, job_setup& setup) {
  auto& st = self.state;
  auto it = st.book->jobs.find(setup.job_id);
  if (it == st.book->jobs.end())
    return no_live_job(st, setup.job_id);
  auto coordinator = it->second.coordinator;
  detail::fail_checkpoints(it->second, "the job moved between nodes before every chunk "
                                       "reached the checkpoint's clock");
  if (it->second.settle_reply)
    it->second.settle_reply->fail(errc::stopped, "the job was reshaped");
  st.book->stats.chunks -= it->second.chunks.size();
  st.book->jobs.erase(it); // waiters dropped unanswered: they are sent again
  return create_job(self, setup, std::move(coordinator));
}

// In-node balancing, step 1 (actors/shard/balance.hpp): the chunks the move gives this
// shard wait for their state.
shard_refusal on_expect(shard_core& self, const shard_move& m) {
  auto& st = self.state;
  auto it = st.book->jobs.find(m.job_id);
  if (it == st.book->jobs.end())
    return no_live_job(st, m.job_id);
  if (auto why = detail::expect_chunks(it->second, st.settings.index, m.next);
      !why.empty())
    return {errc::invalid_spec,
            fmt::format("job {}: shard {}: {}", m.job_id, st.settings.index, why)};
  auto& incoming = it->second.incoming; // counted from now: a drop counts them out
  st.book->stats.chunks += static_cast<uint64_t>(
    std::count(incoming.begin(), incoming.end(), true));
  return {};
}

// Step 3: the chunks the move takes from this shard, for the shard they go to (whose
// answer to the handoff ends it).
shard_refusal on_migrate(shard_core& self, const shard_move& m, handoff_ptr& handoff) {
  auto& st = self.state;
  auto it = st.book->jobs.find(m.job_id);
  if (it == st.book->jobs.end())
    return no_live_job(st, m.job_id);
  auto& job = it->second;
  if (!job.incoming.empty())
    return {errc::internal, fmt::format("job {}: shard {} is receiving chunks itself",
                                        m.job_id, st.settings.index)};
  st.answers.flush(); // nothing held may point at a chunk once another shard runs it
  auto h = std::make_shared<detail::chunk_handoff>();
  changing(self, m.job_id, [&] {
    *h = detail::give_chunks(*st.book, m.job_id, job, st.settings.index, m.next);
  });
  st.book->stats.chunks -= h->chunks.size();
  st.book->stats.moved_out += h->chunks.size();
  for (auto& [clock, snap] : detail::take_complete_periodic(job))
    send_periodic(self, m.job_id, job, clock, std::move(snap));
  handoff = std::move(h);
  return {};
}

// The chunks arrive: they take their places, and what waited for them is served.
shard_refusal on_adopt(shard_core& self, const handoff_ptr& h) {
  auto& st = self.state;
  auto it = st.book->jobs.find(h->job_id);
  if (it == st.book->jobs.end())
    return no_live_job(st, h->job_id);
  auto& job = it->second;
  std::string error;
  std::vector<shard_job::stashed> serve;
  changing(self, h->job_id, [&] { serve = detail::take_chunks(job, *h, error); });
  if (!error.empty() && serve.empty())
    return {errc::internal,
            fmt::format("job {}: shard {}: {}", h->job_id, st.settings.index, error)};
  st.book->stats.moved_in += h->chunks.size();
  for (auto& [clock, snap] : detail::take_complete_periodic(job))
    send_periodic(self, h->job_id, job, clock, std::move(snap));
  detail::shard_answers::holding together{st.answers};
  for (auto& r : serve) {
    switch (r.kind) {
      case shard_job::stashed::a_push:
        changing(self, r.push.job_id, [&] { on_push(self, r.push); });
        break;
      case shard_job::stashed::an_init:
        changing(self, r.push.job_id, [&] { on_init(self, r.push); });
        break;
      case shard_job::stashed::a_pull: on_pull(self, r.pull); break;
    }
  }
  if (!error.empty())
    return {errc::internal,
            fmt::format("job {}: shard {}: {}", h->job_id, st.settings.index, error)};
  return {};
}

} // namespace rw::actors::shard_impl
