#include "transports/fabric/registration.hpp"

#include <sys/resource.h>
#include <algorithm>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <fmt/format.h>

#include "rackweave/errc.hpp"

namespace rw::transports::fabric {

namespace {
constexpr uintptr_t page = 4096;
const auto* const last_address = reinterpret_cast<const std::byte*>(UINTPTR_MAX);

std::string memlock_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0)
    return "unknown";
  if (r.rlim_cur == RLIM_INFINITY)
    return "unlimited";
  return fmt::format("{} KiB", r.rlim_cur / 1024);
}
} // namespace

region::region(domain& d, const void* data, size_t bytes, uint64_t access)
  : begin_(static_cast<const std::byte*>(data)), bytes_(bytes),
    virt_addr_(d.mr_virt_addr()) {
  uint64_t requested = d.mr_prov_key() ? 0 : d.next_key();
  auto rc = fi_mr_reg(d.handle(), data, bytes, access, 0, requested, 0, &mr_, nullptr);
  if (rc != 0)
    throw rw::error(
      errc::io_error,
      fmt::format("fabric: registering {} bytes at {} with provider {} failed: "
                  "{}. The locked-memory limit (ulimit -l) is {}; registered "
                  "memory counts against it: raise it (ulimit -l unlimited, or "
                  "LimitMEMLOCK=infinity in a systemd unit) or lower "
                  "--fabric-slots",
                  bytes, data, d.provider_name(), fi_error_text(rc), memlock_limit()));
  desc_ = fi_mr_desc(mr_);
  key_ = fi_mr_key(mr_);
}

region::~region() {
  if (mr_)
    fi_close(&mr_->fid);
}

uint64_t region::remote_address(const void* p) const noexcept {
  auto at = static_cast<const std::byte*>(p);
  return virt_addr_ ? reinterpret_cast<uint64_t>(at) : static_cast<uint64_t>(at - begin_);
}

registration_cache::registration_cache(std::shared_ptr<domain> d, uint64_t access,
                                       size_t max_regions, uintptr_t span)
  : domain_(std::move(d)), access_(access), max_regions_(max_regions),
    span_(std::max<uintptr_t>(span, page)) {}

std::shared_ptr<region> registration_cache::get(const void* p, size_t n) {
  auto* b = static_cast<const std::byte*>(p);
  std::lock_guard<std::mutex> guard{mtx_};
  // Registrations may overlap (a span registered for memory beside a pinned arena can
  // start inside it, or where it starts): any one starting at most the longest
  // registration's length before b may hold it, not only the nearest.
  for (auto it = by_range_.upper_bound({b, last_address}); it != by_range_.begin();) {
    --it;
    if (it->second->contains(b, n))
      return it->second;
    if (static_cast<size_t>(b - it->first.first) >= longest_)
      break;
  }
  // A whole span around the buffer first (the tensor's next chunks fall in it); if
  // the provider will not register memory outside the buffer, its pages alone.
  auto span = [&](uintptr_t unit, const std::byte*& s) {
    auto start = reinterpret_cast<uintptr_t>(b) & ~(unit - 1);
    auto stop = (reinterpret_cast<uintptr_t>(b) + n + unit - 1) & ~(unit - 1);
    s = reinterpret_cast<const std::byte*>(start);
    return std::make_shared<region>(*domain_, s, stop - start, access_);
  };
  const std::byte* s = nullptr;
  std::shared_ptr<region> r;
  try {
    r = span(span_, s);
  } catch (const rw::error&) {
    if (span_ == page)
      throw;
    r = span(page, s); // throws what the provider said
  }
  // Overlapping registrations are fine for the provider; of two over the same range the
  // map keeps the newest.
  insert({s, r->end()}, r);
  trim();
  return r;
}

void registration_cache::insert(range key, std::shared_ptr<region> r) {
  ++made_;
  if (by_range_.count(key))
    age_.remove(key);
  by_range_[key] = std::move(r);
  age_.push_back(key);
  longest_ = std::max(longest_, static_cast<size_t>(key.second - key.first));
}

std::shared_ptr<void> registration_cache::pin(const void* p, size_t n) {
  auto* b = static_cast<const std::byte*>(p);
  auto* s = reinterpret_cast<const std::byte*>(reinterpret_cast<uintptr_t>(b)
                                               & ~(page - 1));
  auto* e = reinterpret_cast<const std::byte*>(
    (reinterpret_cast<uintptr_t>(b) + n + page - 1) & ~(page - 1));
  auto r = std::make_shared<region>(*domain_, s, static_cast<size_t>(e - s), access_);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    // Unused registrations over these addresses may be of memory freed since.
    for (auto it = by_range_.begin(); it != by_range_.end();) {
      auto& old = it->second;
      if (old->begin() < e && s < old->end() && old.use_count() == 1) {
        age_.remove(it->first);
        it = by_range_.erase(it);
      } else {
        ++it;
      }
    }
    insert({s, e}, r);
  }
  std::weak_ptr<registration_cache> cache = shared_from_this();
  range key{s, e};
  return std::shared_ptr<void>(r.get(), [cache, key, r](void*) mutable {
    if (auto c = cache.lock())
      c->forget(key, r.get());
    r.reset(); // deregistered once no send in flight holds it
  });
}

void registration_cache::forget(range key, const region* r) noexcept {
  std::lock_guard<std::mutex> guard{mtx_};
  auto it = by_range_.find(key);
  if (it != by_range_.end() && it->second.get() == r) {
    by_range_.erase(it);
    age_.remove(key);
  }
}

void registration_cache::trim() {
  for (auto it = age_.begin(); by_range_.size() > max_regions_ && it != age_.end();) {
    auto found = by_range_.find(*it);
    if (found != by_range_.end() && found->second.use_count() == 1) {
      by_range_.erase(found);
      it = age_.erase(it);
    } else {
      ++it;
    }
  }
}

} // namespace rw::transports::fabric
