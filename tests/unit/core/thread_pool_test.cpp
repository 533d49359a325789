#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace leoam {
namespace {

// Runs parallel_for(n) and checks every index in [0, n) was visited exactly once, ranges were
// contiguous and near-equal (sizes differ by at most one) and thread ids were in range.
void expect_covers_exactly_once(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::mutex mu;
  std::vector<int64_t> sizes;
  std::set<int> threads;
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int thread) {
    ASSERT_LT(begin, end);  // empty ranges are not handed out
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    sizes.push_back(end - begin);
    EXPECT_TRUE(threads.insert(thread).second) << "thread " << thread << " called twice";
    EXPECT_GE(thread, 0);
    EXPECT_LT(thread, pool.n_threads());
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
  if (n > 0) {
    EXPECT_EQ(static_cast<int64_t>(sizes.size()), std::min<int64_t>(n, pool.n_threads()));
    const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
    EXPECT_LE(*hi - *lo, 1);
  } else {
    EXPECT_TRUE(sizes.empty());
  }
}

TEST(ThreadPool, CoversAllIndicesExactlyOnce) {
  for (int n_threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(n_threads);
    EXPECT_EQ(pool.n_threads(), n_threads);
    for (int64_t n : {0, 1, 2, 3, 5, 6, 7, 8, 100, 1001}) {
      SCOPED_TRACE("threads " + std::to_string(n_threads) + " n " + std::to_string(n));
      expect_covers_exactly_once(pool, n);
    }
  }
}

TEST(ThreadPool, RepeatedUseKeepsWorking) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 2000; ++rep) {
    pool.parallel_for(rep % 13, [&](int64_t begin, int64_t end, int) { total += end - begin; });
  }
  int64_t expected = 0;
  for (int rep = 0; rep < 2000; ++rep) expected += rep % 13;
  EXPECT_EQ(total.load(), expected);
}

TEST(ThreadPool, SingleThreadRunsInlineOnCaller) {
  ThreadPool pool(1);
  std::thread::id seen;
  int calls = 0;
  pool.parallel_for(10, [&](int64_t begin, int64_t end, int thread) {
    seen = std::this_thread::get_id();
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
    EXPECT_EQ(thread, 0);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, std::this_thread::get_id());
}

TEST(ThreadPool, CallerTakesPartAsThreadZero) {
  ThreadPool pool(2);
  std::thread::id thread0;
  pool.parallel_for(2, [&](int64_t, int64_t, int thread) {
    if (thread == 0) thread0 = std::this_thread::get_id();
  });
  EXPECT_EQ(thread0, std::this_thread::get_id());
}

TEST(ThreadPool, RunsInParallel) {
  // Each of 3 threads waits until all 3 have arrived: this deadlocks unless the ranges really
  // run at the same time (the test would time out).
  ThreadPool pool(3);
  std::atomic<int> arrived{0};
  pool.parallel_for(3, [&](int64_t, int64_t, int) {
    arrived.fetch_add(1);
    while (arrived.load() < 3) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 3);
}

TEST(ThreadPool, WorkerExceptionReachesCaller) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(3,
                                 [](int64_t begin, int64_t, int) {
                                   if (begin == 2) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  expect_covers_exactly_once(pool, 10);  // still usable afterwards
}

TEST(ThreadPool, DefaultThreadCount) {
  const int n = ThreadPool::default_thread_count();
  EXPECT_GE(n, 1);
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) {
    EXPECT_LE(n, static_cast<int>(hw));  // physical cores never exceed logical CPUs
  }
  ThreadPool pool(0);
  EXPECT_EQ(pool.n_threads(), n);
}

}  // namespace
}  // namespace leoam
