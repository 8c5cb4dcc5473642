// env_config as plain C++: a bag of named values that each environment reads
// with typed, range-checked getters, then `finish()` rejects any key nobody
// read. No Python here: the binding converts a dict into Params.
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace sim_ext {

using ParamValue = std::variant<bool, int64_t, double, std::string>;

class Params {
 public:
  Params() = default;
  explicit Params(std::map<std::string, ParamValue> values) : values_(std::move(values)) {}

  int64_t get_int(const std::string& key, int64_t dflt, int64_t lo, int64_t hi) {
    known_.insert(key);
    auto it = values_.find(key);
    if (it == values_.end()) return dflt;
    int64_t v;
    if (auto p = std::get_if<int64_t>(&it->second)) {
      v = *p;
    } else if (auto d = std::get_if<double>(&it->second); d && std::isfinite(*d) && *d == std::floor(*d) &&
                                                             std::fabs(*d) < 9.0e15) {
      v = static_cast<int64_t>(*d);
    } else {
      fail(key, describe(it->second), "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    if (v < lo || v > hi)
      fail(key, std::to_string(v), "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }

  double get_double(const std::string& key, double dflt, double lo, double hi, bool hi_open = false) {
    known_.insert(key);
    auto it = values_.find(key);
    if (it == values_.end()) return dflt;
    double v;
    if (auto p = std::get_if<double>(&it->second)) {
      v = *p;
    } else if (auto i = std::get_if<int64_t>(&it->second)) {
      v = static_cast<double>(*i);
    } else {
      fail(key, describe(it->second), range_text(lo, hi, hi_open));
    }
    if (!std::isfinite(v) || v < lo || v > hi || (hi_open && v == hi)) fail(key, num(v), range_text(lo, hi, hi_open));
    return v;
  }

  std::string get_choice(const std::string& key, const std::string& dflt, const std::vector<std::string>& allowed) {
    known_.insert(key);
    auto it = values_.find(key);
    if (it == values_.end()) return dflt;
    std::string expected = "one of";
    for (const auto& a : allowed) expected += " '" + a + "'";
    auto p = std::get_if<std::string>(&it->second);
    if (!p) fail(key, describe(it->second), expected);
    for (const auto& a : allowed)
      if (*p == a) return *p;
    fail(key, quote(*p), expected);
  }

  // Whether the key was given (None values never reach Params: they mean "default").
  bool has(const std::string& key) const { return values_.count(key) != 0; }

  // Call after reading every option: unknown keys are one error naming all of them and
  // the valid ones (a file with two typos hears of both at once).
  void finish(const std::string& env_name) const {
    std::ostringstream unknown;
    int count = 0;
    for (const auto& kv : values_) {
      if (known_.count(kv.first)) continue;
      unknown << (count++ ? ", " : "") << quote(kv.first) << " (= " << describe(kv.second) << ")";
    }
    if (count == 0) return;
    std::ostringstream os;
    os << env_name << ": unknown env_config key" << (count > 1 ? "s " : " ") << unknown.str()
       << "; valid keys:";
    for (const auto& k : known_) os << " '" << k << "'";
    throw std::invalid_argument(os.str());
  }

 private:
  [[noreturn]] static void fail(const std::string& key, const std::string& got, const std::string& expected) {
    throw std::invalid_argument("env_config " + quote(key) + ": got " + got + ", expected " + expected);
  }
  static std::string num(double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  }
  static std::string range_text(double lo, double hi, bool hi_open) {
    return "a finite number in [" + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
  }
  static std::string describe(const ParamValue& v) {
    if (auto b = std::get_if<bool>(&v)) return *b ? "True (bool)" : "False (bool)";
    if (auto i = std::get_if<int64_t>(&v)) return std::to_string(*i);
    if (auto d = std::get_if<double>(&v)) return num(*d);
    return quote(std::get<std::string>(v)) + " (str)";
  }

 public:
  // Quoted the way Python's repr() quotes ASCII text, so messages read as
  // Python and a NUL cannot cut them short.
  static std::string quote(const std::string& text) {
    static const char* hex = "0123456789abcdef";
    const bool dq = text.find('\'') != std::string::npos && text.find('"') == std::string::npos;
    const char q = dq ? '"' : '\'';
    std::string out(1, q);
    for (unsigned char ch : text) {
      if (ch == '\\' || ch == q) {
        out += '\\';
        out += static_cast<char>(ch);
      } else if (ch == '\n') {
        out += "\\n";
      } else if (ch == '\t') {
        out += "\\t";
      } else if (ch == '\r') {
        out += "\\r";
      } else if (ch < 0x20 || ch == 0x7f) {
        out += "\\x";
        out += hex[ch >> 4];
        out += hex[ch & 15];
      } else {
        out += static_cast<char>(ch);
      }
    }
    return out + q;
  }

 private:

  std::map<std::string, ParamValue> values_;
  std::set<std::string> known_;
};

}  // namespace sim_ext
