// Refusing an output that is one of the run's own inputs: `-o page.png page.png` would empty the
// page before it is read, `--checkpoint page.png` would replace it and then delete it. Files are
// compared by device and inode, so that every spelling of a path (./page.png, dir/../page.png, a
// symlink, a hard link) is caught.
#pragma once
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "uocr/core/error.hpp"

namespace uocr_cli {

// Throws invalid_argument, naming both, when a path of `outputs` (option, path; "" = none) is the
// same file as an input or as a file of the model folder. Outputs that do not exist yet are
// nobody's input.
inline void refuse_outputs_over_inputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                                       const std::vector<std::string>& inputs, const std::string& model) {
  // Two outputs on one path (which may not exist yet) would overwrite each other.
  for (size_t a = 0; a < outputs.size(); ++a)
    for (size_t b = a + 1; b < outputs.size(); ++b) {
      if (outputs[a].second.empty() || outputs[b].second.empty()) continue;
      std::error_code ea, eb;
      const auto pa = std::filesystem::weakly_canonical(outputs[a].second, ea);
      const auto pb = std::filesystem::weakly_canonical(outputs[b].second, eb);
      uocr::require(ea || eb || pa != pb, uocr::Status::invalid_argument, [&] {
        return outputs[a].first + " " + outputs[a].second + " and " + outputs[b].first + " " + outputs[b].second +
               " are the same file";
      });
    }
  std::vector<std::pair<std::string, struct stat>> existing;
  for (const auto& [option, path] : outputs) {
    struct stat st {};
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) existing.emplace_back(option + " " + path, st);
  }
  if (existing.empty()) return;
  const auto refuse_if_written = [&](const std::string& what, const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return;
    // &output = output: lambdas capture structured bindings only from C++20 (clang refuses it in C++17).
    for (const auto& [output, out] : existing)
      uocr::require(out.st_dev != st.st_dev || out.st_ino != st.st_ino, uocr::Status::invalid_argument,
                    [&, &output = output] { return output + " and " + what + " " + path + " are the same file"; });
  };
  for (const std::string& in : inputs) refuse_if_written("the input", in);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(model, ec), end; !ec && it != end; it.increment(ec))
    refuse_if_written("the model file", it->path().string());
}

}  // namespace uocr_cli
