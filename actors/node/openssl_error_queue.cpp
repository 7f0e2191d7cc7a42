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

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdlib>

namespace {

template <class Fn>
Fn next_definition(const char* name) {
  auto* fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  if (fn == nullptr)
    std::abort(); // libssl is linked into librackweave: it is always there
  return fn;
}

} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

int SSL_connect(SSL* ssl) {
  static auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

} // extern "C"
