// Bytes read from files for the array parsers (NumPy .npy and .npz, CIFAR batches): a file read
// at offsets, and streams that deliver bytes in order (a range of a file here, an inflated zip
// entry in npz.cpp). Nothing here allocates more than the caller asks for.
#pragma once
#include <cstdint>
#include <string>

namespace freight::data {

// An open regular file, read with pread. `what` starts every message ("NumPy file", ...).
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Reads up to n bytes at offset; returns how many were read (fewer only at the end of file).
  uint64_t read_at(uint64_t offset, void* dst, uint64_t n) const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Bytes in order. read() returns fewer than n only when the stream has ended.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual uint64_t read(void* dst, uint64_t n) = 0;
};

// Bytes [begin, end) of a file, with their CRC-32 (zlib's) accumulated as they are read.
class FileRange : public ByteStream {
 public:
  FileRange(const InputFile& file, uint64_t begin, uint64_t end)
      : file_(file), at_(begin), end_(end) {}
  uint64_t read(void* dst, uint64_t n) override;
  uint32_t crc32() const { return crc_; }

 private:
  const InputFile& file_;
  uint64_t at_, end_;
  uint32_t crc_ = 0;
};

// zlib's crc32 over any length (its own length argument is 32 bits).
uint32_t crc32_update(uint32_t crc, const void* data, uint64_t n);

}  // namespace freight::data
