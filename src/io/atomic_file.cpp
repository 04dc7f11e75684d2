// Atomic writes through an exclusive, non-following temporary; see atomic_file.h.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>

#include "freight/error.h"

namespace freight::io {

namespace {
namespace fs = std::filesystem;

// 64 random bits as 16 hex digits: the name of a temporary cannot be guessed in advance, so it
// cannot be planted; O_EXCL makes a lucky guess harmless anyway.
std::string random_suffix() {
  std::random_device rd;
  uint64_t r = (uint64_t(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", r);
}

// The pid of a temporary's name `<name>.tmp.<pid>[.<rest>]`, or -1 when `entry` is not one.
long temporary_pid(const std::string& entry, const std::string& prefix) {
  if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) return -1;
  size_t i = prefix.size(), end = entry.find('.', i);
  if (end == std::string::npos) end = entry.size();
  if (end == i || end - i > 9) return -1;  // no digits, or more than any pid_t has
  long pid = 0;
  for (size_t k = i; k < end; ++k) {
    if (entry[k] < '0' || entry[k] > '9') return -1;
    pid = pid * 10 + (entry[k] - '0');
  }
  if (end < entry.size() && end + 1 == entry.size()) return -1;  // "<pid>." with nothing after
  return pid;
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

size_t remove_stale_temporaries(const std::string& path) {
  fs::path target(path);
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp.";
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    long pid = temporary_pid(name, prefix);
    // pid 0 and negative pids address process groups in kill(): never ask about them.
    if (pid <= 0 || pid == long(::getpid())) continue;
    // ESRCH: no such process. EPERM means it exists under another user: alive, keep it.
    // (A pid is only meaningful on this machine and in this pid namespace; a directory shared
    // with another host could see a live writer as dead, whose rename then fails cleanly.)
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code st_ec;
    fs::file_status st = fs::symlink_status(it->path(), st_ec);
    if (st_ec || !(fs::is_regular_file(st) || fs::is_symlink(st))) continue;
    // unlink removes a link itself, never what it points to.
    if (::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

namespace {
void check_regular_or_absent(const fs::path& target, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);  // through a link: where it points
  if (ec || !fs::exists(st) || fs::is_regular_file(st)) return;
  if (fs::is_directory(st))
    throw Error(
        fmt::format("cannot write {} '{}': it is a directory; give the path of a file in "
                    "it (such as '{}')",
                    what, target.string(), (target / "model.safetensors").string()));
  const char* kind = fs::is_character_file(st) || fs::is_block_file(st) ? "a device"
                     : fs::is_fifo(st)                                  ? "a pipe"
                     : fs::is_socket(st)                                ? "a socket"
                                                                        : "not a regular file";
  throw Error(
      fmt::format("cannot write {} '{}': it is {}, which the write would replace; give "
                  "the path of a file",
                  what, target.string(), kind));
}
}  // namespace

void prepare_target(const std::string& path, const std::string& what) {
  const fs::path target(path);
  check_regular_or_absent(target, what);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    FREIGHT_CHECK(!ec, fmt::format("cannot write {} '{}': creating its directory '{}' failed: {}",
                                   what, path, target.parent_path().string(), ec.message()));
  }
  // The write creates a temporary beside the target: one is created and removed now, so that a
  // directory where no file can be made (read-only, or /proc) fails before the work, not after.
  fs::path probe = target;
  probe += fmt::format(".tmp.{}.{}", ::getpid(), random_suffix());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  FREIGHT_CHECK(fd >= 0,
                fmt::format("cannot write {} '{}': creating a file in '{}' failed: {}", what, path,
                            target.has_parent_path() ? target.parent_path().string() : ".",
                            std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

void write_file_atomically(const std::string& path,
                           const std::function<void(const WriteBytes&)>& produce,
                           const std::string& what) {
  check_regular_or_absent(fs::path(path), what);
  remove_stale_temporaries(path);
  fs::path target(path);
  fs::path tmp;
  int fd = -1;
  // A name taken (by a planted file or link, or a 1-in-2^64 collision) is skipped, never opened.
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = target;
    tmp += fmt::format(".tmp.{}.{}", ::getpid(), random_suffix());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  FREIGHT_CHECK(fd >= 0, fmt::format("cannot write {} '{}': creating the temporary '{}' failed: {}",
                                     what, path, tmp.string(), std::strerror(errno)));
  auto write_bytes = [&](const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      FREIGHT_CHECK(w > 0,
                    fmt::format("writing {} '{}' failed: {}", what, path, std::strerror(errno)));
      p += w;
      n -= size_t(w);
    }
  };
  try {
    produce(write_bytes);
    FREIGHT_CHECK(::fsync(fd) == 0,
                  fmt::format("fsync of {} '{}' failed: {}", what, path, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 && errno != EINTR) {  // a delayed write error (NFS, full disk)
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("writing {} '{}' failed: {}", what, path, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(
        fmt::format("cannot move {} into place at '{}': {}", what, path, std::strerror(err)));
  }
  fsync_dir(target.parent_path());
}

void write_file_atomically(const std::string& path, std::string_view bytes,
                           const std::string& what) {
  write_file_atomically(
      path, [&](const WriteBytes& write) { write(bytes.data(), bytes.size()); }, what);
}

}  // namespace freight::io
