// The libFuzzer program of every target in targets.hpp: the name it runs under, fuzz_<target> (a
// link to it that run.sh makes), picks the target. One program compiles the parsers once.
//   uocr_fuzz --targets     lists the targets, one per line
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "targets.hpp"

namespace {

const uocr_fuzz::Target* target = nullptr;

// The arguments libFuzzer parses: the caller's, and the target's -max_len unless the caller gave one.
std::vector<char*> arguments;
std::string max_len_flag;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const std::string program = *argc > 0 ? (*argv)[0] : "";
  const std::string name = program.substr(program.find_last_of('/') + 1);
  if (*argc == 2 && std::string((*argv)[1]) == "--targets") {
    for (const uocr_fuzz::Target& t : uocr_fuzz::kTargets)
      if (t.run) std::printf("%s\n", t.name);
    std::exit(0);
  }
  for (const uocr_fuzz::Target& t : uocr_fuzz::kTargets)
    if (t.run && name == std::string("fuzz_") + t.name) target = &t;
  if (!target) {
    std::fprintf(stderr, "run this program as fuzz_<target> (a link to it); targets:");
    for (const uocr_fuzz::Target& t : uocr_fuzz::kTargets)
      if (t.run) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  arguments.assign(*argv, *argv + *argc);
  bool max_len_given = false;
  for (const char* a : arguments) max_len_given = max_len_given || std::string(a).rfind("-max_len=", 0) == 0;
  if (!max_len_given) {
    max_len_flag = "-max_len=" + std::to_string(target->max_len);
    arguments.push_back(max_len_flag.data());
  }
  arguments.push_back(nullptr);
  *argc = int(arguments.size() - 1);
  *argv = arguments.data();
  return target->set_up_first ? target->run(nullptr, 0) : 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return target->run(data, size); }
