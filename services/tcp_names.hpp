#pragma once
// The transport names the services' own files use unqualified (services/*.cpp only: a
// service is a TCP client or server of the frame protocol, in namespace rw::services).

#include "transports/tcp/address.hpp"
#include "transports/tcp/endpoint.hpp"
#include "transports/transport.hpp"

namespace rw::services {

using transports::connection_ptr;
using transports::frame_sink;
using transports::payload_target;
using transports::receive_limits;
using transports::tcp::accept_policy;
using transports::tcp::address;
using transports::tcp::connect_to;
using transports::tcp::endpoint;
using transports::tcp::is_wildcard;
using transports::tcp::parse_address;

} // namespace rw::services
