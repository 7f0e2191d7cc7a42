#include "actors/node/control_tls.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "runtime/control_certs.hpp"

namespace rw::actors {

namespace {

// The newest OpenSSL error on this thread, as text ("" if none), and the queue cleared.
std::string openssl_error() {
  std::string out;
  while (auto code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    out = text;
  }
  return out.empty() ? "" : " (" + out + ")";
}

[[noreturn]] void refuse(const std::string& why) {
  throw std::runtime_error("TLS: " + why);
}

// A sealed memory file holding `text` (nothing on disk; gone with the process), open
// for as long as the process runs: CAF reads it as /proc/self/fd/N at each connection.
int memory_file(const char* name, const std::string& text) {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    refuse(fmt::format("cannot make a memory file for the derived certificates: {}",
                       std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ::close(fd);
      refuse(
        fmt::format("cannot write the derived certificates: {}", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  return fd;
}

std::string fd_path(int fd) {
  return "/proc/self/fd/" + std::to_string(fd);
}

// The derived identity of this process: made once per distinct identity (a Python
// process asks for one per call) and kept, with its memory files, until it exits.
struct derived_state {
  std::mutex mtx;
  std::string key;                   // what it was derived from
  std::string cert, private_key, ca; // /proc/self/fd paths
};

derived_state& derived() {
  static auto* state = new derived_state; // never destroyed: CAF may read at exit
  return *state;
}

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0)
    return "localhost";
  return name;
}

void check_readable(const std::string& what, const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode))
    refuse(fmt::format("the {} file {} does not exist or is not a file", what, path));
  if (auto* f = std::fopen(path.c_str(), "r"); f != nullptr)
    std::fclose(f);
  else
    refuse(fmt::format("the {} file {} cannot be read", what, path));
}

} // namespace

void check_tls_files(const tls_files& files) {
  if (!files.any())
    return;
  std::vector<std::string> missing;
  if (files.cert.empty())
    missing.emplace_back("--tls-cert");
  if (files.key.empty())
    missing.emplace_back("--tls-key");
  if (files.ca.empty())
    missing.emplace_back("--tls-ca");
  if (!missing.empty())
    refuse(fmt::format("the control plane's TLS needs a certificate, its key and the CA "
                       "that signed every member's certificate; missing: {}",
                       fmt::join(missing, ", ")));
  check_readable("certificate", files.cert);
  check_readable("private key", files.key);
  check_readable("CA certificate", files.ca);
  struct stat info {};
  if (::stat(files.key.c_str(), &info) == 0 && (info.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    refuse(fmt::format("the private key {} is open to other users (mode {:04o}): a key "
                       "others can read is no key; chmod 600 {}",
                       files.key, info.st_mode & 07777, files.key));

  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx{SSL_CTX_new(TLS_method()),
                                                        &SSL_CTX_free};
  if (!ctx)
    refuse("OpenSSL cannot make a context" + openssl_error());
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), files.cert.c_str()) != 1)
    refuse(fmt::format("{} holds no PEM certificate{}", files.cert, openssl_error()));
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{nullptr, &EVP_PKEY_free};
  if (auto* in = std::fopen(files.key.c_str(), "r"); in != nullptr) {
    // No passphrase callback: an encrypted key is refused, not prompted for.
    key.reset(PEM_read_PrivateKey(
      in, nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
    std::fclose(in);
  }
  if (!key)
    refuse(fmt::format("{} holds no unencrypted PEM private key{}", files.key,
                       openssl_error()));
  if (X509_check_private_key(SSL_CTX_get0_certificate(ctx.get()), key.get()) != 1)
    refuse(fmt::format("the key {} is not the certificate {}'s{}", files.key, files.cert,
                       openssl_error()));
  if (SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1)
    refuse(fmt::format("OpenSSL does not take the key {}{}", files.key, openssl_error()));
  if (SSL_CTX_load_verify_locations(ctx.get(), files.ca.c_str(), nullptr) != 1)
    refuse(fmt::format("{} holds no PEM CA certificate{}", files.ca, openssl_error()));
  // Our own certificate must chain to the CA: peers check it against the same CA.
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> check{
    X509_STORE_CTX_new(), &X509_STORE_CTX_free};
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx.get(), &chain);
  if (!check
      || X509_STORE_CTX_init(check.get(), SSL_CTX_get_cert_store(ctx.get()),
                             SSL_CTX_get0_certificate(ctx.get()), chain)
           != 1)
    refuse("OpenSSL cannot check the certificate" + openssl_error());
  if (X509_verify_cert(check.get()) != 1)
    refuse(fmt::format(
      "the certificate {} is not signed by the CA {}: {}", files.cert, files.ca,
      X509_verify_cert_error_string(X509_STORE_CTX_get_error(check.get()))));
}

void configure_control_tls(caf::actor_system_config& cfg, const tls_files& files) {
  check_tls_files(files);
  if (!files.any())
    return;
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = files.cert;
  cfg.openssl_key = files.key;
  cfg.openssl_cafile = files.ca;
}

void configure_control_tls(caf::actor_system_config& cfg, const control_identity& id) {
  if (id.files.any()) {
    configure_control_tls(cfg, id.files);
    return;
  }
  if (id.cluster_secret.empty())
    return; // plain TCP: no secret to derive from
  auto& st = derived();
  std::lock_guard<std::mutex> guard{st.mtx};
  if (st.cert.empty() || st.key != id.cluster_secret) {
    auto subject = fmt::format("rackweave member {}:{}", this_host(), ::getpid());
    auto me = runtime::derived_identity(id.cluster_secret, runtime::cluster_scope,
                                        subject);
    st.cert = fd_path(memory_file("rw-control-cert", me.cert));
    st.private_key = fd_path(memory_file("rw-control-key", me.key));
    OPENSSL_cleanse(me.key.data(), me.key.size());
    st.ca = fd_path(memory_file("rw-control-ca", me.ca));
    st.key = id.cluster_secret;
  }
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = st.cert;
  cfg.openssl_key = st.private_key;
  cfg.openssl_cafile = st.ca;
}

bool derived_control_tls(caf::actor_system& sys) {
  if (!control_tls(sys))
    return false;
  auto& st = derived();
  std::lock_guard<std::mutex> guard{st.mtx};
  return !st.cert.empty() && sys.config().openssl_certificate == st.cert;
}

bool control_tls(caf::actor_system& sys) {
  return sys.has_openssl_manager() && sys.openssl_manager().authentication_enabled();
}

caf::io::middleman_actor control_middleman(caf::actor_system& sys) {
  return control_tls(sys) ? sys.openssl_manager().actor_handle()
                          : sys.middleman().actor_handle();
}

std::string tls_hint(caf::actor_system& sys) {
  if (derived_control_tls(sys))
    return "this process speaks TLS with a certificate derived from its secret: the "
           "coordinator must have the same --cluster-secret-file (and the tenant in its "
           "--tenants-file), and no --tls-* files";
  return control_tls(sys)
           ? "this process speaks TLS (--tls-*): the coordinator must too, with a "
             "certificate from the same CA"
           : "this process speaks plain TCP: if the cluster has a secret, give "
             "--cluster-secret-file; if it uses TLS files, give --tls-cert, --tls-key "
             "and "
             "--tls-ca";
}

} // namespace rw::actors
