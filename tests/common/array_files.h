// Writers of the array formats Freight reads, for tests that make their own files: NumPy .npy
// bytes, zip archives (.npz) with stored or deflated entries (raw deflate through zlib), ZIP64
// directories on request, and CIFAR batch files. Plain code written from the format
// descriptions, kept apart from the readers under test.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace freight::test {

inline void put16(std::string& s, uint32_t v) {
  s += char(v & 0xff);
  s += char((v >> 8) & 0xff);
}
inline void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}
inline void put64(std::string& s, uint64_t v) {
  put32(s, uint32_t(v));
  put32(s, uint32_t(v >> 32));
}

// The header dict as np.save writes it for `descr` and `shape`.
inline std::string npy_dict(const std::string& descr, const std::vector<int64_t>& shape,
                            bool fortran = false) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': (" + dims + "), }";
}

// A whole .npy file: preamble of version `major`.0, the dict padded with spaces and a newline
// to a multiple of 64 bytes (as NumPy pads), then `data`.
inline std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
  size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string s = "\x93NUMPY";
  s += char(major);
  s += char(0);
  if (major == 1)
    put16(s, uint32_t(header.size()));
  else
    put32(s, uint32_t(header.size()));
  return s + header + data;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <class T>
std::string npy_of(const std::string& descr, const std::vector<int64_t>& shape,
                   const std::vector<T>& values, int major = 1) {
  return npy_file(npy_dict(descr, shape), bytes_of(values), major);
}

// Raw deflate (no zlib or gzip wrapper), what a zip entry of method 8 holds.
inline std::string raw_deflate(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, uLong(in.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct ZipEntry {
  std::string name, data;  // data uncompressed
  bool deflate = false;
};

// A zip archive: local headers and data, the central directory, the end record. With `zip64`
// every size and offset in the central directory goes into a ZIP64 extra field (0xffffffff in
// the record) and the end record is the ZIP64 one, with its locator and a saturated classic one.
inline std::string zip_file(const std::vector<ZipEntry>& entries, bool zip64 = false) {
  std::string out, cd;
  for (const ZipEntry& e : entries) {
    std::string body = e.deflate ? raw_deflate(e.data) : e.data;
    uint32_t crc =
        uint32_t(crc32(0, reinterpret_cast<const Bytef*>(e.data.data()), uInt(e.data.size())));
    uint64_t offset = out.size();
    put32(out, 0x04034b50);
    put16(out, 20);
    put16(out, 0);
    put16(out, e.deflate ? 8 : 0);
    put32(out, 0);  // time, date
    put32(out, crc);
    put32(out, uint32_t(body.size()));
    put32(out, uint32_t(e.data.size()));
    put16(out, uint32_t(e.name.size()));
    put16(out, 0);
    out += e.name + body;
    put32(cd, 0x02014b50);
    put16(cd, 45);
    put16(cd, zip64 ? 45 : 20);
    put16(cd, 0);
    put16(cd, e.deflate ? 8 : 0);
    put32(cd, 0);
    put32(cd, crc);
    put32(cd, zip64 ? 0xffffffff : uint32_t(body.size()));
    put32(cd, zip64 ? 0xffffffff : uint32_t(e.data.size()));
    put16(cd, uint32_t(e.name.size()));
    put16(cd, zip64 ? 28 : 0);
    put16(cd, 0);  // comment
    put16(cd, 0);  // disk
    put16(cd, 0);
    put32(cd, 0);
    put32(cd, zip64 ? 0xffffffff : uint32_t(offset));
    cd += e.name;
    if (zip64) {
      put16(cd, 1);
      put16(cd, 24);
      put64(cd, e.data.size());
      put64(cd, body.size());
      put64(cd, offset);
    }
  }
  uint64_t cd_offset = out.size();
  out += cd;
  if (zip64) {
    uint64_t end64 = out.size();
    put32(out, 0x06064b50);
    put64(out, 44);
    put16(out, 45);
    put16(out, 45);
    put32(out, 0);
    put32(out, 0);
    put64(out, entries.size());
    put64(out, entries.size());
    put64(out, cd.size());
    put64(out, cd_offset);
    put32(out, 0x07064b50);
    put32(out, 0);
    put64(out, end64);
    put32(out, 1);
  }
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, zip64 ? 0xffff : uint32_t(entries.size()));
  put16(out, zip64 ? 0xffff : uint32_t(entries.size()));
  put32(out, zip64 ? 0xffffffff : uint32_t(cd.size()));
  put32(out, zip64 ? 0xffffffff : uint32_t(cd_offset));
  put16(out, 0);
  return out;
}

// One CIFAR record per label: CIFAR-10 (classes 10) label byte, or CIFAR-100 coarse and fine
// bytes, then 3072 pixels: pixel p of record r is (r * 31 + p * 7) mod 256.
inline std::string cifar_records(const std::vector<int>& labels, int classes, int first = 0) {
  std::string s;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (classes == 100) s += char(labels[i] / 5);  // a coarse label in [0, 20)
    s += char(labels[i]);
    for (int p = 0; p < 3072; ++p) s += char(((first + int(i)) * 31 + p * 7) % 256);
  }
  return s;
}

inline std::string write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

}  // namespace freight::test
