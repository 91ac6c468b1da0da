// uocr's C++ API in one include: a model, sessions over page sources, the tokenizer, images,
// and every backend this build has (the engine registry opens them by name).
//
//   #include "uocr/uocr.hpp"
//   auto model = uocr::Model::load("models/uocr-demo");
//   uocr::FilePages pages({"page1.png", "page2.png"});
//   uocr::Session session(model, uocr::SessionParams{}, {});
//   uocr::RunSummary summary = session.run(pages, [](const uocr::Event& e) { return true; });
//
// Sessions that should share a device's copy of the weights (and, with batching, their decode
// steps) are opened on one engine:
//
//   auto engine = uocr::open_engine(model, uocr::Backend::cpu);
//   uocr::Session a(engine), b(engine);
//
// The finer headers below stay available for a program that wants less. Backends beyond the CPU:
// build with the 'uocr-vulkan' / 'uocr-cuda' meson dependencies (they define UOCR_HAVE_VULKAN /
// UOCR_HAVE_CUDA and link the backend's library), or link libuocr_vulkan / libuocr_cuda and include
// uocr/backends/vulkan.hpp / cuda.hpp yourself.
#pragma once

#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/image/image.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/one_shot.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/params.hpp"
#include "uocr/session/session.hpp"
#include "uocr/tokenizer/tokenizer.hpp"
#include "uocr/version.hpp"
