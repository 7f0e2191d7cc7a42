#include "runtime/tenants.hpp"

#include <filesystem>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "runtime/credentials.hpp"

namespace rw::runtime {

std::string tenant_name_error(const std::string& name) {
  if (name.empty() || name.size() > 32)
    return "a tenant's name has 1 to 32 characters";
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return fmt::format("a tenant's name has only lower-case letters, digits, '-' and "
                         "'_' ('{}' has '{}')",
                         name, c);
  return {};
}

std::string tenant_of(const std::string& job) {
  auto at = job.find(tenant_separator);
  return at == std::string::npos ? std::string{} : job.substr(0, at);
}

namespace {

// A quota: a whole number from 1 up to `max`, or nothing when the key is absent.
template <class T>
std::optional<T> quota(const toml::table& t, const std::string& key, uint64_t max,
                       const std::string& where) {
  auto* n = t.get(key);
  if (n == nullptr)
    return std::nullopt;
  // Integers only: toml++'s value<int64_t>() casts a float without a range check.
  auto* i = n->as_integer();
  std::optional<int64_t> v;
  if (i != nullptr)
    v = i->get();
  if (!v || *v < 1 || static_cast<uint64_t>(*v) > max)
    throw std::runtime_error(
      fmt::format("{}: '{}' must be a whole number from 1 to {} (leave "
                  "it out for no limit)",
                  where, key, max));
  return static_cast<T>(*v);
}

} // namespace

tenant_registry load_tenants(const std::string& path, const std::string& cluster_secret) {
  toml::table file;
  try {
    file = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("tenants file {}:{}:{}: {}", path,
                                         e.source().begin.line, e.source().begin.column,
                                         e.description()));
  }
  auto dir = std::filesystem::path(path).parent_path();
  tenant_registry out;
  std::map<std::string, std::string> holder; // secret -> tenant
  for (auto& [key, node] : file) {
    std::string name{key.str()};
    auto where = fmt::format("tenants file {}: tenant '{}'", path, name);
    if (auto why = tenant_name_error(name); !why.empty())
      throw std::runtime_error(fmt::format("{}: {}", where, why));
    auto* t = node.as_table();
    if (t == nullptr)
      throw std::runtime_error(fmt::format(
        "{}: must be a table ([{}] with secret_file and quotas)", where, name));
    static const std::set<std::string> known{"secret_file", "max_jobs", "max_workers",
                                             "max_memory_mib"};
    for (auto& [k, v] : *t)
      if (known.count(std::string{k.str()}) == 0)
        throw std::runtime_error(fmt::format("{}: unknown key '{}' (known: secret_file, "
                                             "max_jobs, max_workers, max_memory_mib)",
                                             where, k.str()));
    auto file_key = (*t)["secret_file"].value<std::string>();
    if (!file_key || file_key->empty())
      throw std::runtime_error(fmt::format("{}: needs secret_file (the tenant's secret, "
                                           "16+ characters, chmod 600)",
                                           where));
    std::filesystem::path secret_path{*file_key};
    if (secret_path.is_relative())
      secret_path = dir / secret_path;
    tenant x;
    x.name = name;
    try {
      x.secret = read_secret_file(secret_path.string(),
                                  fmt::format("tenant '{}' secret", name));
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("{}: {}", where, e.what()));
    }
    if (!cluster_secret.empty() && x.secret == cluster_secret)
      throw std::runtime_error(fmt::format("{}: its secret is the cluster secret, which "
                                           "controls every job: give it its own",
                                           where));
    if (auto [it, fresh] = holder.emplace(x.secret, name); !fresh)
      throw std::runtime_error(
        fmt::format("{}: its secret is tenant '{}''s too: give each "
                    "tenant its own",
                    where, it->second));
    x.max_jobs = quota<uint32_t>(*t, "max_jobs", UINT32_MAX, where);
    x.max_workers = quota<uint32_t>(*t, "max_workers", UINT32_MAX, where);
    if (auto mib = quota<uint64_t>(*t, "max_memory_mib", uint64_t{1} << 40, where))
      x.max_memory_bytes = *mib << 20;
    out.emplace(name, std::move(x));
  }
  return out;
}

} // namespace rw::runtime
