// A workaround for CAF 0.17.6's OpenSSL module (Debian's): one peer's failed TLS
// session closed every other TLS connection of the process.
//
// OpenSSL keeps one error queue per thread, and SSL_get_error() reports SSL_ERROR_SSL
// whenever that queue holds anything, whatever the call it is asked about did. CAF's
// `openssl::session` runs every session of the middleman on one thread and never
// clears the queue: a peer that leaves without close_notify (every rw-shell that
// exits: OpenSSL 3 queues "unexpected eof while reading"), a stranger whose handshake
// fails, a certificate that does not verify, each leaves an error there, and the next
// SSL_read of any other session that returns "want read" is taken for a fatal error:
// CAF closes that connection. Seen on the coordinator: every shell that exited made the
// nodes' links drop ("node left the cluster: ... vanished"), failing their jobs; a
// stranger sending garbage to the control port could do the same at will.
//
// librackweave defines the four calls CAF's session makes; the dynamic linker binds
// libcaf_openssl's references to these (librackweave comes before libssl in the lookup
// order), and each clears this thread's queue, then calls libssl's own (RTLD_NEXT), so
// SSL_get_error after it describes that call alone. Where another object already
// interposes them (loaded RTLD_GLOBAL before us), libssl's run unchanged.
// tests/integration/test_control_auth.cpp checks that members stay connected while
// shells come and go and strangers fail their handshakes.
//
// The same place logs what CAF does not: a peer whose TLS handshake with this side (as
// the server: a control port) failed, with OpenSSL's reason (once a minute per host and
// reason, logic/limited_log.hpp), so an operator sees who was refused and why.

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "logic/limited_log.hpp"

namespace {

template <class Fn>
Fn next_definition(const char* name) {
  auto* fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  if (fn == nullptr)
    std::abort(); // libssl is linked into librackweave: it is always there
  return fn;
}

// HOST:PORT of the peer on `ssl`'s socket ("an unknown peer" if it cannot be told).
std::string peer_of(SSL* ssl) {
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  int fd = SSL_get_fd(ssl);
  char host[INET6_ADDRSTRLEN] = {};
  if (fd < 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0)
    return "an unknown peer";
  if (peer.ss_family == AF_INET) {
    auto& a = reinterpret_cast<sockaddr_in&>(peer);
    inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
    return fmt::format("{}:{}", host, ntohs(a.sin_port));
  }
  if (peer.ss_family == AF_INET6) {
    auto& a = reinterpret_cast<sockaddr_in6&>(peer);
    inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof(host));
    return fmt::format("[{}]:{}", host, ntohs(a.sin6_port));
  }
  return "an unknown peer";
}

// After a call on a server-side session whose handshake has not finished: logs a
// failure (not a "want read/write", which only means "not yet").
void note_handshake(SSL* ssl, int rc) {
  if (rc > 0 || !SSL_is_server(ssl) || SSL_is_init_finished(ssl))
    return;
  auto code = SSL_get_error(ssl, rc); // looks at the queue, takes nothing from it
  if (code != SSL_ERROR_SSL && code != SSL_ERROR_SYSCALL)
    return;
  std::string why = "the peer closed the connection";
  if (auto e = ERR_peek_error(); e != 0) {
    char text[256];
    ERR_error_string_n(e, text, sizeof(text));
    why = text;
  }
  if (auto v = SSL_get_verify_result(ssl); v != X509_V_OK)
    why += fmt::format(" ({})", X509_verify_cert_error_string(v));
  auto peer = peer_of(ssl);
  rw::actors::detail::log_limited(
    spdlog::level::warn, peer, "TLS handshake failed " + why,
    fmt::format("control plane: TLS handshake failed: peer={}: {}: a peer without the "
                "cluster secret (or a certificate of the cluster's CA) is refused "
                "before any CAF message",
                peer, why));
}

} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  auto rc = real(ssl, buf, num);
  note_handshake(ssl, rc);
  return rc;
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  auto rc = real(ssl, buf, num);
  note_handshake(ssl, rc);
  return rc;
}

int SSL_accept(SSL* ssl) {
  static auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  auto rc = real(ssl);
  note_handshake(ssl, rc);
  return rc;
}

int SSL_connect(SSL* ssl) {
  static auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

} // extern "C"
