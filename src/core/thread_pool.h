// A fixed pool of worker threads for data-parallel loops. Idle workers sleep on a condition
// variable (no spin-waiting). The calling thread takes part in the work, so a pool of n threads
// runs n - 1 workers plus the caller.
#pragma once

#include <cstdint>
#include <functional>

namespace leoam {

class ThreadPool {
 public:
  // n_threads <= 0 means default_thread_count().
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const;

  // Splits [0, n) into n_threads() contiguous ranges of near-equal size and runs
  // fn(begin, end, thread_index) on each, in parallel; returns when all are done.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end, int thread)>& fn);

  // Number of physical cores (not SMT siblings) of this machine, at least 1.
  static int default_thread_count();

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace leoam
