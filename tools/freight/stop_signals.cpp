#include "stop_signals.h"

#include <unistd.h>

#include <cstring>

namespace freight::cli {

namespace {
// Only what a signal handler may touch: a lock-free atomic, a sig_atomic_t, and a message
// written once before the handlers are installed.
std::atomic<bool> g_stop{false};
volatile std::sig_atomic_t g_signal = 0;
std::string g_message;
static_assert(std::atomic<bool>::is_always_lock_free);

void write_stderr(const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(true)) {
    static const char again[] = "\nfreight: second interrupt: quitting at once\n";
    write_stderr(again, sizeof again - 1);
    ::_exit(128 + sig);  // (the checkpoint on disk is the last one committed whole)
  }
  g_signal = sig;
  write_stderr(g_message.data(), g_message.size());
}
}  // namespace

StopSignals::StopSignals(const std::string& first_message) {
  g_message = first_message;
  g_stop = false;
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  // Each handler runs with both signals blocked, so a second one waits for the first handler
  // to finish and then finds the flag set. SA_RESTART: reads and writes under way go on.
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

const std::atomic<bool>* StopSignals::flag() const {
  return &g_stop;
}

int StopSignals::signal() const {
  return int(g_signal);
}

}  // namespace freight::cli
