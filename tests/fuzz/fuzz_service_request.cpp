#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return uocr_fuzz::fuzz_service_request(data, size); }
