// Ctrl-C during a long run, as llama.cpp handles it: while a SigintScope lives, the first SIGINT
// only sets a flag that the run polls (interrupted()) to stop early and still print its summary
// and finish its work; a second SIGINT exits at once with kExitInterrupted.
#pragma once

namespace leoam::cli {

class SigintScope {
 public:
  SigintScope();   // installs the handler
  ~SigintScope();  // restores the one before
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;

  // Whether a SIGINT came while a scope was installed. Safe to poll from any thread.
  static bool interrupted();
};

}  // namespace leoam::cli
