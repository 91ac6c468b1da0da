// A translation unit built as a program's other part might be, with JPEG left to stb_image
// (UOCR_HAVE_LIBJPEG unset), linked into the CPU tests' program next to units built with libjpeg.
#undef UOCR_HAVE_LIBJPEG
#include <string>

#include "uocr/image/image.hpp"
#include "uocr/version.hpp"

namespace uocr_test {

std::string abi_namespace_without_libjpeg() { return uocr::abi_namespace; }
uocr::ImageU8 load_image_without_libjpeg(const std::string& path) { return uocr::load_image(path); }

}  // namespace uocr_test
