// .npz archives: the zip structures NumPy's writer (Python's zipfile) produces, read from the
// end: the end-of-central-directory record (and its ZIP64 form), the central directory (one
// record per entry: name, method, CRC-32, sizes, where its local header is), then an entry's
// local header and its data, stored or deflated. Sizes are taken from the central directory,
// which zipfile writes last and correctly; local headers may carry 0xffffffff placeholders.
#include "freight/data/npz.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "data/byte_stream.h"
#include "data/npy_stream.h"
#include "freight/error.h"

namespace freight::data {

namespace {

constexpr uint32_t kEndSig = 0x06054b50, kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr uint32_t kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;
constexpr uint64_t kEndBytes = 22, kLocator64Bytes = 20, kEnd64Bytes = 56;
constexpr uint64_t kCentralBytes = 46, kLocalBytes = 30, kMaxComment = 65535;
// Deflate turns a 258-byte match into 2 bits at best: no stream inflates more than 1032-fold.
constexpr uint64_t kDeflateMaxRatio = 1032;

uint16_t le16(const uint8_t* p) {
  return uint16_t(p[0] | p[1] << 8);
}
uint32_t le32(const uint8_t* p) {
  return uint32_t(le16(p)) | uint32_t(le16(p + 2)) << 16;
}
uint64_t le64(const uint8_t* p) {
  return uint64_t(le32(p)) | uint64_t(le32(p + 4)) << 32;
}

struct Entry {
  std::string name;  // as stored: "x.npy"
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, local = 0;
};

// The deflated bytes of one entry, inflated as they are read (raw deflate: windowBits -15).
class Inflated : public ByteStream {
 public:
  Inflated(const InputFile& file, uint64_t begin, uint64_t end, uint64_t size,
           const std::string& where)
      : in_(file, begin, end), left_(end - begin), size_(size), where_(where), buf_(1 << 16) {
    FREIGHT_CHECK(inflateInit2(&z_, -15) == Z_OK,
                  fmt::format("{}: zlib could not start inflating", where));
  }
  ~Inflated() override { inflateEnd(&z_); }
  uint32_t crc32() const { return crc_; }
  uint64_t produced() const { return produced_; }

  uint64_t read(void* dst, uint64_t n) override {
    auto* out = static_cast<uint8_t*>(dst);
    uint64_t done = 0;
    while (done < n && !ended_) {
      if (z_.avail_in == 0 && left_ > 0) {
        uint64_t got = in_.read(buf_.data(), std::min<uint64_t>(buf_.size(), left_));
        FREIGHT_CHECK(got > 0, fmt::format("{} is truncated: the file ends inside its "
                                           "compressed data",
                                           where_));
        left_ -= got;
        z_.next_in = buf_.data();
        z_.avail_in = uInt(got);
      }
      uInt room = uInt(std::min<uint64_t>(n - done, uint64_t(1) << 30));
      z_.next_out = out + done;
      z_.avail_out = room;
      int rc = inflate(&z_, Z_NO_FLUSH);
      uint64_t made = room - z_.avail_out;
      crc_ = crc32_update(crc_, out + done, made);
      done += made;
      produced_ += made;
      FREIGHT_CHECK(produced_ <= size_,
                    fmt::format("{} is corrupt: it inflates to more than the {} bytes its zip "
                                "directory records",
                                where_, size_));
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc == Z_BUF_ERROR && z_.avail_in == 0 && left_ == 0) {
        throw Error(
            fmt::format("{} is truncated: its deflate data ends after {} of {} bytes, "
                        "before the end of the stream",
                        where_, produced_, size_));
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw Error(fmt::format("{} is corrupt: inflating it failed after {} bytes ({})", where_,
                                produced_, z_.msg ? z_.msg : zError(rc)));
      }
    }
    return done;
  }

