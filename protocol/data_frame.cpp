// The op -> frame encoder (protocol/data_frame.hpp).
#include "protocol/data_frame.hpp"

namespace rw::protocol {

data_frame frame_for(data_op op, pull_options pull) noexcept {
  switch (op) {
    case data_op::init: return {frame_kind::init, 0};
    case data_op::push: return {frame_kind::push, 0};
    case data_op::push_pull: return {frame_kind::push, flag_want_result};
    case data_op::pull:
      return {frame_kind::pull, pull.subscribe      ? flag_subscribe
                                : pull.only_changed ? flag_only_changed
                                                    : uint16_t{0}};
  }
  return {};
}

} // namespace rw::protocol
