#pragma once
// Asking several nodes one thing and acting once all have answered or failed: moving a
// job (actors/cluster/move.cpp, join.cpp, takeover.cpp, hyper.cpp) and the job registry
// (jobs.cpp, create.cpp).

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/cluster/state.hpp"

namespace rw::actors::detail {

// Asks each node in `ids` and calls done(answers by node id, failures) once all have
// answered or failed: a failed ask reads "node NAME WHAT: ERROR", and a node that is no
// longer live fails at once with gone(id).
template <class T, class Gone, class Done, class... Ts>
void ask_all(cluster_ptr self, const std::vector<uint32_t>& ids,
             std::chrono::milliseconds timeout, const char* what, Gone gone, Done done,
             Ts... xs) {
  struct acc_t {
    std::map<uint32_t, T> answers;
    std::vector<std::string> failures;
    size_t pending = 0;
  };
  auto acc = std::make_shared<acc_t>();
  acc->pending = ids.size() + 1;
  auto finish = [acc, done]() mutable {
    if (--acc->pending == 0)
      done(acc->answers, acc->failures);
  };
  for (auto id : ids) {
    auto it = self->state.nodes.find(id);
    if (it == self->state.nodes.end()) {
      acc->failures.push_back(gone(id));
      finish();
      continue;
    }
    auto name = it->second.info.name;
    self->request(it->second.link, timeout, xs...)
      .then(
        [acc, finish, id](T& x) mutable {
          acc->answers.emplace(id, std::move(x));
          finish();
        },
        [self, acc, finish, name, what](caf::error& err) mutable {
          acc->failures.push_back(
            fmt::format("node {} {}: {}", name, what, describe(self->system(), err)));
          finish();
        });
  }
  finish(); // the extra count: done runs once, after the loop, even if every ask failed
}

// ask_all for a step of moving a job, WHAT what each node is to have done ("took the
// job's grant"): a node gone reads "node id N left the cluster before it WHAT".
template <class T, class Done, class... Ts>
void ask_each(cluster_ptr self, const std::vector<uint32_t>& ids,
              std::chrono::milliseconds timeout, const char* what, Done done, Ts... xs) {
  ask_all<T>(
    self, ids, timeout, what,
    [what](uint32_t id) {
      return fmt::format("node id {} left the cluster before it {}", id, what);
    },
    std::move(done), xs...);
}

// ask_all for the job registry (actors/cluster/jobs.cpp, create.cpp), within the
// coordinator's node_request_timeout, WHAT what a failed node did not do ("did not stop
// the job"): a node gone reads "node id N WHAT: it has left the cluster".
template <class T, class Done, class... Ts>
void ask_nodes(cluster_ptr self, const std::vector<uint32_t>& ids, const char* what,
               Done done, Ts... xs) {
  ask_all<T>(
    self, ids, self->state.settings.node_request_timeout, what,
    [what](uint32_t id) {
      return fmt::format("node id {} {}: it has left the cluster", id, what);
    },
    std::move(done), xs...);
}

} // namespace rw::actors::detail
