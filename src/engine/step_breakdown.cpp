#include "engine/step_breakdown.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

namespace leoam {
namespace {

bool is(const Trace::Event& e, const char* name) { return std::strcmp(e.name, name) == 0; }

}  // namespace

StepBreakdown summarize_decode_steps(const Trace& trace, int64_t skip, int64_t count) {
  const std::vector<Trace::Event> events = trace.events();
  std::vector<const Trace::Event*> steps;
  for (const Trace::Event& e : events) {
    if (is(e, "decode step")) steps.push_back(&e);
  }
  std::sort(steps.begin(), steps.end(), [](const Trace::Event* a, const Trace::Event* b) { return a->ts_us < b->ts_us; });
  StepBreakdown b;
  if (static_cast<int64_t>(steps.size()) <= skip) return b;
  steps.erase(steps.begin(), steps.begin() + skip);
  if (static_cast<int64_t>(steps.size()) > count) steps.resize(static_cast<size_t>(std::max<int64_t>(count, 0)));
  if (steps.empty()) return b;
  const int compute = steps.front()->tid;
  // The step a span lies in: the last one starting at or before it, if it ends after it.
  const auto in_step = [&](const Trace::Event& e) {
    const auto it = std::upper_bound(steps.begin(), steps.end(), e.ts_us,
                                     [](double ts, const Trace::Event* s) { return ts < s->ts_us; });
    return it != steps.begin() && e.ts_us + e.dur_us <= (*(it - 1))->ts_us + (*(it - 1))->dur_us;
  };
  // The compute thread's parts; the reads, waits and decoding inside one of them (attention's
  // gathers; an append that waits for its layer's read-ahead, inside "qkv") are taken out of it.
  struct Part {
    double t0 = 0, t1 = 0;
    double* ms = nullptr;
  };
  double attention = 0.0;
  std::vector<Part> parts;
  std::vector<const Trace::Event*> inner;  // reads, waits and decoding
  for (const Trace::Event& e : events) {
    if (!in_step(e)) continue;
    const double ms = e.dur_us / 1000.0;
    if (e.tid != compute) {
      if (is(e, "read ahead")) b.read_ahead_ms += ms;
      continue;
    }
    double* part = nullptr;
    if (is(e, "qkv") || is(e, "attn_output") || is(e, "ffn")) {
      part = &b.weights_ms;
    } else if (is(e, "select") || is(e, "speculate next layer")) {
      part = &b.selection_ms;
    } else if (is(e, "attention")) {
      part = &attention;
    } else if (is(e, "disk read") || is(e, "wait for read-ahead")) {
      b.io_wait_ms += ms;
      inner.push_back(&e);
    } else if (is(e, "decode chunks")) {
      b.decode_ms += ms;
      inner.push_back(&e);
    } else if (is(e, "decode step")) {
      b.step_ms += ms;
    }
    if (part != nullptr) {
      *part += ms;
      parts.push_back({e.ts_us, e.ts_us + e.dur_us, part});
    }
  }
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.t0 < b.t0; });
  for (const Trace::Event* e : inner) {
    // The last part starting at or before it, when it holds it.
    const auto it = std::upper_bound(parts.begin(), parts.end(), e->ts_us,
                                     [](double ts, const Part& p) { return ts < p.t0; });
    if (it != parts.begin() && e->ts_us + e->dur_us <= (it - 1)->t1) *(it - 1)->ms -= e->dur_us / 1000.0;
  }
  b.attention_ms = std::max(0.0, attention);
  b.weights_ms = std::max(0.0, b.weights_ms);
  b.selection_ms = std::max(0.0, b.selection_ms);
  b.other_ms = std::max(0.0, b.step_ms - b.weights_ms - b.selection_ms - b.io_wait_ms - b.decode_ms - b.attention_ms);
  b.n_steps = static_cast<int64_t>(steps.size());
  const double n = static_cast<double>(b.n_steps);
  for (double* v : {&b.step_ms, &b.weights_ms, &b.selection_ms, &b.io_wait_ms, &b.decode_ms, &b.attention_ms,
                    &b.other_ms, &b.read_ahead_ms}) {
    *v /= n;
  }
  return b;
}

std::string StepBreakdown::to_text() const {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "decode step %.2f ms (mean of %lld): weights %.2f, selection %.2f, I/O wait %.2f, decode %.2f, "
                "attention %.2f, other %.2f; read ahead %.2f alongside",
                step_ms, static_cast<long long>(n_steps), weights_ms, selection_ms, io_wait_ms, decode_ms, attention_ms,
                other_ms, read_ahead_ms);
  return buf;
}

std::string StepBreakdown::to_json() const {
  nlohmann::ordered_json j;
  j["steps"] = n_steps;
  j["step_ms"] = step_ms;
  j["weights_ms"] = weights_ms;
  j["selection_ms"] = selection_ms;
  j["io_wait_ms"] = io_wait_ms;
  j["decode_ms"] = decode_ms;
  j["attention_ms"] = attention_ms;
  j["other_ms"] = other_ms;
  j["read_ahead_ms"] = read_ahead_ms;
  return j.dump();
}

}  // namespace leoam
