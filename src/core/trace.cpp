#include "core/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace leoam {

int Trace::tid_locked() {
  const auto [it, added] = tids_.emplace(std::this_thread::get_id(), static_cast<int>(tids_.size()) + 1);
  if (added) thread_names_.emplace_back();
  return it->second;
}

void Trace::name_thread(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string& slot = thread_names_[static_cast<size_t>(tid_locked() - 1)];
  if (slot.empty()) slot = name;
}

void Trace::record(const char* name, const char* category, Clock::time_point begin, Clock::time_point end, int layer,
                   int64_t pos) {
  const double ts = std::chrono::duration<double, std::micro>(begin - epoch_).count();
  const double dur = std::chrono::duration<double, std::micro>(end - begin).count();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({name, category, ts, dur, tid_locked(), layer, pos});
}

size_t Trace::n_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::vector<Trace::Event> Trace::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

std::vector<std::string> Trace::thread_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names = thread_names_;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) names[i] = "thread " + std::to_string(i + 1);
  }
  return names;
}

std::string Trace::to_json() const {
  const NamedTrace one{"", this};
  return traces_to_json({&one, 1});
}

Status Trace::write(const std::string& path) const {
  const NamedTrace one{"", this};
  return write_traces(path, {&one, 1});
}

std::string traces_to_json(std::span<const NamedTrace> traces) {
  Trace::Clock::time_point origin = Trace::Clock::time_point::max();
  for (const NamedTrace& t : traces) origin = std::min(origin, t.trace->epoch());
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (size_t p = 0; p < traces.size(); ++p) {
    const Trace& trace = *traces[p].trace;
    const int pid = static_cast<int>(p) + 1;
    const double shift_us = std::chrono::duration<double, std::micro>(trace.epoch() - origin).count();
    if (!traces[p].name.empty()) {
      events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", traces[p].name}}}});
    }
    const std::vector<std::string> names = trace.thread_names();
    for (size_t i = 0; i < names.size(); ++i) {
      events.push_back(
          {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", i + 1}, {"args", {{"name", names[i]}}}});
    }
    for (const Trace::Event& e : trace.events()) {
      nlohmann::ordered_json j = {{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.ts_us + shift_us},
                                  {"dur", e.dur_us}, {"pid", pid},          {"tid", e.tid}};
      nlohmann::ordered_json args = nlohmann::ordered_json::object();
      if (e.layer >= 0) args["layer"] = e.layer;
      if (e.pos >= 0) args["pos"] = e.pos;
      if (!args.empty()) j["args"] = std::move(args);
      events.push_back(std::move(j));
    }
  }
  nlohmann::ordered_json root;
  root["traceEvents"] = std::move(events);
  root["displayTimeUnit"] = "ms";
  return root.dump();
}

Status write_traces(const std::string& path, std::span<const NamedTrace> traces) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(path + ": cannot write the trace (" + std::strerror(errno) + ")");
  out << traces_to_json(traces);
  out.close();
  if (!out) return io_error(path + ": writing the trace failed (" + std::strerror(errno) + ")");
  return Status::ok();
}

}  // namespace leoam
