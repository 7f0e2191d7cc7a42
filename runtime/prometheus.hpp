#pragma once
// The Prometheus text exposition format (version 0.0.4), written: families with their
// HELP and TYPE lines, samples with escaped label values, histograms as _bucket (with
// cumulative counts and le="+Inf"), _sum and _count. rw-node's /metrics uses it.

#include <string>
#include <utility>
#include <vector>

#include "runtime/step_histogram.hpp"

namespace rw::runtime::prometheus {

using labels = std::vector<std::pair<std::string, std::string>>;

enum class kind { counter, gauge, histogram };

class writer {
public:
  /// Starts the family `name` (each name once; a counter's name ends in _total).
  /// Throws std::invalid_argument for a name Prometheus does not accept.
  void family(const std::string& name, kind k, const std::string& help);

  /// A sample of the current counter or gauge family.
  void sample(const labels& l, double value);

  /// A histogram's samples for the current histogram family.
  void histogram(const labels& l, const step_histogram& h);

  const std::string& text() const noexcept { return out_; }

private:
  void line(const std::string& name, const labels& l, double value);

  std::string out_;
  std::string name_;
  kind kind_ = kind::gauge;
  std::vector<std::string> seen_;
};

/// A label value or HELP text escaped as the format asks (\\, \" in labels, \n).
std::string escape(const std::string& s, bool quote);

/// The content type of the format.
inline constexpr const char* content_type = "text/plain; version=0.0.4; charset=utf-8";

} // namespace rw::runtime::prometheus
