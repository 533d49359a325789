#include "core/thread_pool.h"

#include <sched.h>

#include <condition_variable>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace leoam {

// One parallel_for at a time: the caller publishes a job under the mutex and bumps `generation_`;
// each worker wakes, runs its own range, and the last one to finish wakes the caller. Workers
// never spin: between jobs they sleep on `work_cv_`.
struct ThreadPool::Impl {
  using Fn = std::function<void(int64_t, int64_t, int)>;

  int n_threads = 1;
  std::vector<std::thread> workers;  // n_threads - 1 of them; the caller is thread 0

  std::mutex mu;
  std::condition_variable work_cv;  // workers wait here for a new generation (or stop)
  std::condition_variable done_cv;  // the caller waits here for n_pending == 0
  uint64_t generation = 0;
  bool stop = false;
  const Fn* fn = nullptr;  // valid while a job runs
  int64_t n = 0;
  int n_pending = 0;               // workers that have not finished the current job
  std::exception_ptr first_error;  // the first exception a worker threw, rethrown by the caller

  // Thread `t`'s range [begin, end) of [0, n): sizes differ by at most one.
  static std::pair<int64_t, int64_t> range_of(int64_t n, int n_threads, int t) {
    const int64_t base = n / n_threads;
    const int64_t rem = n % n_threads;
    const int64_t begin = t * base + (t < rem ? t : rem);
    const int64_t end = begin + base + (t < rem ? 1 : 0);
    return {begin, end};
  }

  void worker_loop(int t) {
    uint64_t seen = 0;
    for (;;) {
      const Fn* job;
      int64_t job_n;
      {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        job = fn;
        job_n = n;
      }
      const auto [begin, end] = range_of(job_n, n_threads, t);
      std::exception_ptr error;
      if (begin < end) {
        try {
          (*job)(begin, end, t);
        } catch (...) {
          error = std::current_exception();
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      if (error && !first_error) first_error = error;
      if (--n_pending == 0) done_cv.notify_one();
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  impl_->n_threads = n_threads > 0 ? n_threads : default_thread_count();
  impl_->workers.reserve(static_cast<size_t>(impl_->n_threads - 1));
  for (int t = 1; t < impl_->n_threads; ++t) {
    impl_->workers.emplace_back([this, t] { impl_->worker_loop(t); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->work_cv.notify_all();
  for (std::thread& w : impl_->workers) w.join();
  delete impl_;
}

int ThreadPool::n_threads() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int64_t n,
                              const std::function<void(int64_t begin, int64_t end, int thread)>& fn) {
  if (n <= 0) return;
  const int n_threads = impl_->n_threads;
  if (n_threads == 1) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->fn = &fn;
    impl_->n = n;
    impl_->n_pending = n_threads - 1;
    impl_->first_error = nullptr;
    ++impl_->generation;
  }
  impl_->work_cv.notify_all();

  // The caller does range 0 while the workers do theirs.
  const auto [begin, end] = Impl::range_of(n, n_threads, 0);
  std::exception_ptr error;
  if (begin < end) {
    try {
      fn(begin, end, 0);
    } catch (...) {
      error = std::current_exception();
    }
  }

  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->done_cv.wait(lock, [&] { return impl_->n_pending == 0; });
  impl_->fn = nullptr;
  if (!error) error = impl_->first_error;
  impl_->first_error = nullptr;
  lock.unlock();
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
