#include <charconv>

#include "tools/qfuse/cli.hpp"

namespace qfuse::cli {

Args::Args(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs,
           std::size_t max_positional) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 1 && a[0] == '-') {
      std::string key = a, val;
      if (auto eq = a.find('='); eq != std::string::npos) {
        key = a.substr(0, eq);
        val = a.substr(eq + 1);
      }
      const OptionSpec* spec = nullptr;
      for (const OptionSpec& s : specs) {
        if (s.name == key) spec = &s;
      }
      if (spec == nullptr) throw UsageError("unknown option '" + key + "'");
      if (spec->takes_value && val.empty()) {
        if (i + 1 >= argv.size()) throw UsageError("option '" + key + "' needs a value");
        val = argv[++i];
      }
      options_[key] = val;
    } else {
      positional_.push_back(a);
    }
  }
  if (positional_.size() > max_positional) {
    throw UsageError("unexpected argument '" + positional_[max_positional] + "'");
  }
}

std::optional<std::string> Args::value(const std::string& name) const {
  auto it = options_.find(name);
  if (it == options_.end()) return std::nullopt;
  return it->second;
}

int Args::int_value(const std::string& name, int fallback) const {
  auto v = value(name);
  if (!v) return fallback;
  int result = 0;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), result);
  if (ec != std::errc() || ptr != v->data() + v->size() || result < 0) {
    throw UsageError("option '" + name + "' expects a non-negative integer (got '" + *v + "')");
  }
  return result;
}

double Args::double_value(const std::string& name, double fallback) const {
  auto v = value(name);
  if (!v) return fallback;
  try {
    std::size_t used = 0;
    const double d = std::stod(*v, &used);
    if (used != v->size() || d <= 0) throw std::invalid_argument("");
    return d;
  } catch (const std::exception&) {
    throw UsageError("option '" + name + "' expects a positive number (got '" + *v + "')");
  }
}

}  // namespace qfuse::cli
