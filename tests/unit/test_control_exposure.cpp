// When rw-node may start without a cluster secret: an open control plane is allowed on
// loopback addresses only, with TLS, or with --insecure (which names what is open).

#include <catch2/catch.hpp>

#include "runtime/control_exposure.hpp"

namespace rw_unit_control_exposure {

using rw::runtime::node_config;

TEST_CASE("an open control plane without a cluster secret: loopback addresses are told "
          "from the others",
          "[secret]") {
  using rw::runtime::is_loopback_address;
  for (auto a : {"127.0.0.1:7700", "127.1.2.3:0", "localhost:7700", "[::1]:7700", "::1",
                 "lo:7700", "127.0.0.1"})
    CHECK(is_loopback_address(a));
  for (auto a : {"0.0.0.0:7700", "10.0.0.1:7700", "[::]:7700", "eth0:7700", ":7700",
                 "node-3:7700", "128.0.0.1:1", "[2001:db8::1]:7700"})
    CHECK(!is_loopback_address(a));
}

TEST_CASE("without a cluster secret an open control port or listen address beyond "
          "loopback is refused, saying what to do",
          "[secret]") {
  node_config c; // 127.0.0.1:7700, the control port on its host
  CHECK(rw::runtime::exposure_refusal(c).empty());
  CHECK(rw::runtime::exposure_warning(c).empty());
  c.control = "0.0.0.0:7701";
  auto why = rw::runtime::exposure_refusal(c);
  CHECK_THAT(why, Catch::Contains("no --cluster-secret-file")
                    && Catch::Contains("the control port 0.0.0.0:7701")
                    && Catch::Contains("--cluster-secret-file FILE")
                    && Catch::Contains("loopback") && Catch::Contains("--insecure"));
  c.control.clear();
  c.listen = {"0.0.0.0:7700"}; // the control port follows the first --listen host
  CHECK_THAT(rw::runtime::exposure_refusal(c),
             Catch::Contains("the control port 0.0.0.0:0")
               && Catch::Contains("--listen 0.0.0.0:7700"));
  // A member (it joins another node's coordinator): its --listen only.
  c.coordinator = "127.0.0.1:7600";
  CHECK_THAT(rw::runtime::exposure_refusal(c),
             !Catch::Contains("control port 0.0.0.0")
               && Catch::Contains("--listen 0.0.0.0:7700"));
  // --insecure: starts, and the warning names what is open.
  c.insecure = true;
  CHECK(rw::runtime::exposure_refusal(c).empty());
  CHECK_THAT(rw::runtime::exposure_warning(c),
             Catch::Contains("--insecure") && Catch::Contains("--listen 0.0.0.0:7700"));
  // A secret, or TLS, protects the control plane: no refusal, no warning.
  c.insecure = false;
  c.cluster_secret_file = "/etc/rackweave/cluster.secret";
  CHECK(rw::runtime::exposure_refusal(c).empty());
  CHECK(rw::runtime::exposure_warning(c).empty());
  c.cluster_secret_file.clear();
  c.tls_cert = "c.pem";
  c.tls_key = "k.pem";
  CHECK(!rw::runtime::exposure_refusal(c).empty()); // all three, or it is no TLS
  c.tls_ca = "ca.pem";
  CHECK(rw::runtime::exposure_refusal(c).empty());
}

} // namespace rw_unit_control_exposure
