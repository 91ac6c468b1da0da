// Option parser for the CLI: `--name value`, `--flag`, `-o value`, and positional arguments,
// checked against what the command declares it accepts, so that no option is silently ignored.
#pragma once
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "uocr/core/error.hpp"

namespace uocr_cli {

// What one command accepts. Anything else on its command line is a usage error.
struct CommandOptions {
  std::string command;              // "run", "inspect model": names the command in errors
  std::vector<std::string> values;  // options followed by a value
  std::vector<std::string> flags;   // options without one
  bool inputs = false;              // whether it takes positional arguments
  std::map<std::string, std::string> refused;  // options users may expect here -> why they are not taken
};

// Edits (insertions, deletions, substitutions) that turn a into b.
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// `text`, all of it, as a T: an integer type in its range, or a finite float / double (decimal
// or exponent notation). Anything else throws Error(invalid_argument) naming `what` and the text.
template <class T>
T parse_number(const std::string& text, const std::string& what) {
  T out{};
  const char* end = text.data() + text.size();
  const std::from_chars_result r = std::from_chars(text.data(), end, out);
  bool ok = !text.empty() && r.ec == std::errc() && r.ptr == end;
  std::string wanted;
  if constexpr (std::is_floating_point_v<T>) {
    ok = ok && std::isfinite(out);
    wanted = "a number";
  } else {
    wanted = "an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
             std::to_string(std::numeric_limits<T>::max());
  }
  uocr::require(ok, uocr::Status::invalid_argument, [&] { return what + " needs " + wanted + ", got '" + text + "'"; });
  return out;
}

class Args {
 public:
  Args(const std::vector<std::string>& argv, CommandOptions accepted) : accepted_(std::move(accepted)) {
    for (size_t i = 0; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (a.size() < 2 || a[0] != '-') {
        uocr::require(accepted_.inputs, uocr::Status::invalid_argument,
                      [&] { return "uocr " + accepted_.command + " takes no argument '" + a + "'"; });
        positional_.push_back(a);
      } else if (is_flag(a)) {
        options_[a] = "1";
      } else {
        check_known(a);
        uocr::require(i + 1 < argv.size(), uocr::Status::invalid_argument,
                      [&] { return "option " + a + " needs a value"; });
        options_[a] = argv[++i];
        all_[a].push_back(options_[a]);
      }
    }
  }
  bool has(const std::string& name) const { return options_.count(declared(name)) != 0; }
  // Whether the command takes the option at all (commands that share settings read only theirs).
  bool accepts(const std::string& name) const { return is_value(name) || is_flag(name); }
  std::string get(const std::string& name, const std::string& fallback) const {
    auto it = options_.find(declared(name));
    return it == options_.end() ? fallback : it->second;
  }
  std::string required(const std::string& name) const {
    auto it = options_.find(declared(name));
    uocr::require(it != options_.end(), uocr::Status::invalid_argument,
                  [&] { return "missing required option " + name; });
    return it->second;
  }
  const std::vector<std::string>& positional() const { return positional_; }
  // Every value of an option given several times, in order (e.g. one --image per page).
  std::vector<std::string> all(const std::string& name) const {
    auto it = all_.find(declared(name));
    return it == all_.end() ? std::vector<std::string>{} : it->second;
  }
  // The option's value as a T (int, uint64_t, float, ...), `fallback` when it is not given; a
  // value that is not one is a usage error naming the option (parse_number).
  template <class T>
  T number(const std::string& name, T fallback) const {
    return has(name) ? parse_number<T>(get(name, ""), "option " + name) : fallback;
  }
  // The value of an option that takes one of a few words (`fallback` when absent); anything else
  // is a usage error listing them.
  std::string choice(const std::string& name, const std::vector<std::string>& words, const std::string& fallback) const {
    const std::string v = get(name, fallback);
    if (std::find(words.begin(), words.end(), v) != words.end()) return v;
    std::string list;
    for (size_t i = 0; i < words.size(); ++i) list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
    throw uocr::Error(uocr::Status::invalid_argument, name + " must be " + list + ", got '" + v + "'");
  }
  int integer(const std::string& name, int fallback) const { return number<int>(name, fallback); }
  float real(const std::string& name, float fallback) const { return number<float>(name, fallback); }

 private:
  bool is_flag(const std::string& a) const {
    return std::find(accepted_.flags.begin(), accepted_.flags.end(), a) != accepted_.flags.end();
  }
  bool is_value(const std::string& a) const {
    return std::find(accepted_.values.begin(), accepted_.values.end(), a) != accepted_.values.end();
  }

  // A usage error for an option the command does not accept: why (when declared), else the
  // closest accepted option when it is a likely typo.
  void check_known(const std::string& a) const {
    if (is_value(a)) return;
    const std::string refused = "uocr " + accepted_.command + " does not take option " + a;
    auto why = accepted_.refused.find(a);
    if (why != accepted_.refused.end()) throw uocr::Error(uocr::Status::invalid_argument, refused + ": " + why->second);
    std::string best;
    size_t best_distance = 3;  // at most 2 edits count as a typo
    for (const auto* names : {&accepted_.values, &accepted_.flags})
      for (const std::string& name : *names) {
        const size_t d = edit_distance(a, name);
        if (d < best_distance && d < name.size() / 2) best = name, best_distance = d;
      }
    throw uocr::Error(uocr::Status::invalid_argument,
                      refused + (best.empty() ? "" : " (did you mean " + best + "?)") + "; see uocr --help");
  }

  // A command reading an option it did not declare is a bug in the CLI, not a user error.
  const std::string& declared(const std::string& name) const {
    uocr::require(is_value(name) || is_flag(name), uocr::Status::internal,
                  [&] { return "uocr " + accepted_.command + " reads undeclared option " + name; });
    return name;
  }

  CommandOptions accepted_;
  std::map<std::string, std::string> options_;
  std::map<std::string, std::vector<std::string>> all_;
  std::vector<std::string> positional_;
};

}  // namespace uocr_cli
