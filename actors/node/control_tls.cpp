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
int memory_file(const char* name, const std::string& text, bool seal = true) {
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
  if (seal)
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
  std::string cluster_ca;            // PEM, for located answers
  int tenant_ca_fd = -1;             // a tenant's slot for the located CA
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
  bool tenant = !id.tenant.empty();
  if (id.cluster_secret.empty() && (!tenant || id.tenant_secret.empty()))
    return; // plain TCP: no secret to derive from
  auto& st = derived();
  std::lock_guard<std::mutex> guard{st.mtx};
  std::string key = id.cluster_secret + '\0' + id.tenant + '\0' + id.tenant_secret;
  for (auto& [name, secret] : id.admitted_tenants)
    key += '\0' + name + '\0' + secret;
  if (st.cert.empty() || st.key != key) {
    auto subject = fmt::format("rackweave {} {}:{}",
                               tenant ? "tenant " + id.tenant : std::string{"member"},
                               this_host(), ::getpid());
    auto me = tenant ? runtime::derived_identity(
                id.tenant_secret, runtime::tenant_scope(id.tenant), subject)
                     : runtime::derived_identity(id.cluster_secret,
                                                 runtime::cluster_scope, subject);
    // A member trusts the cluster CA, and the coordinator each tenant's; a tenant's
    // shell trusts what the located answer says the cluster CA is (trust_located_ca).
    std::string trusted;
    if (!tenant) {
      trusted = me.ca;
      for (auto& [name, secret] : id.admitted_tenants)
        trusted += runtime::derived_ca_cert(secret, runtime::tenant_scope(name));
    }
    st.cert = fd_path(memory_file("rw-control-cert", me.cert));
    st.private_key = fd_path(memory_file("rw-control-key", me.key));
    OPENSSL_cleanse(me.key.data(), me.key.size());
    int ca_fd = memory_file("rw-control-ca", trusted, !tenant);
    st.ca = fd_path(ca_fd);
    st.tenant_ca_fd = tenant ? ca_fd : -1;
    st.cluster_ca = tenant ? std::string{} : me.ca;
    st.key = std::move(key);
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

std::string derived_cluster_ca() {
  auto& st = derived();
  std::lock_guard<std::mutex> guard{st.mtx};
  return st.cluster_ca;
}

std::string trust_located_ca(const std::string& pem) {
  auto& st = derived();
  std::lock_guard<std::mutex> guard{st.mtx};
  if (st.tenant_ca_fd < 0)
    return {};
  if (pem.empty())
    return "the node that was asked sent no control-plane CA certificate (the cluster "
           "runs without a secret, or with --tls-* files: give the shell --tls-cert, "
           "--tls-key and --tls-ca)";
  if (runtime::common_name(pem).empty())
    return "the control-plane CA certificate in the located answer is not a PEM "
           "certificate";
  // The same descriptor number, new contents: CAF reads the file anew per connection.
  int fd = memory_file("rw-control-ca", pem);
  if (::dup3(fd, st.tenant_ca_fd, O_CLOEXEC) < 0) {
    ::close(fd);
    return fmt::format("cannot keep the located CA certificate: {}",
                       std::strerror(errno));
  }
  ::close(fd);
  return {};
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
