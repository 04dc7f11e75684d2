// IDX files (the MNIST layout) through zlib, which reads gzip and plain files alike.
//   bytes 0-1: 0x00 0x00   byte 2: element type (0x08 = unsigned byte)   byte 3: rank
//   then rank big-endian uint32 dimensions, then the elements in row-major order.
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "freight/data/dataset.h"
#include "freight/error.h"

namespace freight::data {

namespace {
// Anything larger is not an MNIST-family file, and most likely a corrupt header.
constexpr uint64_t kMaxIdxBytes = uint64_t(4) << 30;

struct GzCloser {
  void operator()(gzFile f) const {
    if (f) gzclose(f);
  }
};

// Reads exactly n bytes or reports how many were available.
int64_t read_bytes(gzFile f, void* dst, uint64_t n, const std::string& path) {
  uint64_t done = 0;
  auto* p = static_cast<uint8_t*>(dst);
  while (done < n) {
    unsigned chunk = unsigned(std::min<uint64_t>(n - done, 1u << 30));
    int got = gzread(f, p + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw Error(fmt::format("IDX file '{}': read error ({}); the file is corrupt or not gzip",
                              path, msg ? msg : "unknown"));
    }
    if (got == 0) break;
    done += uint64_t(got);
  }
  return int64_t(done);
}
}  // namespace

IdxArray read_idx(const std::string& path) {
  FREIGHT_CHECK(std::filesystem::is_regular_file(path),
                fmt::format("IDX file '{}' does not exist or is not a regular file", path));
  std::error_code ec;
  uint64_t file_size = std::filesystem::file_size(path, ec);
  FREIGHT_CHECK(!ec, fmt::format("cannot read the size of IDX file '{}': {}", path, ec.message()));
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  FREIGHT_CHECK(f != nullptr,
                fmt::format("cannot open IDX file '{}': {}", path, std::strerror(errno)));
  uint8_t head[4];
  int64_t got = read_bytes(f.get(), head, 4, path);
  FREIGHT_CHECK(got == 4, fmt::format("IDX file '{}' is truncated: {} bytes, shorter than the "
                                      "4-byte magic number",
                                      path, got));
  FREIGHT_CHECK(head[0] == 0 && head[1] == 0,
                fmt::format("IDX file '{}' has a bad magic number {:02x} {:02x} {:02x} {:02x} "
                            "(expected 00 00 <type> <rank>): not an IDX file",
                            path, head[0], head[1], head[2], head[3]));
  FREIGHT_CHECK(head[2] == 0x08,
                fmt::format("IDX file '{}' has element type 0x{:02x}; only unsigned bytes (0x08) "
                            "are supported",
                            path, head[2]));
  int rank = head[3];
  FREIGHT_CHECK(rank >= 1 && rank <= 4,
                fmt::format("IDX file '{}' declares rank {} (expected 1 to 4)", path, rank));
  IdxArray a;
  uint64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    uint8_t b[4];
    got = read_bytes(f.get(), b, 4, path);
    FREIGHT_CHECK(got == 4, fmt::format("IDX file '{}' is truncated inside its header "
                                        "(dimension {} of {})",
                                        path, d + 1, rank));
    uint64_t n = (uint64_t(b[0]) << 24) | (uint64_t(b[1]) << 16) | (uint64_t(b[2]) << 8) | b[3];
    FREIGHT_CHECK(n > 0, fmt::format("IDX file '{}': dimension {} is 0", path, d + 1));
    bool overflow = __builtin_mul_overflow(total, n, &total);
    FREIGHT_CHECK(
        !overflow && total <= kMaxIdxBytes,
        fmt::format("IDX file '{}': its header claims more than {} GiB of data "
                    "(dimensions so far multiply to {}); the header is corrupt",
                    path, kMaxIdxBytes >> 30, overflow ? "more than 2^64" : std::to_string(total)));
    a.dims.push_back(int64_t(n));
  }
  const uint64_t header_bytes = 4 + 4 * uint64_t(rank);
  // What the header claims is checked against what the file can hold before anything is
  // allocated. A plain file's size is exact. Behind gzip only a bound is known up front: deflate
  // codes a 258-byte match in 2 bits at best, so a stream expands at most 1032:1, and the file
  // (gzip header and trailer included) is longer than its deflate data. The gzip trailer's ISIZE
  // is not used: it is the size mod 2^32 and as easy to forge as the header.
  auto claim = [&] {
    return fmt::format("its header claims {} ({} bytes of data)", shape_str(a.dims), total);
  };
  // gzdirect() tells, once zlib has looked at the first bytes, whether the file is plain.
  const bool plain = gzdirect(f.get()) == 1;
  if (plain) {
    uint64_t holds = file_size - std::min(file_size, header_bytes);
    FREIGHT_CHECK(holds >= total,
                  fmt::format("IDX file '{}' is truncated: {} but the file holds {} bytes after "
                              "its {}-byte header",
                              path, claim(), holds, header_bytes));
    FREIGHT_CHECK(holds == total,
                  fmt::format("IDX file '{}' has bytes after the {} its header {} promises; the "
                              "counts are wrong",
                              path, total, shape_str(a.dims)));
    a.data.resize(total);
    got = read_bytes(f.get(), a.data.data(), total, path);
    FREIGHT_CHECK(uint64_t(got) == total,
                  fmt::format("IDX file '{}' is truncated: {} but only {} could be read", path,
                              claim(), got));
    return a;
  }
  constexpr uint64_t kDeflateMaxRatio = 1032;
  uint64_t at_most =
      file_size > UINT64_MAX / kDeflateMaxRatio ? UINT64_MAX : file_size * kDeflateMaxRatio;
  FREIGHT_CHECK(header_bytes + total <= at_most,
                fmt::format("IDX file '{}' cannot hold what {}: it is {} bytes of gzip, which "
                            "decompress to at most {} bytes (deflate expands at most {}:1); the "
                            "file is truncated or its header corrupt",
                            path, claim(), file_size, at_most, kDeflateMaxRatio));
  // Within that bound the buffer still grows only as decompressed data arrives (at most twice
  // what arrived, and exactly `total` at the end), so a stream that stops early costs memory in
  // proportion to what it held, not to what its header claimed.
  constexpr uint64_t kChunk = uint64_t(16) << 20;
  uint64_t done = 0;
  while (done < total) {
    uint64_t want = std::min(total - done, kChunk);
    if (a.data.capacity() < done + want)
      a.data.reserve(std::min(total, std::max<uint64_t>(2 * a.data.capacity(), done + want)));
    a.data.resize(done + want);
    got = read_bytes(f.get(), a.data.data() + done, want, path);
    done += uint64_t(got);
    if (uint64_t(got) < want) break;
  }
  FREIGHT_CHECK(done == total,
                fmt::format("IDX file '{}' is truncated: {} but the decompressed stream holds {} "
                            "bytes after its {}-byte header",
                            path, claim(), done, header_bytes));
  uint8_t extra;
  FREIGHT_CHECK(read_bytes(f.get(), &extra, 1, path) == 0,
                fmt::format("IDX file '{}' has bytes after the {} its header {} promises; the "
                            "counts are wrong",
                            path, total, shape_str(a.dims)));
  return a;
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path,
                 int64_t num_classes, const std::string& name) {
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  FREIGHT_CHECK(images.dims.size() == 3,
                fmt::format("IDX images file '{}' has shape {}; expected [N, height, width]",
                            images_path, shape_str(images.dims)));
  FREIGHT_CHECK(labels.dims.size() == 1,
                fmt::format("IDX labels file '{}' has shape {}; expected [N]", labels_path,
                            shape_str(labels.dims)));
  FREIGHT_CHECK(images.dims[0] == labels.dims[0],
                fmt::format("IDX files disagree on the number of samples: '{}' holds {} images, "
                            "'{}' holds {} labels",
                            images_path, images.dims[0], labels_path, labels.dims[0]));
  Dataset ds;
  ds.name = name.empty() ? images_path : name;
  ds.num_classes = num_classes;
  ds.inputs = Tensor::empty(images.dims, DType::U8);
  std::memcpy(ds.inputs.data_ptr(), images.data.data(), images.data.size());
  std::vector<int64_t> lab(labels.data.size());
  for (size_t i = 0; i < lab.size(); ++i) {
    FREIGHT_CHECK(labels.data[i] < num_classes,
                  fmt::format("IDX labels file '{}': label {} at index {} is out of range for {} "
                              "classes",
                              labels_path, int(labels.data[i]), i, num_classes));
    lab[i] = labels.data[i];
  }
  ds.labels = Tensor::from_vector(lab, {int64_t(lab.size())});
  return ds;
}

Dataset load_mnist_layout(const std::string& dir, const std::string& split, const std::string& name,
                          int64_t num_classes) {
  FREIGHT_CHECK(split == "train" || split == "test",
                fmt::format("dataset split '{}' is not train or test", split));
  std::string prefix = split == "train" ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    std::filesystem::path p = std::filesystem::path(dir) / stem;
    if (std::filesystem::exists(p)) return p.string();
    if (std::filesystem::exists(p.string() + ".gz")) return p.string() + ".gz";
    throw Error(fmt::format("dataset '{}': neither {} nor {}.gz exists{}", name, p.string(),
                            p.string(),
                            std::filesystem::is_directory(dir)
                                ? std::string()
                                : fmt::format(" (directory '{}' is missing: see the README's "
                                              "data section)",
                                              dir)));
  };
  return load_idx(find(prefix + "-images-idx3-ubyte"), find(prefix + "-labels-idx1-ubyte"),
                  num_classes, name + "/" + split);
}

}  // namespace freight::data
