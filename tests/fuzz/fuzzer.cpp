// The libFuzzer program of every target in targets.hpp: the name it runs under, fuzz_<target> (a
// link to it that run.sh makes), picks the target. One program compiles the parsers once.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "targets.hpp"

namespace {

using Target = int (*)(const uint8_t*, size_t);

struct NamedTarget {
  const char* name;
  Target run;
  // Run once on no input before fuzzing: its one-time set-up (the checkpoint to edit) then happens
  // outside the per-input timeout.
  bool set_up_first = false;
};

constexpr NamedTarget kTargets[] = {
    {"safetensors", uocr_fuzz::fuzz_safetensors},
    {"config", uocr_fuzz::fuzz_config},
    {"tokenizer_json", uocr_fuzz::fuzz_tokenizer_json},
    {"tokenizer_codec", uocr_fuzz::fuzz_tokenizer_codec},
    {"npy", uocr_fuzz::fuzz_npy},
    {"image", uocr_fuzz::fuzz_image},
    {"checkpoint", uocr_fuzz::fuzz_checkpoint, true},
    {"cli_args", uocr_fuzz::fuzz_cli_args},
    {"service_request", uocr_fuzz::fuzz_service_request},
};

const NamedTarget* target = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const std::string program = *argc > 0 ? (*argv)[0] : "";
  const std::string name = program.substr(program.find_last_of('/') + 1);
  for (const NamedTarget& t : kTargets)
    if (name == std::string("fuzz_") + t.name) target = &t;
  if (!target) {
    std::fprintf(stderr, "run this program as fuzz_<target> (a link to it); targets:");
    for (const NamedTarget& t : kTargets) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  return target->set_up_first ? target->run(nullptr, 0) : 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return target->run(data, size); }
