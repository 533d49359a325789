#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace leoam {
namespace {

// Runs parallel_for(n) and checks every index in [0, n) was visited exactly once, ranges were
// contiguous and near-equal (sizes differ by at most one) and range indices were in range and
// each used once.
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
    EXPECT_TRUE(threads.insert(thread).second) << "range " << thread << " run twice";
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

TEST(ThreadPool, CostHintRunsCheapLoopsInline) {
  ThreadPool pool(ThreadPoolOptions{.n_threads = 4, .min_cost_per_thread = 1000});
  EXPECT_EQ(pool.n_ranges_for(0, 10), 0);
  EXPECT_EQ(pool.n_ranges_for(10, 10), 1);     // 100 < 1000
  EXPECT_EQ(pool.n_ranges_for(100, 10), 1);    // exactly one range's worth
  EXPECT_EQ(pool.n_ranges_for(250, 10), 2);    // 2500: two full ranges
  EXPECT_EQ(pool.n_ranges_for(1000, 10), 4);   // capped by the threads
  EXPECT_EQ(pool.n_ranges_for(3, 1 << 30), 3); // capped by the items
  EXPECT_EQ(pool.n_ranges_for(int64_t{1} << 40, int64_t{1} << 40), 4);  // no overflow

  int calls = 0;
  std::thread::id seen;
  pool.parallel_for(10, 10, [&](int64_t begin, int64_t end, int range) {
    ++calls;
    seen = std::this_thread::get_id();
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
    EXPECT_EQ(range, 0);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, std::this_thread::get_id());

  std::vector<std::atomic<int>> hits(250);
  std::atomic<int> n_calls{0};
  pool.parallel_for(250, 10, [&](int64_t begin, int64_t end, int) {
    n_calls.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  EXPECT_EQ(n_calls.load(), 2);
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, WorksWithoutSpinningAndAfterIdleSleeps) {
  // spin 0: every hand-off and every join goes through the futex; then a pause long enough for
  // the workers to fall asleep with the default spin.
  for (int spin_us : {0, 10}) {
    ThreadPool pool(ThreadPoolOptions{.n_threads = 3, .spin_us = spin_us, .join_spin_us = spin_us});
    for (int rep = 0; rep < 200; ++rep) expect_covers_exactly_once(pool, 3 + rep % 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    expect_covers_exactly_once(pool, 1000);
  }
}

TEST(ThreadPool, CallerWaitsForASlowRangeOnAWorker) {
  // Range 0 holds the caller until range 1 has started elsewhere, so range 1 runs on the worker;
  // it outlasts the caller's polling, so the caller sleeps and must be woken when it ends.
  ThreadPool pool(ThreadPoolOptions{.n_threads = 2, .spin_us = 0, .join_spin_us = 0});
  for (int rep = 0; rep < 5; ++rep) {
    std::atomic<bool> started{false};
    std::atomic<bool> finished{false};
    pool.parallel_for(2, [&](int64_t, int64_t, int range) {
      if (range == 0) {
        while (!started.load()) std::this_thread::yield();
      } else {
        started.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        finished.store(true);
      }
    });
    EXPECT_TRUE(finished.load());
  }
}

TEST(ThreadPool, IdleWorkersSleep) {
  // After a loop, the workers stop polling within the spin bound: the process's CPU time stops
  // growing while the caller sleeps.
  ThreadPool pool(ThreadPoolOptions{.n_threads = 3, .spin_us = 50});
  expect_covers_exactly_once(pool, 100);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // well past the spin bound
  const std::clock_t before = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - before) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_ms, 20.0) << "idle workers used " << cpu_ms << " ms of CPU in 200 ms";
}

TEST(ThreadPool, DestroyedBeforeItsWorkersStart) {
  // Shutdown must not be missed by a worker thread that starts running after it (a hang).
  for (int rep = 0; rep < 200; ++rep) {
    ThreadPool pool(4);
    if (rep % 2 == 1) expect_covers_exactly_once(pool, 4);
  }
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
