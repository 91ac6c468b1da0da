// A program built the way a user of an installed uocr builds one: only the installed headers and
// libraries, no source tree. With UOCR_HAVE_VULKAN it links libuocr_vulkan.a and opens the Vulkan
// backend through its public face; it prints what it registered and what it opened.
#include <cstdio>
#include <string>

#include "uocr/uocr.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer MODEL_DIR\n");
    return 2;
  }
  try {
    std::printf("backends: %s\n", uocr::compiled_backends().c_str());
    const auto model = uocr::Model::load(argv[1]);
#if UOCR_HAVE_VULKAN
    const uocr::Backend backend = uocr::Backend::vulkan;
#else
    const uocr::Backend backend = uocr::Backend::cpu;
#endif
    const auto engine = uocr::open_engine(model, backend);
    std::printf("opened: %s\n", uocr::backend_name(engine->backend()));
    return 0;
  } catch (const uocr::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
