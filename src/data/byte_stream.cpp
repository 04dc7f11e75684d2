#include "data/byte_stream.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "freight/error.h"

namespace freight::data {

InputFile::InputFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  // (Non-blocking: opening a FIFO must not wait for a writer; it is refused below.)
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FREIGHT_CHECK(fd_ >= 0, fmt::format("cannot open {} '{}': {}", what, path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd_);
    throw Error(fmt::format("cannot read the size of {} '{}': {}", what, path, why));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(fmt::format("{} '{}' is not a regular file{}", what, path,
                            S_ISDIR(st.st_mode) ? " (it is a directory)" : ""));
  }
  size_ = uint64_t(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t InputFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < n) {
    size_t chunk = size_t(std::min<uint64_t>(n - done, uint64_t(1) << 30));
    ssize_t got = ::pread(fd_, p + done, chunk, off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    FREIGHT_CHECK(got >= 0, fmt::format("{} '{}': read error at byte {}: {}", what_, path_,
                                        offset + done, std::strerror(errno)));
    if (got == 0) break;
    done += uint64_t(got);
  }
  return done;
}

uint64_t FileRange::read(void* dst, uint64_t n) {
  uint64_t want = at_ < end_ ? std::min(n, end_ - at_) : 0;
  uint64_t got = file_.read_at(at_, dst, want);
  crc_ = crc32_update(crc_, dst, got);
  at_ += got;
  return got;
}

uint32_t crc32_update(uint32_t crc, const void* data, uint64_t n) {
  auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    uInt chunk = uInt(std::min<uint64_t>(n, uint64_t(1) << 30));
    crc = uint32_t(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

}  // namespace freight::data