 private:
  FileRange in_;
  uint64_t left_, size_;
  std::string where_;
  z_stream z_{};
  std::vector<uint8_t> buf_;
  uint32_t crc_ = 0;
  uint64_t produced_ = 0;
  bool ended_ = false;
};

std::string method_name(uint16_t m) {
  switch (m) {
    case 1:
      return "shrink";
    case 6:
      return "implode";
    case 9:
      return "deflate64";
    case 12:
      return "bzip2";
    case 14:
      return "LZMA";
    case 93:
      return "Zstandard";
    case 95:
      return "xz";
    case 99:
      return "AES encryption";
    default:
      return "unknown";
  }
}

}  // namespace

struct NpzFile::Impl {
  explicit Impl(const std::string& path) : file(path, "NumPy archive") {}
  InputFile file;
  std::vector<Entry> entries;
  std::vector<std::string> names;
  std::map<std::string, size_t> by_name;  // array name -> entry

  std::string archive() const { return fmt::format("NumPy archive '{}'", file.path()); }
  std::string fail(const std::string& what) const {
    return fmt::format("{} is not a readable zip file: {}", archive(), what);
  }
  void read_directory();
  void add(Entry e);
  uint64_t data_start(const Entry& e, const std::string& where) const;
};

void NpzFile::Impl::read_directory() {
  const uint64_t size = file.size();
  FREIGHT_CHECK(size >= kEndBytes,
                fail(fmt::format("{} bytes, shorter than a zip file's {}-byte end record (np.savez "
                                 "writes zip files; is this a .npy file?)",
                                 size, kEndBytes)));
  // The end record sits in the last 22 bytes, or before a comment of at most 65535 bytes.
  uint64_t tail_len = std::min(size, kEndBytes + kMaxComment);
  std::vector<uint8_t> tail(tail_len);
  FREIGHT_CHECK(file.read_at(size - tail_len, tail.data(), tail_len) == tail_len,
                fail("the file shrank while it was read"));
  int64_t at = -1;
  for (int64_t i = int64_t(tail_len - kEndBytes); i >= 0; --i)
    if (le32(&tail[size_t(i)]) == kEndSig &&
        uint64_t(i) + kEndBytes + le16(&tail[size_t(i) + 20]) <= tail_len) {
      at = i;
      break;
    }
  FREIGHT_CHECK(at >= 0, fail("no end-of-central-directory record (the file is truncated, or not "
                              "a zip file)"));
  const uint8_t* end = &tail[size_t(at)];
  const uint64_t end_pos = size - tail_len + uint64_t(at);
  uint64_t disk = le16(end + 4), cd_disk = le16(end + 6), count = le16(end + 10);
  uint64_t cd_size = le32(end + 12), cd_offset = le32(end + 16);
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // ZIP64: a locator just before the end record points at the 64-bit end record.
    FREIGHT_CHECK(end_pos >= kLocator64Bytes,
                  fail("its end record asks for ZIP64 but there is no ZIP64 locator"));
    uint8_t loc[kLocator64Bytes];
    FREIGHT_CHECK(
        file.read_at(end_pos - kLocator64Bytes, loc, kLocator64Bytes) == kLocator64Bytes &&
            le32(loc) == kLocator64Sig,
        fail("its end record asks for ZIP64 but there is no ZIP64 locator"));
    uint64_t end64_pos = le64(loc + 8);
    FREIGHT_CHECK(le32(loc + 4) == 0 && le32(loc + 16) <= 1,
                  fail("it spans several disks (a split archive)"));
    uint8_t e64[kEnd64Bytes];
    FREIGHT_CHECK(size >= kEnd64Bytes && end64_pos <= size - kEnd64Bytes &&
                      file.read_at(end64_pos, e64, kEnd64Bytes) == kEnd64Bytes &&
                      le32(e64) == kEnd64Sig,
                  fail(fmt::format("its ZIP64 locator points at byte {}, where there is no ZIP64 "
                                   "end record",
                                   end64_pos)));
    disk = le32(e64 + 16);
    cd_disk = le32(e64 + 20);
    count = le64(e64 + 32);
    cd_size = le64(e64 + 40);
    cd_offset = le64(e64 + 48);
  }
  FREIGHT_CHECK(disk == 0 && cd_disk == 0, fail("it spans several disks (a split archive)"));
  FREIGHT_CHECK(cd_offset <= size && cd_size <= size - cd_offset,
                fail(fmt::format("its central directory ({} bytes at byte {}) runs past the end "
                                 "of the {}-byte file; the file is truncated",
                                 cd_size, cd_offset, size)));
  FREIGHT_CHECK(count <= cd_size / kCentralBytes,
                fail(fmt::format("its end record claims {} entries, more than a {}-byte central "
                                 "directory holds",
                                 count, cd_size)));
  std::vector<uint8_t> cd(cd_size);
  FREIGHT_CHECK(file.read_at(cd_offset, cd.data(), cd_size) == cd_size,
                fail("the file shrank while it was read"));
  uint64_t p = 0;
  for (uint64_t k = 0; k < count; ++k) {
    auto bad = [&](const std::string& what) {
      return fail(fmt::format("central directory record {} of {} (at byte {}) {}", k + 1, count,
                              cd_offset + p, what));
    };
    FREIGHT_CHECK(cd_size - p >= kCentralBytes && le32(&cd[p]) == kCentralSig,
                  bad("is missing or has a bad signature"));
    const uint8_t* r = &cd[p];
    Entry e;
    e.flags = le16(r + 8);
    e.method = le16(r + 10);
    e.crc = le32(r + 16);
    e.compressed = le32(r + 20);
    e.size = le32(r + 24);
    uint64_t name_len = le16(r + 28), extra_len = le16(r + 30), comment_len = le16(r + 32);
    uint64_t start_disk = le16(r + 34);
    e.local = le32(r + 42);
    FREIGHT_CHECK(cd_size - p - kCentralBytes >= name_len + extra_len + comment_len,
                  bad("runs past the end of the central directory"));
    e.name.assign(reinterpret_cast<const char*>(r + kCentralBytes), name_len);
    // The ZIP64 extra field holds, in this order, the fields saturated above.
    const uint8_t* x = r + kCentralBytes + name_len;
    for (uint64_t q = 0; q + 4 <= extra_len;) {
      uint16_t id = le16(x + q), len = le16(x + q + 2);
      FREIGHT_CHECK(q + 4 + len <= extra_len, bad("has an extra field that runs past its end"));
      if (id == 0x0001) {
        const uint8_t* f = x + q + 4;
        uint64_t left = len;
        auto take64 = [&](uint64_t& v) {
          if (v != 0xffffffff) return;
          FREIGHT_CHECK(left >= 8, bad("has a ZIP64 field too short for its sizes"));
          v = le64(f);
          f += 8;
          left -= 8;
        };
        take64(e.size);
        take64(e.compressed);
        take64(e.local);
        if (start_disk == 0xffff && left >= 4) start_disk = le32(f);
      }
      q += 4 + len;
    }
    FREIGHT_CHECK(start_disk == 0, bad("starts on another disk (a split archive)"));
    p += kCentralBytes + name_len + extra_len + comment_len;
    add(std::move(e));
  }
}

