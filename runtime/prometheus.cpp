#include "runtime/prometheus.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace rw::runtime::prometheus {

namespace {

bool valid_name(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  });
}

std::string number(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{}", v);
}

} // namespace

std::string escape(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (quote && c == '"')
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

void writer::family(const std::string& name, kind k, const std::string& help) {
  if (!valid_name(name))
    throw std::invalid_argument("not a Prometheus metric name: " + name);
  if (std::find(seen_.begin(), seen_.end(), name) != seen_.end())
    throw std::invalid_argument("metric family written twice: " + name);
  seen_.push_back(name);
  name_ = name;
  kind_ = k;
  const char* type = k == kind::counter ? "counter"
                     : k == kind::gauge ? "gauge"
                                        : "histogram";
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape(help, false), name,
                      type);
}

void writer::line(const std::string& name, const labels& l, double value) {
  out_ += name;
  if (!l.empty()) {
    out_ += '{';
    for (size_t i = 0; i < l.size(); ++i) {
      if (!valid_name(l[i].first) || l[i].first.find(':') != std::string::npos)
        throw std::invalid_argument("not a Prometheus label name: " + l[i].first);
      out_ += fmt::format("{}{}=\"{}\"", i ? "," : "", l[i].first,
                          escape(l[i].second, true));
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += number(value);
  out_ += '\n';
}

void writer::sample(const labels& l, double value) {
  if (name_.empty() || kind_ == kind::histogram)
    throw std::logic_error(
      "prometheus::writer: a sample outside a counter or gauge family");
  line(name_, l, value);
}

void writer::histogram(const labels& l, const step_histogram& h) {
  if (kind_ != kind::histogram)
    throw std::logic_error("prometheus::writer: a histogram outside a histogram family");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.buckets.size(); ++i) {
    cumulative += h.buckets[i];
    auto with_le = l;
    with_le.emplace_back("le", i < step_histogram::bounds.size()
                                 ? fmt::format("{}", step_histogram::bounds[i])
                                 : std::string("+Inf"));
    line(name_ + "_bucket", with_le, static_cast<double>(cumulative));
  }
  line(name_ + "_sum", l, h.sum);
  line(name_ + "_count", l, static_cast<double>(h.count));
}

} // namespace rw::runtime::prometheus
