#include "core/trace.h"

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

std::string Trace::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (size_t i = 0; i < thread_names_.size(); ++i) {
    const std::string name = thread_names_[i].empty() ? "thread " + std::to_string(i + 1) : thread_names_[i];
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", i + 1}, {"args", {{"name", name}}}});
  }
  for (const Event& e : events_) {
    nlohmann::ordered_json j = {{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.ts_us},
                                {"dur", e.dur_us}, {"pid", 1},          {"tid", e.tid}};
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    if (e.layer >= 0) args["layer"] = e.layer;
    if (e.pos >= 0) args["pos"] = e.pos;
    if (!args.empty()) j["args"] = std::move(args);
    events.push_back(std::move(j));
  }
  nlohmann::ordered_json root;
  root["traceEvents"] = std::move(events);
  root["displayTimeUnit"] = "ms";
  return root.dump();
}

Status Trace::write(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(path + ": cannot write the trace (" + std::strerror(errno) + ")");
  out << to_json();
  out.close();
  if (!out) return io_error(path + ": writing the trace failed (" + std::strerror(errno) + ")");
  return Status::ok();
}

}  // namespace leoam
