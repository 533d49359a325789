// A fixed pool of worker threads for data-parallel loops. The calling thread takes part in the
// work, so a pool of n threads runs n - 1 workers plus the caller.
// Latency matters more than throughput here: a decode step of a small model issues dozens of
// loops of a few microseconds each. So
//   - a loop whose total cost is small runs inline on the caller (parallel_for with a cost hint);
//   - between loops a worker polls for the next one for at most spin_us (with a pause
//     instruction), then sleeps in the kernel (futex) until woken: an idle pool uses no CPU;
//   - the ranges of a loop are claimed, not assigned: a range whose worker has not woken yet is
//     run by whichever thread gets to it first, so a sleeping or descheduled worker never holds
//     up the caller for longer than one range.
#pragma once

#include <cstdint>
#include <functional>

namespace leoam {

struct ThreadPoolOptions {
  int n_threads = 0;  // <= 0: ThreadPool::default_thread_count()
  // How long an idle worker polls for the next loop before it sleeps. 10: covers the serial
  // gaps between the loops of one decode step (norms, RoPE, KV append: 1-5 us), where a futex
  // wake-up would cost 5-50 us; the gap between tokens (sampling) outlasts it, so idle workers
  // do sleep. Measured on 2 cores: 0, 5, 20 and 100 gave the same decode rates within noise,
  // since a range whose worker is asleep is run by the caller (see parallel_for).
  int spin_us = 10;
  // How long the caller, done with its own ranges, polls for the ranges other threads are still
  // running before it sleeps. Longer than spin_us: the caller is not idle but on the critical
  // path, and the ranges were split evenly, so they usually end within this; a sleep here would
  // add a wake-up to every region. 200: several times a wake-up (5-50 us); a range still running
  // after that has most likely lost its core, and sleeping costs little in comparison.
  int join_spin_us = 200;
  // parallel_for(n, cost_per_item, fn) gives each range at least this much cost, so cheap loops
  // use fewer threads or run inline. The unit is about one multiply-add (one weight element of a
  // matrix-vector product). 32768: about 4-10 us of dot products, several times the ~1 us it
  // costs to hand a range to a polling worker.
  int64_t min_cost_per_thread = 32768;
};

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end, int range)>;

  // n_threads <= 0 means default_thread_count().
  explicit ThreadPool(int n_threads);
  explicit ThreadPool(const ThreadPoolOptions& options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const;

  // Splits [0, n) into min(n, n_threads()) contiguous ranges of near-equal size (sizes differ by
  // at most one) and runs fn(begin, end, range) once for each, in parallel; returns when all are
  // done. `range` is the range's index in [0, n_ranges): no two calls of one loop share it, so it
  // can index per-thread scratch. Range 0 always runs on the caller; the others run on whichever
  // thread claims them first (usually one worker each). An exception thrown by fn reaches the
  // caller (the first one, after every range has finished).
  // One caller at a time, and not reentrant: fn must not call parallel_for on the same pool. A
  // pool of one thread is the exception: it only runs fn inline, so any threads may share it.
  void parallel_for(int64_t n, const RangeFn& fn);

  // The same with a cost hint: items cost about cost_per_item each (see
  // ThreadPoolOptions::min_cost_per_thread for the unit), and the loop uses no more ranges than
  // keeps each at min_cost_per_thread or more. A cheap loop runs inline as fn(0, n, 0).
  void parallel_for(int64_t n, int64_t cost_per_item, const RangeFn& fn);

  // The number of ranges parallel_for(n, cost_per_item, ...) would use.
  int n_ranges_for(int64_t n, int64_t cost_per_item) const;

  // Number of physical cores (not SMT siblings) of this machine, at least 1.
  static int default_thread_count();

 private:
  struct Impl;
  void run(int64_t n, int n_ranges, const RangeFn& fn);
  Impl* impl_;
};

}  // namespace leoam
