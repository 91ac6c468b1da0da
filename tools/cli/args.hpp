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
      if (a.size() > 1 && a[0] == '-') {
        uocr::require(i + 1 < argv.size(), uocr::Status::invalid_argument,
                      [&] { return "option " + a + " needs a value"; });
        options_[a] = argv[++i];
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

 private:
  std::map<std::string, std::string> options_;
  std::vector<std::string> positional_;
};

}  // namespace uocr_cli
