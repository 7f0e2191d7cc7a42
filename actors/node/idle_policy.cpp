#include "actors/node/idle_policy.hpp"

namespace rw::actors {

void configure_idle_policy(caf::actor_system_config& cfg) {
  // The quick polls stay (a message that follows at once is taken without a wake-up);
  // the 50 us sleeping polls go.
  cfg.set("work-stealing.moderate-poll-attempts", 0);
}

} // namespace rw::actors
