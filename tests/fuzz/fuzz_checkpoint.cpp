#include "targets.hpp"

// The checkpoint to edit is made (by resuming it once) before fuzzing, outside the per-input timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) { return uocr_fuzz::fuzz_checkpoint(nullptr, 0); }
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return uocr_fuzz::fuzz_checkpoint(data, size); }
