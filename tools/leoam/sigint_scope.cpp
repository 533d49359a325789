#include "sigint_scope.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "cli_common.h"

namespace leoam::cli {
namespace {

// A signal handler reaches nothing else: the flag is the one piece of global state it needs.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGINT handler needs a lock-free flag");

struct sigaction g_previous {};

extern "C" void on_sigint(int) {
  if (g_interrupted.exchange(true)) ::_exit(kExitInterrupted);
  static constexpr char kNote[] = "\nleoam: interrupted: stopping (Ctrl-C again to quit at once)\n";
  (void)!::write(STDERR_FILENO, kNote, sizeof(kNote) - 1);
}

}  // namespace

SigintScope::SigintScope() {
  g_interrupted = false;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or write the signal lands in carries on
  ::sigaction(SIGINT, &sa, &g_previous);
}

SigintScope::~SigintScope() { ::sigaction(SIGINT, &g_previous, nullptr); }

bool SigintScope::interrupted() { return g_interrupted.load(std::memory_order_relaxed); }

}  // namespace leoam::cli
