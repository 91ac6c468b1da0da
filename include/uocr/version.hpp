// The library's version and the namespace that carries it.
//
// Everything of uocr lives in an inline namespace inside `uocr` (uocr::v0_1 today; callers
// write uocr::Model as always). Its name holds the library version and every build setting
// that changes what an inline function of these headers does, so that translation units built
// against two versions, or with two settings, link as different symbols instead of one silently
// taking the other's code (an ODR violation):
//   UOCR_HAVE_LIBJPEG   JPEG decoded by libjpeg(-turbo) instead of stb_image (uocr/image/image.hpp)
// The backends a build contains are not among them: each registers itself when its public header
// is included (uocr/engine/registry.hpp), so no inline body depends on UOCR_HAVE_VULKAN/CUDA.
// CPU kernels follow the compiler's target flags (-march): build every translation unit that
// includes uocr with the same ones.
#pragma once

#define UOCR_VERSION_MAJOR 0
#define UOCR_VERSION_MINOR 1
#define UOCR_VERSION_PATCH 0
#define UOCR_VERSION_NUMBER (UOCR_VERSION_MAJOR * 10000 + UOCR_VERSION_MINOR * 100 + UOCR_VERSION_PATCH)
#define UOCR_VERSION_STRING "0.1.0"

#ifdef UOCR_HAVE_LIBJPEG
#define UOCR_ABI_NAMESPACE v0_1_jpeg
#else
#define UOCR_ABI_NAMESPACE v0_1
#endif

// Opens and closes namespace uocr with its inline ABI namespace; nested namespaces go inside:
//   UOCR_NAMESPACE_BEGIN
//   namespace cuda { ... }
//   UOCR_NAMESPACE_END
#define UOCR_NAMESPACE_BEGIN \
  namespace uocr {           \
  inline namespace UOCR_ABI_NAMESPACE {
#define UOCR_NAMESPACE_END \
  }                        \
  }

#define UOCR_STRINGIZE_(x) #x
#define UOCR_STRINGIZE(x) UOCR_STRINGIZE_(x)

UOCR_NAMESPACE_BEGIN
// The version of the headers this translation unit was compiled with, and its ABI namespace.
inline constexpr int version_major = UOCR_VERSION_MAJOR;
inline constexpr int version_minor = UOCR_VERSION_MINOR;
inline constexpr int version_patch = UOCR_VERSION_PATCH;
inline constexpr const char* version_string = UOCR_VERSION_STRING;
inline constexpr const char* abi_namespace = UOCR_STRINGIZE(UOCR_ABI_NAMESPACE);
UOCR_NAMESPACE_END
