// GET /metrics in the Prometheus text format (version 0.0.4), with vLLM's metric names under
// `uocr:` so that dashboards built for vLLM carry over; every series has a model_name label.
// Counters and histograms are kept here; gauges (running, waiting, cache bytes, process CPU and
// RSS) are read when the page is rendered.
#pragma once
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace uocr_serve {

class Metrics {
 public:
  explicit Metrics(std::string model_name) : model_label_("model_name=\"" + escape(model_name) + "\"") {
    const std::vector<double> latency = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560};
    for (const auto& h : std::vector<std::pair<const char*, const char*>>{
             {"uocr:time_to_first_token_seconds", "Seconds from a request's arrival to its first token."},
             {"uocr:e2e_request_latency_seconds", "Seconds from a request's arrival to its end."},
             {"uocr:page_latency_seconds", "Seconds a request took per page of its document."},
             {"uocr:request_queue_time_seconds", "Seconds a request waited before decoding began."}}) {
      Histogram& hist = histograms_[h.first];
      hist.help = h.second;
      hist.bounds = latency;
      hist.counts.assign(latency.size(), 0);
    }
    for (const auto& c : std::vector<std::pair<const char*, const char*>>{
             {"uocr:generation_tokens_total", "Tokens generated."},
             {"uocr:prompt_tokens_total", "Prompt tokens (visual tokens included) prefilled."},
             {"uocr:pages_total", "Pages transcribed."},
             {"uocr:spec_decode_num_drafts_total", "Decoder passes that verified tokens drafted from a page's text layer."},
             {"uocr:spec_decode_num_draft_tokens_total", "Tokens drafted from pages' text layers."},
             {"uocr:spec_decode_num_accepted_tokens_total", "Drafted tokens that were the tokens decoded."},
             {"uocr:request_success_total", "Requests that ended with a transcript, by finish reason."},
             {"uocr:errors_total", "Requests answered with an error, by HTTP status."}})
      counters_[c.first].help = c.second;
  }

  // A counter beyond the service's own (a fleet worker's: worker.hpp).
  void declare_counter(const std::string& name, const std::string& help) {
    std::lock_guard<std::mutex> lock(m_);
    counters_[name].help = help;
  }
  void add(const std::string& counter, double v, const std::string& labels = "") {
    std::lock_guard<std::mutex> lock(m_);
    counters_.at(counter).values[labels] += v;
  }
  void observe(const std::string& histogram, double v) {
    std::lock_guard<std::mutex> lock(m_);
    Histogram& h = histograms_.at(histogram);
    for (size_t i = 0; i < h.bounds.size(); ++i)
      if (v <= h.bounds[i]) ++h.counts[i];
    h.sum += v;
    ++h.count;
  }

  struct Gauge {
    std::string name, help, labels;
    double value;
  };
  // The exposition: the gauges given, then every counter and histogram.
  std::string render(const std::vector<Gauge>& gauges) const {
    std::lock_guard<std::mutex> lock(m_);
    std::string out;
    std::string last;
    for (const Gauge& g : gauges) {
      if (g.name != last) out += "# HELP " + g.name + " " + g.help + "\n# TYPE " + g.name + " gauge\n";
      last = g.name;
      out += g.name + "{" + labels(g.labels) + "} " + num(g.value) + "\n";
    }
    for (const auto& [name, c] : counters_) {
      out += "# HELP " + name + " " + c.help + "\n# TYPE " + name + " counter\n";
      if (c.values.empty()) out += name + "{" + model_label_ + "} 0\n";
      for (const auto& [l, v] : c.values) out += name + "{" + labels(l) + "} " + num(v) + "\n";
    }
    for (const auto& [name, h] : histograms_) {
      out += "# HELP " + name + " " + h.help + "\n# TYPE " + name + " histogram\n";
      for (size_t i = 0; i < h.bounds.size(); ++i)
        out += name + "_bucket{" + model_label_ + ",le=\"" + num(h.bounds[i]) + "\"} " +
               std::to_string(h.counts[i]) + "\n";
      out += name + "_bucket{" + model_label_ + ",le=\"+Inf\"} " + std::to_string(h.count) + "\n";
      out += name + "_sum{" + model_label_ + "} " + num(h.sum) + "\n";
      out += name + "_count{" + model_label_ + "} " + std::to_string(h.count) + "\n";
    }
    return out;
  }

  static std::string escape(const std::string& v) {
    std::string o;
    for (char c : v) {
      if (c == '\\' || c == '"') o += '\\';
      if (c == '\n') {
        o += "\\n";
        continue;
      }
      o += c;
    }
    return o;
  }

 private:
  struct Counter {
    std::string help;
    std::map<std::string, double> values;  // by label text
  };
  struct Histogram {
    std::string help;
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // cumulative: observations <= bounds[i]
    double sum = 0;
    uint64_t count = 0;
  };

  std::string labels(const std::string& extra) const { return extra.empty() ? model_label_ : model_label_ + "," + extra; }
  static std::string num(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.10g", v);
    return b;
  }

  mutable std::mutex m_;
  std::string model_label_;
  std::map<std::string, Counter> counters_;
  std::map<std::string, Histogram> histograms_;
};

// The process's CPU seconds and resident memory.
inline std::vector<Metrics::Gauge> process_gauges() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double cpu = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  long pages_resident = 0, ignored = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &ignored, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  return {{"uocr:process_cpu_seconds", "CPU seconds the process used (user + system).", "", cpu},
          {"uocr:process_resident_memory_bytes", "Resident memory of the process.", "", double(pages_resident) * double(sysconf(_SC_PAGESIZE))}};
}

}  // namespace uocr_serve
