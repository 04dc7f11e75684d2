#include "stop_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <cstring>

#include "freight/runtime.h"

namespace freight::cli {

// SIGINT and SIGTERM are blocked on the main thread and on every thread of the CPU pool for the
// run, and a thread of our own takes them with sigwait. A handler would run on whichever thread
// the kernel picks, on that thread's stack, in the middle of whatever it computes: oneDNN's JIT
// kernels keep data below the stack pointer, and a signal frame written over it corrupted the
// heap (an interrupted run aborted in free() about one time in three). The handler stays
// installed for any thread created before the run that still takes the signals (a loader or an
// MPI progress thread); it only sets the flag, as the watcher does.

namespace {
// Only what a signal handler may touch: a lock-free atomic, a sig_atomic_t, and a message
// written once before the handlers are installed.
std::atomic<bool> g_stop{false};
std::atomic<bool> g_closing{false};
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

// The first signal sets the flag; a second ends the process at once.
void take_signal(int sig) {
  if (g_stop.exchange(true)) {
    static const char again[] = "\nfreight: second interrupt: quitting at once\n";
    write_stderr(again, sizeof again - 1);
    ::_exit(128 + sig);  // (the checkpoint on disk is the last one committed whole)
  }
  g_signal = sig;
  write_stderr(g_message.data(), g_message.size());
}

extern "C" void on_stop_signal(int sig) {
  take_signal(sig);
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void block_on_this_thread() {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}
void unblock_on_this_thread() {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}
}  // namespace

StopSignals::StopSignals(const std::string& first_message) {
  g_message = first_message;
  g_stop = false;
  g_closing = false;
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  // Each handler runs with both signals blocked, so a second one waits for the first handler
  // to finish and then finds the flag set. SA_RESTART: reads and writes under way go on.
  sa.sa_mask = stop_set();
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
  // Threads the pool creates later start with their creator's mask, the main thread's: blocked.
  on_every_cpu_thread(block_on_this_thread);
  watcher_ = std::thread([] {
    const sigset_t set = stop_set();
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (g_closing) return;
      take_signal(sig);
    }
  });
}

StopSignals::~StopSignals() {
  g_closing = true;
  pthread_kill(watcher_.native_handle(), SIGTERM);  // wakes the watcher's sigwait: it returns
  watcher_.join();
  on_every_cpu_thread(unblock_on_this_thread);
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
