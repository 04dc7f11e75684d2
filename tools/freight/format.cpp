// The subcommands' terminal helpers (format.h).
#include "format.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>

namespace freight::cli {

bool stdout_is_tty() {
  return ::isatty(STDOUT_FILENO) == 1;
}

std::string format_duration(double s) {
  if (s < 60) return fmt::format("{:.1f} s", s);
  int64_t t = int64_t(std::lround(s));
  if (t < 3600) return fmt::format("{}:{:02}", t / 60, t % 60);
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

std::string format_count(double n) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (std::fabs(n) >= 1000 && u < 5) n /= 1000, ++u;
  return u == 0 ? fmt::format("{:.0f}", n) : fmt::format("{:.2f}{}", n, units[u]);
}

}  // namespace freight::cli
