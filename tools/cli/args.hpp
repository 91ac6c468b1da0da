// Minimal option parser for the CLI: `--name value`, `-o value`, and positional arguments.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"

namespace uocr_cli {

class Args {
 public:
  explicit Args(const std::vector<std::string>& argv) {
    for (size_t i = 0; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (a == "--quiet" || a == "--resume" || a == "--separate-pages") {  // the options without a value
        options_[a] = "1";
      } else if (a.size() > 1 && a[0] == '-') {
        uocr::require(i + 1 < argv.size(), uocr::Status::invalid_argument,
                      [&] { return "option " + a + " needs a value"; });
        options_[a] = argv[++i];
        all_[a].push_back(options_[a]);
      } else {
        positional_.push_back(a);
      }
    }
  }
  bool has(const std::string& name) const { return options_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback) const {
    auto it = options_.find(name);
    return it == options_.end() ? fallback : it->second;
  }
  std::string required(const std::string& name) const {
    auto it = options_.find(name);
    uocr::require(it != options_.end(), uocr::Status::invalid_argument,
                  [&] { return "missing required option " + name; });
    return it->second;
  }
  const std::vector<std::string>& positional() const { return positional_; }
  // Every value of an option given several times, in order (e.g. one --image per page).
  std::vector<std::string> all(const std::string& name) const {
    auto it = all_.find(name);
    return it == all_.end() ? std::vector<std::string>{} : it->second;
  }
  int integer(const std::string& name, int fallback) const {
    if (!has(name)) return fallback;
    const std::string v = get(name, "");
    size_t used = 0;
    int out = 0;
    try {
      out = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    uocr::require(used == v.size() && !v.empty(), uocr::Status::invalid_argument,
                  [&] { return "option " + name + " needs an integer, got '" + v + "'"; });
    return out;
  }

 private:
  std::map<std::string, std::string> options_;
  std::map<std::string, std::vector<std::string>> all_;
  std::vector<std::string> positional_;
};

}  // namespace uocr_cli
