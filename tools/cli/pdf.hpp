// PDF pages as a page source: the page count from poppler's pdfinfo, each page rendered by
// pdftoppm (Debian poppler-utils) only when the session pulls it, into a private temporary
// folder that exists only while that page is rendered and read. One page image exists at a time;
// the model never sees the PDF itself.
//
// A PDF is hostile input, so every poppler run is contained: no shell; its own process group
// (Ctrl-C at the terminal does not reach it, and killing the group leaves nothing behind); a
// time budget (--page-timeout); killed with the parent on Linux; and SIGINT, SIGTERM and SIGHUP
// held back until the renderer is gone and its folder removed, then raised again under the
// handler the CLI had (so Ctrl-C still stops the run with 130 and SIGTERM still ends it).
// Each page's MediaBox, read first, must fit the decode budget and match the rendered image:
// pdftoppm turns a page it cannot allocate into a blank 1 x 1 image.
#pragma once
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/session/page_source.hpp"

namespace uocr_cli {

inline bool is_pdf(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".pdf";
}

// A signal that arrived while a poppler tool ran: the tool has been killed, its files removed.
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline volatile std::sig_atomic_t g_pdf_signal = 0;

// While alive, SIGINT, SIGTERM and SIGHUP only set g_pdf_signal (a signal the process ignores stays
// ignored); at the end the previous handlers come back and a signal that came is raised again.
class HoldSignals {
 public:
  HoldSignals() {
    g_pdf_signal = 0;
    struct sigaction hold {};
    hold.sa_handler = [](int s) { g_pdf_signal = s; };
    sigemptyset(&hold.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) {
      ::sigaction(kSignals[i], nullptr, &previous_[i]);
      if (previous_[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &hold, nullptr);
    }
  }
  ~HoldSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
    if (g_pdf_signal != 0) ::raise(g_pdf_signal);
  }
  HoldSignals(const HoldSignals&) = delete;
  HoldSignals& operator=(const HoldSignals&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> previous_{};
};

// What a poppler run left: stdout, the end of stderr, its exit code (-1: killed by a signal).
struct ToolRun {
  std::string out, err;
  int exit_code = -1;
  bool timed_out = false;
  // stderr's last error line, else its last line: what poppler says went wrong ("" if nothing).
  std::string message() const {
    std::string last, last_error;
    size_t at = 0;
    while (at < err.size()) {
      size_t end = std::min(err.find('\n', at), err.size());
      std::string line = err.substr(at, end - at);
      at = end + 1;
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (line.empty()) continue;
      last = line;
      if (line.find("Error") != std::string::npos) last_error = line;
    }
    return last_error.empty() ? last : last_error;
  }
};

// Runs poppler tool argv[0] from PATH, without a shell, under HoldSignals (which the caller
// holds) and a time budget (seconds; 0: none). Its group is killed when it overruns the budget
// (the run comes back timed_out), when the run's deadline passes (throws DeadlinePassed) or a
// held signal arrives (throws Interrupted), and before it is reaped in any case. A missing tool
// is Status::unsupported.
inline ToolRun run_tool(const std::vector<std::string>& argv, int timeout_s, const std::string& pdf, const uocr::Deadline& run_deadline = {}) {
  using clock = std::chrono::steady_clock;
  constexpr size_t kOutMax = size_t(1) << 20, kErrMax = 4096;  // pdfinfo's answer fits; stderr: its end
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  // Its stdout, its stderr, and exec's errno when exec fails (closed by a successful exec).
  int pipes[3][2];
  for (int i = 0; i < 3; ++i) {
    if (::pipe2(pipes[i], O_CLOEXEC) == 0) continue;
    const int err = errno;
    for (int k = 0; k < i; ++k) ::close(pipes[k][0]), ::close(pipes[k][1]);
    throw uocr::Error(uocr::Status::io, "cannot start " + argv[0] + ": " + std::strerror(err));
  }
  int *const out_pipe = pipes[0], *const err_pipe = pipes[1], *const exec_pipe = pipes[2];
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::setpgid(0, 0);
#ifdef __linux__
    // Follows the thread that forks, which waits here until the child is reaped.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
#endif
    const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_in >= 0) ::dup2(null_in, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execvp(cargv[0], cargv.data());
    const int err = errno;
    (void)!::write(exec_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  const int fork_errno = errno;
  for (int fd : {out_pipe[1], err_pipe[1], exec_pipe[1]}) ::close(fd);
  if (pid < 0) {
    for (int fd : {out_pipe[0], err_pipe[0], exec_pipe[0]}) ::close(fd);
    throw uocr::Error(uocr::Status::io, "cannot start " + argv[0] + ": " + std::strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // also here: the group must exist before this process may signal it

  ToolRun r;
  auto reap = [&] {
    ::kill(-pid, SIGKILL);  // anything left in its group; the unreaped leader keeps the group id taken
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  auto exited = [&] {
    siginfo_t info{};
    return ::waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
  };
  std::array<pollfd, 2> fds{{{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}}};
  auto close_pipes = [&] {
    for (pollfd& p : fds)
      if (p.fd >= 0) ::close(p.fd), p.fd = -1;
  };

  int exec_errno = 0;
  ssize_t got;
  while ((got = ::read(exec_pipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(exec_pipe[0]);
  if (got == ssize_t(sizeof exec_errno)) {
    close_pipes();
    reap();
    throw uocr::Error(exec_errno == ENOENT ? uocr::Status::unsupported : uocr::Status::io,
                      exec_errno == ENOENT ? "reading a PDF needs " + argv[0] + " (Debian package poppler-utils)"
                                           : "cannot start " + argv[0] + ": " + std::strerror(exec_errno));
  }

  // SIGTERM to the group, SIGKILL after a grace period.
  auto stop = [&] {
    close_pipes();
    ::kill(-pid, SIGTERM);
    const auto grace = clock::now() + std::chrono::seconds(1);
    while (!exited() && clock::now() < grace) ::poll(nullptr, 0, 10);
    reap();
  };
  const auto deadline = clock::now() + std::chrono::seconds(timeout_s);
  bool done = false;
  while (!done || fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (g_pdf_signal != 0) {
      stop();
      throw Interrupted(pdf + ": interrupted (signal " + std::to_string(int(g_pdf_signal)) + ") while " + argv[0] + " ran");
    }
    if (timeout_s > 0 && clock::now() >= deadline) {
      stop();
      r.timed_out = true;
      return r;
    }
    if (run_deadline.passed()) {
      stop();
      throw uocr::DeadlinePassed(pdf + ": " + argv[0]);
    }
    // Signals interrupt poll(); the slice bounds the wait for one that lands just before it.
    // With both pipes closed only the exit is awaited: a short slice, so a finished tool costs
    // no idle wait.
    ::poll(fds.data(), fds.size(), fds[0].fd < 0 && fds[1].fd < 0 ? 1 : 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        continue;
      }
      std::string& to = i == 0 ? r.out : r.err;
      to.append(buf, size_t(n));
      if (i == 0 && to.size() > kOutMax) to.resize(kOutMax);
      if (i == 1 && to.size() > kErrMax) to.erase(0, to.size() - kErrMax);
    }
    if (!done && exited()) {
      done = true;
      ::kill(-pid, SIGKILL);  // what it started holds its pipes no longer
    }
  }
  reap();
  return r;
}

// A folder of its own for one page's image, removed with everything in it.
struct RenderFolder {
  std::string path;
  RenderFolder() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "uocr-pdf-XXXXXX").string();
    uocr::require(::mkdtemp(tmpl.data()) != nullptr, uocr::Status::io,
                  [&] { return "cannot create a temporary folder " + tmpl + ": " + std::strerror(errno); });
    path = tmpl;
  }
  ~RenderFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  RenderFolder(const RenderFolder&) = delete;
  RenderFolder& operator=(const RenderFolder&) = delete;
};

class PdfPages final : public uocr::PageSource {
 public:
  // timeout_s: what each poppler run may take (0: no limit), the --page-timeout option.
  PdfPages(std::string path, int dpi, uocr::DecodeLimits limits, int timeout_s)
      : path_(std::move(path)), dpi_(dpi), limits_(limits), timeout_s_(timeout_s) {
    uocr::require_regular_file(path_, "PDF");
    uocr::require(dpi_ >= 36 && dpi_ <= 1200, uocr::Status::invalid_argument, "--dpi must be in 36..1200");
    HoldSignals hold;
    const ToolRun info = run_tool({"pdfinfo", path_}, timeout_s_, path_);
    check(info, "pdfinfo", "reading its page count");
    long long pages = 0;
    last_line(info.out, [&](const char* line) { return std::sscanf(line, "Pages: %lld", &pages) == 1; });
    count_ = pages;
    uocr::require(count_ > 0, uocr::Status::invalid_image, [&] { return path_ + " has no pages"; });
  }

  int64_t count() const override { return count_; }
  bool next(uocr::ImageU8& page) override {
    if (next_ >= count_) return false;
    const int64_t number = ++next_;  // poppler counts pages from 1
    const std::string n = std::to_string(number), at = "page " + n;
    HoldSignals hold;
    const ToolRun box = run_tool({"pdfinfo", "-box", "-f", n, "-l", n, path_}, timeout_s_, path_, deadline_);
    check(box, "pdfinfo", "reading the size of " + at);
    double x0, y0, x1, y1;
    const bool found = last_line(box.out, [&](const char* line) {
      long long of = 0;
      return std::sscanf(line, "Page %lld MediaBox: %lf %lf %lf %lf", &of, &x0, &y0, &x1, &y1) == 5 && of == number;
    });
    uocr::require(found, uocr::Status::invalid_image, [&] { return path_ + ": pdfinfo gave no MediaBox for " + at; });
    const double w_pt = std::abs(x1 - x0), h_pt = std::abs(y1 - y0);
    const double w_px = std::ceil(w_pt * dpi_ / 72), h_px = std::ceil(h_pt * dpi_ / 72);
    const std::string size = fixed(w_pt) + " x " + fixed(h_pt) + " pt (its MediaBox), " + fixed(w_px) + " x " + fixed(h_px) +
                             " pixels at " + std::to_string(dpi_) + " dpi";
    uocr::require(w_px * h_px <= double(limits_.max_pixels), uocr::Status::invalid_image, [&] {
      return path_ + ": " + at + " is " + size + ", above the limit of " + std::to_string(limits_.max_pixels) +
             " pixels; lower --dpi (or raise --max-image-pixels)";
    });

    RenderFolder folder;
    const std::string prefix = folder.path + "/page";
    const ToolRun render = run_tool({"pdftoppm", "-f", n, "-l", n, "-singlefile", "-r", std::to_string(dpi_), "-png", path_, prefix},
                                    timeout_s_, path_, deadline_);
    check(render, "pdftoppm", "rendering " + at + " at " + std::to_string(dpi_) + " dpi");
    page = uocr::load_image(prefix + ".png", limits_, deadline_);
    // Rotation (/Rotate 90 or 270) swaps the sides; pdftoppm rounds each side up.
    auto near = [](double a, int b) { return std::abs(a - b) <= 2; };
    const bool fits = (near(w_px, page.width) && near(h_px, page.height)) || (near(h_px, page.width) && near(w_px, page.height));
    uocr::require(fits, uocr::Status::invalid_image, [&] {
      const std::string said = render.message();
      return path_ + ": " + at + " rendered as " + std::to_string(page.width) + " x " + std::to_string(page.height) +
             " pixels, but it is " + size + (said.empty() ? "" : " (pdftoppm: " + said + ")") + "; try a lower --dpi";
    });
    return true;
  }
  void skip(int64_t n) override { next_ = std::min(count_, next_ + n); }
  void set_deadline(const uocr::Deadline& deadline) override { deadline_ = deadline; }
  // The page's text layer (pdftotext): "" for a page without one, or when poppler cannot read
  // it (the draft only saves passes; the page's rendering reports what is wrong with it). Read
  // kTextPages pages per poppler run and kept until a page outside them is asked for.
  std::string draft_text(int64_t page) const override {
    if (page < 0 || page >= count_) return {};
    if (page < text_first_ || page >= text_first_ + int64_t(texts_.size())) {
      texts_.clear();
      text_first_ = page;
      const int64_t last = std::min(count_, page + kTextPages);
      HoldSignals hold;
      const ToolRun text = run_tool({"pdftotext", "-f", std::to_string(page + 1), "-l", std::to_string(last), "-enc", "UTF-8", path_, "-"},
                                    timeout_s_, path_);
      if (text.exit_code == 0 && !text.timed_out)
        for (size_t at = 0; at < text.out.size() && int64_t(texts_.size()) < last - page;) {  // a form feed ends each page
          const size_t end = std::min(text.out.find('\f', at), text.out.size());
          texts_.push_back(text.out.substr(at, end - at));
          at = end + 1;
        }
      texts_.resize(size_t(last - page));
    }
    return texts_[size_t(page - text_first_)];
  }
  std::string identity() const override {
    uocr::Fnv64 h;
    uocr::fingerprint_file(h, path_);
    return "pdf:" + h.hex() + "@" + std::to_string(dpi_) + "dpi";
  }

 private:
  // Throws unless poppler ran to a clean exit, in the words that fit the PDF best.
  void check(const ToolRun& r, const std::string& tool, const std::string& doing) const {
    if (r.timed_out)
      throw uocr::Error(uocr::Status::invalid_image, path_ + ": " + doing + " took longer than --page-timeout " +
                                                         std::to_string(timeout_s_) + " s and was stopped; raise --page-timeout (0: no limit)" +
                                                         (tool == "pdftoppm" ? " or lower --dpi" : ""));
    if (r.exit_code == 0) return;
    if (r.err.find("Incorrect password") != std::string::npos)
      throw uocr::Error(uocr::Status::unsupported, path_ + " is encrypted (password-protected): uocr cannot read it");
    // poppler refuses the page range 1..0 of a document without pages
    if (r.err.find("Invalid page count 0") != std::string::npos || r.err.find("last page (0)") != std::string::npos)
      throw uocr::Error(uocr::Status::invalid_image, path_ + " has no pages");
    const std::string said = r.message();
    throw uocr::Error(uocr::Status::invalid_image, path_ + ": " + tool + " failed " + doing +
                                                       (said.empty() ? " (exit " + std::to_string(r.exit_code) + ")" : ": " + said));
  }
  // The last line of pdfinfo's answer that `parse` accepts: the document's metadata, printed
  // before the lines read here, may itself hold line breaks and look like them.
  template <class Parse>
  static bool last_line(const std::string& text, Parse parse) {
    for (size_t end = text.size(); end > 0;) {
      const size_t begin = text.rfind('\n', end - 1);
      const size_t from = begin == std::string::npos ? 0 : begin + 1;
      if (parse(text.substr(from, end - from).c_str())) return true;
      if (begin == std::string::npos) break;
      end = begin;
    }
    return false;
  }
  static std::string fixed(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }

  std::string path_;
  int dpi_;
  uocr::DecodeLimits limits_;  // of each rendered page
  uocr::Deadline deadline_;     // the run's
  int timeout_s_;
  int64_t count_ = 0, next_ = 0;
  static constexpr int64_t kTextPages = 16;
  mutable int64_t text_first_ = 0;  // texts_: the text layers of pages text_first_ ..
  mutable std::vector<std::string> texts_;
};

}  // namespace uocr_cli
