// Ctrl-C and SIGTERM for `freight train`: the first sets the flag that train() polls after each
// step (TrainCallbacks::stop), so the run saves a resumable checkpoint and ends; a second ends
// the process at once. The library installs no handlers: the command does, for the run only,
// and takes the signals on a thread of its own (stop_signals.cpp says why).
#pragma once
#include <atomic>
#include <csignal>
#include <string>
#include <thread>

namespace freight::cli {

class StopSignals {
 public:
  // Installs the handlers; `first_message` is written to stderr when the first signal arrives.
  explicit StopSignals(const std::string& first_message);
  ~StopSignals();  // puts the previous handlers back
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  const std::atomic<bool>* flag() const;
  int signal() const;  // the first signal received (0: none)

 private:
  struct sigaction old_int_ {
  }, old_term_{};
  std::thread watcher_;
};

}  // namespace freight::cli
