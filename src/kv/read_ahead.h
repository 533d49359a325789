// ReadAhead: the disk reads of the dynamic three-tier pipeline (LeoAM's DTP), on an I/O thread of
// its own. While layer l computes, the disk chunks of layer l + 1's speculated selection are read
// into staging buffers, and layer l + 1's gather takes them from there instead of reading them.
// At most two jobs, one layer each, each in its own half of the staging; the I/O thread blocks in
// io_uring or on a condition variable, never spins.
// Thread safety: every call comes from the thread that drives the store, and that thread calls
// settle(L) before any read or write of layer L's chunk file while a job of L may be in flight. A
// job counts its disk bytes and latency apart; settle() adds them to the store's stats.
// The schedule drawn: docs/kv-store.md#read-ahead
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/trace.h"
#include "io/aligned_buffer.h"
#include "kv/disk_tier.h"
#include "kv/kv_stats.h"

namespace leoam {

class ReadAhead {
 public:
  // budget_bytes: both staging buffers together, at least two of the disk tier's slots. Starts
  // the I/O thread;
  // the I/O thread's reads go into `trace` when it is not null.
  static Result<std::unique_ptr<ReadAhead>> create(DiskTier& disk, uint64_t budget_bytes, Trace* trace = nullptr);
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Queues the reads of `chunks` of `layer` (written to disk, in any order; each its index and
  // form, dst unused), as many as half the budget holds, into a fresh job. A job of the same layer still held is dropped first,
  // and the one whose buffer the new job takes; each is waited for and its I/O counted in `stats`.
  void start(int layer, std::span<const DiskChunkRead> chunks, KvStats& stats);
  // Waits until no job of `layer` is in flight, and counts a finished one's I/O into `stats`
  // (disk bytes read, latency, the pipeline counters); a wait is a span in `trace` (may be null).
  void settle(int layer, KvStats& stats, Trace* trace = nullptr);
  // Waits for every job and counts them (before a truncate, a clear or the end).
  void settle_all(KvStats& stats);
  // Whether a settled job of `layer` is held: its gather may find chunks staged.
  bool covers(int layer) const;
  // The read of chunk `index` of `layer` (its bytes and their form), when a settled job of the
  // layer read it successfully; nullptr otherwise. A job that failed stages nothing: the gather
  // reads its chunks itself and reports what goes wrong.
  const DiskChunkRead* staged(int layer, int64_t index) const;
  // Forgets every job's chunks (the KV they hold may be about to change).
  void drop_all(KvStats& stats);
  // The staging buffers' bytes (both), for the store's buffer report.
  uint64_t buffer_bytes() const { return 2 * half_bytes_; }

 private:
  struct Job {
    int layer = -1;
    bool held = false;    // started and not dropped: its buffer is taken
    bool done = false;    // the I/O thread has finished it (under mu_)
    bool counted = false;  // its I/O is in the store's stats, and `where` filled
    Status status;
    std::vector<DiskChunkRead> reads;
    std::unordered_map<int64_t, DiskChunkRead> where;  // chunk index -> its read, once ok
    KvStats io;  // the job's disk bytes and latency, counted apart from the store's
  };

  ReadAhead(DiskTier& disk, uint64_t half_bytes, Trace* trace);
  void run();
  void wait_done(Job& job);
  void count(Job& job, KvStats& stats);
  // Waits for the job, counts it, and lets its buffer go.
  void drop(Job& job, KvStats& stats);
  Job* job_of(int layer);

  DiskTier& disk_;
  Trace* trace_;
  uint64_t half_bytes_;
  AlignedBuffer buffers_[2];
  Job jobs_[2];
  int next_ = 0;  // the buffer the next job takes

  std::mutex mu_;
  std::condition_variable cv_;  // a job held, a job done, or stop
  std::deque<Job*> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace leoam
