#pragma once
// Asking several nodes one thing and acting once all have answered or failed (moving a
// job: actors/cluster/drain.cpp, actors/cluster/takeover.cpp).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/cluster/state.hpp"

namespace rw::actors::detail {

// Asks each node in `ids` (a node not live is a failure at once) and calls
// done(answers by node id, failures) when all have answered or failed.
template <class T, class Done, class... Ts>
void ask_each(cluster_ptr self, const std::vector<uint32_t>& ids,
              std::chrono::milliseconds timeout, const char* what, Done done, Ts... xs) {
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
      acc->failures.push_back(
        fmt::format("node id {} left the cluster before it {}", id, what));
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

} // namespace rw::actors::detail
