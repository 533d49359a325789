#include "core/thread_pool.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace leoam {

namespace {

// 4096: far more cores than any target machine has, and under the 65535 ranges the claim word's
// 16-bit fields can count.
constexpr int kMaxThreads = 4096;

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex words must be plain 32-bit integers");

// Sleeps while *word == expected (returns at once when it differs; may return spuriously).
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word, int n_waiters) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, n_waiters, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls done() with a pause between polls for at most spin_us; true when done() became true.
template <typename Done>
bool spin_until(const Done& done, int spin_us) {
  if (done()) return true;
  if (spin_us <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (uint32_t i = 1;; ++i) {
    cpu_relax();
    if (done()) return true;
    // 16 pauses (~0.1-2 us depending on the core) between clock reads (~20 ns each).
    if ((i & 15) == 0 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

// Range `r` [begin, end) of [0, n) split into n_ranges: sizes differ by at most one.
std::pair<int64_t, int64_t> range_of(int64_t n, int n_ranges, int r) {
  const int64_t base = n / n_ranges;
  const int64_t rem = n % n_ranges;
  const int64_t begin = r * base + (r < rem ? r : rem);
  const int64_t end = begin + base + (r < rem ? 1 : 0);
  return {begin, end};
}

}  // namespace

// One loop ("job") at a time. The caller writes the job (fn, n) and then publishes it in the
// claim word, pre-claiming range 0 for itself, and bumps wake_seq to wake the workers. Every
// thread then claims ranges with a compare-and-swap on the claim word until none are left, and
// counts each finished range in n_done; the caller returns once n_done reaches n_ranges.
//
//   claim (64 bits):  [ job id : 32 | n_ranges : 16 | next unclaimed range : 16 ]
//
// The job id makes a claim by a worker that slept through a whole job fail instead of taking a
// range of the next one; a successful claim also orders the job's fields before the worker
// reads them, and the caller cannot publish the next job (overwriting the fields) until every
// claimed range is done. Idle workers wait for wake_seq to change: first polling, then in
// futex_wait. A thread registers in n_sleeping before its last check of the word it sleeps on,
// and the waker bumps the word before reading n_sleeping (all seq_cst), so either the sleeper
// sees the new value or the waker sees the sleeper and calls futex_wake.
struct ThreadPool::Impl {
  ThreadPoolOptions options;
  int n_threads = 1;
  std::vector<std::thread> workers;  // n_threads - 1 of them; the caller is range 0

  // The current job; written by the caller only while no range of any job is outstanding.
  const RangeFn* fn = nullptr;
  int64_t n = 0;
  uint32_t job_id = 0;

  alignas(64) std::atomic<uint64_t> claim{0};
  alignas(64) std::atomic<uint32_t> n_done{0};  // ranges of the current job finished; the caller sleeps on it
  std::atomic<uint32_t> caller_sleeping{0};
  alignas(64) std::atomic<uint32_t> wake_seq{0};  // bumped per job and at shutdown; workers sleep on it
  std::atomic<int> n_sleeping{0};
  std::atomic<bool> stop{false};

  std::mutex error_mu;
  std::exception_ptr first_error;  // the first exception a range threw, rethrown by the caller

  // Claims and runs ranges of the current job until none is left.
  void run_ranges() {
    uint64_t c = claim.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t next = static_cast<uint32_t>(c & 0xffff);
      const uint32_t n_ranges = static_cast<uint32_t>((c >> 16) & 0xffff);
      if (next >= n_ranges) return;
      if (!claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      run_range(static_cast<int>(next), static_cast<int>(n_ranges));
      c = claim.load(std::memory_order_acquire);
    }
  }

  void run_range(int r, int n_ranges) {
    const auto [begin, end] = range_of(n, n_ranges, r);
    try {
      (*fn)(begin, end, r);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!first_error) first_error = std::current_exception();
    }
    if (n_done.fetch_add(1, std::memory_order_seq_cst) + 1 == static_cast<uint32_t>(n_ranges) &&
        caller_sleeping.load(std::memory_order_seq_cst) != 0) {
      futex_wake(n_done, 1);
    }
  }

  // seen: wake_seq when the pool was made. Not read here: a thread that starts late could
  // otherwise miss the bump of a job (harmless: the caller runs its ranges) or of shutdown (a hang).
  void worker_loop(uint32_t seen) {
    for (;;) {
      const auto changed = [&] { return wake_seq.load(std::memory_order_acquire) != seen; };
      if (!spin_until(changed, options.spin_us)) {
        n_sleeping.fetch_add(1, std::memory_order_seq_cst);
        while (wake_seq.load(std::memory_order_seq_cst) == seen) futex_wait(wake_seq, seen);
        n_sleeping.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = wake_seq.load(std::memory_order_acquire);
      if (stop.load(std::memory_order_acquire)) return;
      run_ranges();
    }
  }

  void wake_workers(int n_wanted) {
    wake_seq.fetch_add(1, std::memory_order_seq_cst);
    if (n_sleeping.load(std::memory_order_seq_cst) > 0) futex_wake(wake_seq, n_wanted);
  }

  void wait_all_done(uint32_t n_ranges) {
    const auto all_done = [&] { return n_done.load(std::memory_order_acquire) == n_ranges; };
    if (spin_until(all_done, options.join_spin_us)) return;
    caller_sleeping.store(1, std::memory_order_seq_cst);
    for (;;) {
      const uint32_t d = n_done.load(std::memory_order_seq_cst);
      if (d == n_ranges) break;
      futex_wait(n_done, d);
    }
    caller_sleeping.store(0, std::memory_order_relaxed);
  }
};

ThreadPool::ThreadPool(int n_threads) : ThreadPool(ThreadPoolOptions{.n_threads = n_threads}) {}

ThreadPool::ThreadPool(const ThreadPoolOptions& options) : impl_(new Impl) {
  impl_->options = options;
  impl_->n_threads = std::min(options.n_threads > 0 ? options.n_threads : default_thread_count(), kMaxThreads);
  impl_->workers.reserve(static_cast<size_t>(impl_->n_threads - 1));
  for (int t = 1; t < impl_->n_threads; ++t) {
    impl_->workers.emplace_back([this] { impl_->worker_loop(0); });
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true, std::memory_order_release);
  impl_->wake_seq.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(impl_->wake_seq, INT_MAX);
  for (std::thread& w : impl_->workers) w.join();
  delete impl_;
}

int ThreadPool::n_threads() const { return impl_->n_threads; }

int ThreadPool::n_ranges_for(int64_t n, int64_t cost_per_item) const {
  if (n <= 0) return 0;
  const int64_t max_ranges = std::min<int64_t>(n, impl_->n_threads);
  const int64_t min_cost = std::max<int64_t>(1, impl_->options.min_cost_per_thread);
  const int64_t per_item = std::max<int64_t>(1, cost_per_item);
  // n * per_item / min_cost without overflow.
  const int64_t items_per_range = (min_cost + per_item - 1) / per_item;
  return static_cast<int>(std::clamp<int64_t>(n / items_per_range, 1, max_ranges));
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn) {
  if (n <= 0) return;
  run(n, static_cast<int>(std::min<int64_t>(n, impl_->n_threads)), fn);
}

void ThreadPool::parallel_for(int64_t n, int64_t cost_per_item, const RangeFn& fn) {
  if (n <= 0) return;
  run(n, n_ranges_for(n, cost_per_item), fn);
}

void ThreadPool::run(int64_t n, int n_ranges, const RangeFn& fn) {
  if (n_ranges <= 1) {
    fn(0, n, 0);
    return;
  }
  Impl& s = *impl_;
  s.fn = &fn;
  s.n = n;
  s.first_error = nullptr;
  s.n_done.store(0, std::memory_order_relaxed);
  ++s.job_id;
  // Range 0 is pre-claimed (next = 1): it always runs here, on the caller.
  s.claim.store((static_cast<uint64_t>(s.job_id) << 32) | (static_cast<uint64_t>(n_ranges) << 16) | 1,
                std::memory_order_release);
  s.wake_workers(n_ranges - 1);

  s.run_range(0, n_ranges);
  s.run_ranges();  // ranges no worker has claimed yet
  s.wait_all_done(static_cast<uint32_t>(n_ranges));

  s.fn = nullptr;
  std::exception_ptr error = std::move(s.first_error);
  s.first_error = nullptr;
  if (error) std::rethrow_exception(error);
}

namespace {

bool read_int_file(const std::string& path, int* out) {
  std::ifstream f(path);
  return static_cast<bool>(f >> *out);
}

// Distinct (package, core) pairs among the CPUs this process may run on; 0 when the topology
// cannot be read.
int count_physical_cores_sysfs() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const bool have_affinity = sched_getaffinity(0, sizeof(set), &set) == 0;
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (have_affinity && !CPU_ISSET(cpu, &set)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int core_id = 0;
    int package_id = 0;
    if (!read_int_file(dir + "core_id", &core_id)) {
      if (have_affinity) return 0;  // an allowed CPU without topology: do not guess from sysfs
      break;                        // no affinity mask: CPUs are numbered densely
    }
    if (!read_int_file(dir + "physical_package_id", &package_id)) package_id = 0;
    cores.insert({package_id, core_id});
  }
  return static_cast<int>(cores.size());
}

// Same count from /proc/cpuinfo ("physical id" and "core id" per processor); 0 on failure.
int count_physical_cores_cpuinfo() {
  std::ifstream f("/proc/cpuinfo");
  if (!f) return 0;
  std::set<std::pair<int, int>> cores;
  int package_id = 0;
  int core_id = -1;
  std::string line;
  auto flush = [&] {
    if (core_id >= 0) cores.insert({package_id, core_id});
    package_id = 0;
    core_id = -1;
  };
  while (std::getline(f, line)) {
    if (line.empty()) {
      flush();
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    try {
      if (key == "physical id") package_id = std::stoi(line.substr(colon + 1));
      if (key == "core id") core_id = std::stoi(line.substr(colon + 1));
    } catch (...) {
      return 0;
    }
  }
  flush();
  return static_cast<int>(cores.size());
}

}  // namespace

int ThreadPool::default_thread_count() {
  int n = count_physical_cores_sysfs();
  if (n <= 0) n = count_physical_cores_cpuinfo();
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return n > 0 ? n : 1;
}

}  // namespace leoam
