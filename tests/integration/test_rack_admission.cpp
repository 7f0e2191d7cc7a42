// A node whose shards cannot set up a new job's chunks: the first worker's hello is
// answered with the reason within the setup timeout, and the job is gone from the node
// (its name free, no rank left "live"), so the same worker can say hello again. The
// shards are stand-ins: one refuses the request, one never answers it.

#include <chrono>
#include <memory>
#include <vector>

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include "actors/shard/chunk_shard.hpp"
#include "actors/cluster_messages.hpp"
#include "actors/rack/rack_coordinator.hpp"

namespace rw_integration_rack_admission {

using namespace rw;
using namespace std::chrono_literals;

namespace {

job_spec small_job() {
  job_spec s;
  s.name = "doomed";
  s.num_workers = 2;
  s.tensors = {{"w", 1000, false}};
  return s;
}

// A shard that answers create with an error, as one that cannot allocate would. Like
// a real shard it takes the node's abort and drop of a job without answering.
// (It takes its refusal as an argument: CAF 0.17 spawns an argument-less function actor
// through a null tuple pointer, undefined behaviour UBSan stops on.)
caf::behavior refusing_shard(std::string why) {
  return {
    [why](actors::create_atom, actors::job_setup&,
          actors::abort_sink&) -> caf::result<actors::ok_atom> {
      return caf::make_error(caf::sec::runtime_error, why);
    },
    [](actors::abort_atom, uint32_t, errc, const std::string&) {},
    [](actors::drop_atom, uint32_t) {},
  };
}

// A shard that takes create and never answers: its promises are kept, not broken.
caf::behavior silent_shard(caf::event_based_actor* self,
                           std::shared_ptr<std::vector<caf::response_promise>> held) {
  return {
    [=](actors::create_atom, actors::job_setup&, actors::abort_sink&) {
      held->push_back(self->make_response_promise());
      return held->back();
    },
    [](actors::abort_atom, uint32_t, errc, const std::string&) {},
    [](actors::drop_atom, uint32_t) {},
  };
}

actors::job_binding hello(caf::scoped_actor& self,
                          const actors::rack_coordinator_actor& rc, uint32_t rank) {
  actors::hello_request req;
  req.hello.spec = small_job();
  req.hello.rank = rank;
  req.peer = "127.0.0.1:1 (test)";
  actors::job_binding out;
  out.code = errc::ok;
  self->request(rc, 10s, actors::hello_atom::value, req)
    .receive([&](actors::job_binding& b) { out = std::move(b); },
             [&](caf::error& err) {
               out.code = errc::timeout;
               out.message = "no answer to the hello: " + self->system().render(err);
             });
  return out;
}

actors::coordinator_settings settings() {
  actors::coordinator_settings s;
  s.node_name = "solo";
  s.open_jobs = true;
  s.max_job_bytes = 1u << 30;
  s.shard_setup_timeout = 300ms;
  return s;
}

} // namespace

TEST_CASE(
  "a shard that fails to set up a job: the job ends on the node, its name is free",
  "[integration][admission]") {
  caf::actor_system_config cfg;
  actors::register_cluster_types(cfg);
  caf::actor_system sys{cfg};
  auto shard = caf::actor_cast<actors::chunk_shard_actor>(
    sys.spawn(refusing_shard, std::string("cannot allocate the job's chunks")));
  auto rc = actors::spawn_rack_coordinator(sys, settings(), {shard});
  caf::scoped_actor self{sys};
  auto first = hello(self, rc, 0);
  CHECK(first.code == errc::internal);
  CHECK_THAT(first.message, Catch::Contains("shard 0 of node solo did not set up"));
  CHECK_THAT(first.message, Catch::Contains("cannot allocate"));
  // Rank 0 is not left live and the name is not taken: the same hello creates the job
  // afresh (and fails the same way), rather than "rank 0 is already held".
  auto again = hello(self, rc, 0);
  INFO(again.message);
  CHECK(again.code == errc::internal);
  CHECK_THAT(again.message, !Catch::Contains("already held"));
  self->send_exit(rc, caf::exit_reason::user_shutdown);
  self->send_exit(caf::actor_cast<caf::actor>(shard), caf::exit_reason::user_shutdown);
}

TEST_CASE("a shard that never answers the setup: the hello fails within the timeout",
          "[integration][admission]") {
  caf::actor_system_config cfg;
  actors::register_cluster_types(cfg);
  caf::actor_system sys{cfg};
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  auto shard = caf::actor_cast<actors::chunk_shard_actor>(sys.spawn(silent_shard, held));
  auto rc = actors::spawn_rack_coordinator(sys, settings(), {shard});
  caf::scoped_actor self{sys};
  auto started = std::chrono::steady_clock::now();
  auto first = hello(self, rc, 0);
  CHECK(first.code == errc::internal);
  CHECK_THAT(first.message, Catch::Contains("did not set up the job's chunks"));
  CHECK(std::chrono::steady_clock::now() - started < 9s); // answered, not the test's 10 s
  auto again = hello(self, rc, 1);
  INFO(again.message);
  CHECK(again.code == errc::internal);
  CHECK_THAT(again.message, !Catch::Contains("already"));
  self->send_exit(rc, caf::exit_reason::user_shutdown);
  self->send_exit(caf::actor_cast<caf::actor>(shard), caf::exit_reason::user_shutdown);
}

} // namespace rw_integration_rack_admission
