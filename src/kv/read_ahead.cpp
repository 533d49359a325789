#include "kv/read_ahead.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace leoam {

Result<std::unique_ptr<ReadAhead>> ReadAhead::create(DiskTier& disk, uint64_t budget_bytes, Trace* trace) {
  const uint64_t slot = disk.slot_bytes();
  const uint64_t half = budget_bytes / 2 / slot * slot;
  if (half == 0) {
    return invalid_argument("KV read-ahead: a budget of " + std::to_string(budget_bytes) +
                            " bytes holds no chunk in each of its two buffers (a chunk's slot is " +
                            std::to_string(slot) + " bytes)");
  }
  std::unique_ptr<ReadAhead> r(new ReadAhead(disk, half, trace));
  for (AlignedBuffer& buffer : r->buffers_) {
    LEOAM_ASSIGN_OR_RETURN(buffer, AlignedBuffer::allocate(static_cast<size_t>(half)));
  }
  r->thread_ = std::thread([p = r.get()] { p->run(); });
  return r;
}

ReadAhead::ReadAhead(DiskTier& disk, uint64_t half_bytes, Trace* trace)
    : disk_(disk), trace_(trace), half_bytes_(half_bytes) {}

ReadAhead::~ReadAhead() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ReadAhead::run() {
  if (trace_ != nullptr) trace_->name_thread("read-ahead");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop, nothing left to read
    Job* job = queue_.front();
    queue_.pop_front();
    lock.unlock();
    // The job's reads touch only its layer's chunk file and its own buffer and stats.
    Status st;
    {
      const TraceSpan span(trace_, "read ahead", "io", job->layer);
      st = disk_.read_chunks(job->layer, job->reads, &job->io);
    }
    lock.lock();
    job->status = std::move(st);
    job->done = true;
    cv_.notify_all();
  }
}

ReadAhead::Job* ReadAhead::job_of(int layer) {
  for (Job& j : jobs_) {
    if (j.held && j.layer == layer) return &j;
  }
  return nullptr;
}

void ReadAhead::wait_done(Job& job) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return job.done; });
}

void ReadAhead::count(Job& job, KvStats& stats) {
  if (job.counted) return;
  job.counted = true;
  stats.disk_read_latency.merge(job.io.disk_read_latency);
  stats[Tier::kDisk].bytes_read += job.io[Tier::kDisk].bytes_read;
  stats.transfer.chunks_compressed += job.io.transfer.chunks_compressed;
  stats.transfer.chunks_as_is += job.io.transfer.chunks_as_is;
  stats.transfer.bytes_compressed += job.io.transfer.bytes_compressed;
  stats.read_ahead.jobs += 1;
  if (job.status.is_ok()) {
    stats.read_ahead.chunks_staged += job.reads.size();
    for (const DiskChunkRead& r : job.reads) job.where.emplace(r.index, r);
  } else {
    stats.read_ahead.failed_jobs += 1;
  }
}

void ReadAhead::drop(Job& job, KvStats& stats) {
  wait_done(job);
  count(job, stats);
  job.held = false;
  job.where.clear();
}

void ReadAhead::start(int layer, std::span<const DiskChunkRead> chunks, KvStats& stats) {
  if (Job* old = job_of(layer); old != nullptr) drop(*old, stats);
  Job& job = jobs_[next_];
  uint8_t* buffer = buffers_[next_].data();
  next_ = 1 - next_;
  if (job.held) drop(job, stats);
  job.layer = layer;
  job.done = false;
  job.counted = false;
  job.status = Status::ok();
  job.reads.clear();
  job.where.clear();
  job.io = KvStats();
  uint64_t used = 0;
  for (const DiskChunkRead& c : chunks) {
    const size_t slot = c.compressed ? disk_.compressed_slot_bytes() : disk_.slot_bytes();
    if (used + slot > half_bytes_) break;
    job.reads.push_back({c.index, buffer + used, c.compressed});
    used += slot;
  }
  if (job.reads.empty()) return;  // not held: nothing to wait for
  // The reads in file order, so that adjacent slots coalesce into one request.
  std::sort(job.reads.begin(), job.reads.end(),
            [](const DiskChunkRead& a, const DiskChunkRead& b) { return a.index < b.index; });
  job.held = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(&job);
  }
  cv_.notify_all();
}

void ReadAhead::settle(int layer, KvStats& stats, Trace* trace) {
  Job* job = job_of(layer);
  if (job == nullptr) return;
  bool waited = false;
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!job->done) {
      waited = true;
      const TraceSpan span(trace, "wait for read-ahead", "io", layer);
      cv_.wait(lock, [&] { return job->done; });
    }
  }
  if (waited) {
    stats.read_ahead.wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  count(*job, stats);
}

void ReadAhead::settle_all(KvStats& stats) {
  for (Job& j : jobs_) {
    if (j.held) settle(j.layer, stats);
  }
}

void ReadAhead::drop_all(KvStats& stats) {
  for (Job& j : jobs_) {
    if (j.held) drop(j, stats);
  }
}

bool ReadAhead::covers(int layer) const {
  for (const Job& j : jobs_) {
    if (j.held && j.layer == layer && j.counted) return true;
  }
  return false;
}

const DiskChunkRead* ReadAhead::staged(int layer, int64_t index) const {
  for (const Job& j : jobs_) {
    if (!j.held || j.layer != layer || !j.counted) continue;
    const auto it = j.where.find(index);
    return it != j.where.end() ? &it->second : nullptr;
  }
  return nullptr;
}

}  // namespace leoam