void NpzFile::Impl::add(Entry e) {
  std::string name = e.name;
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
    name.resize(name.size() - 4);
  FREIGHT_CHECK(by_name.emplace(name, entries.size()).second,
                fmt::format("{} holds the array '{}' twice (entry '{}')", archive(), name, e.name));
  names.push_back(name);
  entries.push_back(std::move(e));
}

uint64_t NpzFile::Impl::data_start(const Entry& e, const std::string& where) const {
  uint8_t h[kLocalBytes];
  FREIGHT_CHECK(e.local <= file.size() && file.read_at(e.local, h, kLocalBytes) == kLocalBytes &&
                    le32(h) == kLocalSig,
                fmt::format("{} is corrupt: there is no local zip header at byte {}, where the "
                            "central directory says it starts",
                            where, e.local));
  uint64_t name_len = le16(h + 26), extra_len = le16(h + 28);
  uint64_t start = e.local + kLocalBytes + name_len + extra_len;
  std::string name(name_len, '\0');
  FREIGHT_CHECK(
      file.read_at(e.local + kLocalBytes, name.data(), name_len) == name_len && name == e.name,
      fmt::format("{} is corrupt: its local header names a different entry", where));
  FREIGHT_CHECK(start <= file.size() && e.compressed <= file.size() - start,
                fmt::format("{} is truncated: its {} bytes of data at byte {} run past the end of "
                            "the {}-byte file",
                            where, e.compressed, start, file.size()));
  return start;
}

