// The C++ API's transcript, the reference every binding must reproduce byte for byte:
//   uocr_ref_ocr [-n MAX_NEW_TOKENS] [--pages-per-group G] [--page-fallback-tokens N] [-o OUT]
//                MODEL_DIR IMAGE...
// writes the transcript and a newline (to OUT, else stdout). The pages are decoded as the page
// groups need them (uocr::Session over uocr::FilePages; G defaults to 4, the overlap is
// G - 1 as in the C ABI). When MODEL_DIR does not exist it writes "UOCR-SKIP: ..." instead and
// exits 0, so the binding tests can skip rather than fail.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "uocr/session/session.hpp"
#include "uocr/session/page_source.hpp"

int main(int argc, char** argv) {
  uocr::SessionParams params;
  uocr::DocumentParams groups;
  std::string out_path;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-n") && i + 1 < argc) params.max_new_tokens = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--pages-per-group") && i + 1 < argc) groups.groups.group_pages = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--page-fallback-tokens") && i + 1 < argc) groups.page_fallback_tokens = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "-o") && i + 1 < argc) out_path = argv[++i];
    else args.push_back(argv[i]);
  }
  if (args.size() < 2) {
    std::fprintf(stderr,
                 "usage: uocr_ref_ocr [-n MAX_NEW_TOKENS] [--pages-per-group G] [--page-fallback-tokens N] [-o OUT] "
                 "MODEL_DIR IMAGE...\n");
    return 2;
  }
  std::ofstream file;
  if (!out_path.empty()) file.open(out_path, std::ios::binary);
  std::ostream& out = out_path.empty() ? std::cout : file;
  struct stat st;
  if (stat(args[0].c_str(), &st) != 0) {
    out << "UOCR-SKIP: model folder " << args[0] << " not found\n";
    return 0;
  }
  try {
    groups.groups.overlap_pages = groups.groups.group_pages - 1;
    uocr::Session session(uocr::Model::load(args[0]), params, groups);
    uocr::FilePages pages(std::vector<std::string>(args.begin() + 1, args.end()));
    const uocr::RunSummary sum = session.run(pages);
    out << sum.text << '\n';
    std::fprintf(stderr, "reference: %lld tokens, stop %s, %lld slides\n", static_cast<long long>(sum.generated_tokens),
                 uocr::stop_reason_name(sum.stop), static_cast<long long>(session.stats().slides));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uocr_ref_ocr: %s\n", e.what());
    return 1;
  }
  out.flush();
  return out ? 0 : 1;
}
