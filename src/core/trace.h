// Trace: a timeline of what the engine did, on which thread, written as Chrome trace events
// (load the file in Perfetto, ui.perfetto.dev, or chrome://tracing). It is how the decode
// pipeline's overlap is seen: the compute thread's per-layer spans beside the read-ahead thread's
// disk reads.
//   {"traceEvents": [{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {...}},
//     {"name": "select", "cat": "decode", "ph": "X", "ts": 1520.250, "dur": 310.500, ...}, ...]}
// ts and dur are microseconds since the trace began. Threads are numbered in the order they
// first record, and named by the first name given (name_thread). Recording is thread-safe; code
// that may run without a trace takes a Trace* and records only when it is not null (Span).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace leoam {

class Trace {
 public:
  using Clock = std::chrono::steady_clock;

  Trace() : epoch_(Clock::now()) {}

  // Names the calling thread in the timeline ("compute", "read-ahead").
  void name_thread(const std::string& name);
  // One complete event on the calling thread. layer and pos < 0 are left out of its args.
  void record(const char* name, const char* category, Clock::time_point begin, Clock::time_point end, int layer = -1,
              int64_t pos = -1);
  size_t n_events() const;
  // A recorded span: thread number (1 = the first to record), times in microseconds since the
  // trace began; layer and pos -1 when not given.
  struct Event {
    const char* name;
    const char* category;
    double ts_us, dur_us;
    int tid;
    int layer;
    int64_t pos;
  };
  // A copy of the events so far, in the order they ended.
  std::vector<Event> events() const;
  // The threads' names, by number - 1 ("thread N" where none was given).
  std::vector<std::string> thread_names() const;
  // When the trace began: its events' times count from here.
  Clock::time_point epoch() const { return epoch_; }
  // The events as Chrome trace JSON.
  std::string to_json() const;
  // Writes to_json() to `path`; fails naming the path.
  [[nodiscard]] Status write(const std::string& path) const;

 private:
  int tid_locked();  // the calling thread's number (mu_ held)

  Clock::time_point epoch_;
  mutable std::mutex mu_;
  std::unordered_map<std::thread::id, int> tids_;
  std::vector<std::string> thread_names_;  // [tid - 1]
  std::vector<Event> events_;
};

// Several traces in one Chrome trace file, each its own process (pid 1, 2, ... in order) named
// `name`, its times shifted onto the earliest trace's clock, so that runs one after the other, or
// interleaved, lie on the timeline as they ran. An empty name writes no process name.
struct NamedTrace {
  std::string name;
  const Trace* trace;
};
std::string traces_to_json(std::span<const NamedTrace> traces);
// Writes traces_to_json(traces) to `path`; fails naming the path.
[[nodiscard]] Status write_traces(const std::string& path, std::span<const NamedTrace> traces);

// Records [construction, destruction) on the calling thread when the trace is not null.
class TraceSpan {
 public:
  TraceSpan(Trace* trace, const char* name, const char* category, int layer = -1, int64_t pos = -1)
      : trace_(trace), name_(name), category_(category), layer_(layer), pos_(pos),
        begin_(trace != nullptr ? Trace::Clock::now() : Trace::Clock::time_point{}) {}
  ~TraceSpan() {
    if (trace_ != nullptr) trace_->record(name_, category_, begin_, Trace::Clock::now(), layer_, pos_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Trace* trace_;
  const char* name_;
  const char* category_;
  int layer_;
  int64_t pos_;
  Trace::Clock::time_point begin_;
};

}  // namespace leoam
