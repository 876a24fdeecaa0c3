// Attrs: the named attributes of an op (transpose_a, axis, lr, ...). An ordered
// map so that iteration, and so the compiled plan, is deterministic. A value.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace rill {

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}

  void set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }

  // Typed reads with a default. An int attr read as float converts; anything
  // else of the wrong type yields the default (infer functions check types
  // with `check_*` below to report errors).
  int64_t get_int(const std::string& name, int64_t fallback = 0) const;
  double get_float(const std::string& name, double fallback = 0.0) const;
  std::string get_string(const std::string& name, const std::string& fallback = "") const;
  std::vector<int64_t> get_ints(const std::string& name, std::vector<int64_t> fallback = {}) const;

  const std::map<std::string, AttrValue>& values() const { return values_; }
  bool operator==(const Attrs&) const = default;

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace rill