NpzFile::NpzFile(const std::string& path) : impl_(std::make_unique<Impl>(path)) {
  impl_->read_directory();
}

NpzFile::~NpzFile() = default;

const std::string& NpzFile::path() const {
  return impl_->file.path();
}

const std::vector<std::string>& NpzFile::names() const {
  return impl_->names;
}

bool NpzFile::contains(const std::string& name) const {
  return impl_->by_name.count(name) > 0;
}

Tensor NpzFile::read(const std::string& name) const {
  const Impl& m = *impl_;
  auto it = m.by_name.find(name);
  if (it == m.by_name.end()) {
    std::string held;
    for (const std::string& n : m.names) held += (held.empty() ? "" : ", ") + n;
    throw Error(fmt::format("{} has no array '{}' (no entry '{}.npy'); it holds {}", m.archive(),
                            name, name, held.empty() ? "no arrays" : held));
  }
  const Entry& e = m.entries[it->second];
  const std::string where = fmt::format("{} entry '{}'", m.archive(), e.name);
  FREIGHT_CHECK(!(e.flags & 1),
                fmt::format("{} is encrypted; Freight reads plain archives", where));
  FREIGHT_CHECK(e.method == 0 || e.method == 8,
                fmt::format("{} is compressed with zip method {} ({}); Freight reads stored (0) "
                            "and deflated (8) entries, what np.savez and np.savez_compressed "
                            "write",
                            where, e.method, method_name(e.method)));
  uint64_t start = m.data_start(e, where);
  uint64_t end = start + e.compressed;
  auto check_crc = [&](uint32_t crc) {
    FREIGHT_CHECK(crc == e.crc, fmt::format("{} is corrupt: its CRC-32 is {:08x} but the zip "
                                            "directory records {:08x}",
                                            where, crc, e.crc));
  };
  if (e.method == 0) {
    FREIGHT_CHECK(e.compressed == e.size,
                  fmt::format("{} is corrupt: it is stored (not compressed) but its zip "
                              "directory records {} bytes stored and {} bytes of data",
                              where, e.compressed, e.size));
    FileRange in(m.file, start, end);
    try {
      Tensor t = read_npy_stream(in, e.size, where);
      check_crc(in.crc32());
      return t;
    } catch (const Error&) {
      // A damaged entry is reported as such rather than as the bad array it seems to hold.
      FileRange again(m.file, start, end);
      std::vector<uint8_t> scratch(1 << 16);
      while (again.read(scratch.data(), scratch.size()) > 0) {
      }
      check_crc(again.crc32());
      throw;
    }
  }
  FREIGHT_CHECK(e.compressed > 0 && e.size / kDeflateMaxRatio <= e.compressed,
                fmt::format("{} is corrupt: its zip directory records {} bytes inflating from {} "
                            "compressed bytes, more than deflate can expand ({}:1)",
                            where, e.size, e.compressed, kDeflateMaxRatio));
  {  // First pass: the stream really holds e.size bytes with the recorded CRC.
    Inflated check(m.file, start, end, e.size, where);
    std::vector<uint8_t> scratch(1 << 16);
    while (check.read(scratch.data(), scratch.size()) > 0) {
    }
    FREIGHT_CHECK(check.produced() == e.size,
                  fmt::format("{} is truncated: it inflates to {} bytes but its zip directory "
                              "records {}",
                              where, check.produced(), e.size));
    check_crc(check.crc32());
  }
  Inflated in(m.file, start, end, e.size, where);
  return read_npy_stream(in, e.size, where);
}

}  // namespace freight::data
