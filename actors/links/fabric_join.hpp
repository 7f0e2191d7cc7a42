#pragma once
// A worker's fabric connection to the node that welcomed it (actors/links/job_join): the
// node's provider opened here, this side's slots offered in a `fabric` frame on the
// joined TCP connection, the node's offer taken from its answer. The TCP connection
// stays: liveness, and what a node says before the fabric connection exists.

#include <memory>

#include "actors/links/job_join.hpp"
#include "transports/fabric/endpoint.hpp"

namespace rw::actors::detail {

struct fabric_link {
  std::shared_ptr<transports::fabric::endpoint> ep;
  std::shared_ptr<transports::fabric::connection> conn;
};

/// Throws rw::error: the node advertises no fabric, this host lacks its provider, the
/// node declined (its reason), or no answer within the request timeout.
fabric_link join_fabric(transports::tcp::endpoint& ep,
                        const transports::connection_ptr& tcp,
                        const protocol::welcome_msg& welcome, const join_request& req);

} // namespace rw::actors::detail
