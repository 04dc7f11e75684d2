// NumPy .npy files: the preamble, the header's dict literal and the data (include/freight/data/
// npy.h has the layout). The header is parsed by hand: a dict of three keys whose values are a
// string, True/False and a tuple of integers, which is all np.save writes.
#include "freight/data/npy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "data/npy_stream.h"
#include "freight/error.h"

namespace freight::data {

namespace {

// Far above what NumPy writes (a few hundred bytes, padded to 64); a longer header is corrupt.
constexpr uint64_t kMaxHeaderBytes = uint64_t(1) << 20;
// NumPy's own limit on dimensions (NPY_MAXDIMS) is 32 (64 since NumPy 2).
constexpr size_t kMaxDims = 64;

// A value of the header dict.
struct Value {
  enum Kind { String, Bool, Tuple } kind;
  std::string text;
  bool flag = false;
  Shape dims;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  std::map<std::string, Value> dict() {
    std::map<std::string, Value> out;
    skip_space();
    expect('{');
    skip_space();
    while (!peek('}')) {
      std::string key = string_literal();
      skip_space();
      expect(':');
      skip_space();
      Value v = value(key);
      FREIGHT_CHECK(out.emplace(key, std::move(v)).second,
                    fail(fmt::format("the key '{}' appears twice", key)));
      skip_space();
      if (!peek('}')) {
        expect(',');
        skip_space();
      }
    }
    ++i_;
    skip_space();
    FREIGHT_CHECK(i_ == s_.size(), fail("there is text after the closing '}'"));
    return out;
  }

 private:
  std::string fail(const std::string& what) const {
    return fmt::format("{} has a bad header: {} (at character {} of the header {})", where_, what,
                       i_, excerpt());
  }
  std::string excerpt() const {
    std::string e = s_.substr(0, s_.find_last_not_of(" \n") + 1);  // without the padding
    bool cut = e.size() > 120;
    e.resize(std::min<size_t>(e.size(), 120));
    for (char& c : e)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
    return "\"" + e + (cut ? "...\"" : "\"");
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void expect(char c) {
    FREIGHT_CHECK(peek(c), fail(fmt::format("expected '{}'", c)));
    ++i_;
  }
  std::string string_literal() {
    FREIGHT_CHECK(peek('\'') || peek('"'), fail("expected a quoted string"));
    char q = s_[i_++];
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) {
      FREIGHT_CHECK(s_[i_] != '\\', fail("escapes in strings are not supported"));
      ++i_;
    }
    FREIGHT_CHECK(i_ < s_.size(), fail("a string is not closed"));
    return s_.substr(start, i_++ - start);
  }
  bool word(const char* w) {
    size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    i_ += n;
    return true;
  }
  Value value(const std::string& key) {
    Value v{};
    if (peek('\'') || peek('"')) {
      v.kind = Value::String;
      v.text = string_literal();
    } else if (word("True")) {
      v.kind = Value::Bool;
      v.flag = true;
    } else if (word("False")) {
      v.kind = Value::Bool;
    } else if (peek('(')) {
      v.kind = Value::Tuple;
      ++i_;
      skip_space();
      while (!peek(')')) {
        v.dims.push_back(integer());
        FREIGHT_CHECK(v.dims.size() <= kMaxDims,
                      fail(fmt::format("the shape has more than {} dimensions", kMaxDims)));
        skip_space();
        if (!peek(')')) {
          expect(',');
          skip_space();
        }
      }
      ++i_;
    } else if (peek('[')) {
      throw Error(fail(key == "descr" ? std::string("'descr' is a list: structured (record) "
                                                    "arrays are not supported; save a plain "
                                                    "array of numbers")
                                      : fmt::format("'{}' is a list, not a tuple", key)));
    } else {
      throw Error(
          fail(fmt::format("the value of '{}' is not a string, True/False or a tuple", key)));
    }
    return v;
  }
  int64_t integer() {
    FREIGHT_CHECK(i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9',
                  fail("expected a non-negative integer in the shape"));
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      bool overflow = __builtin_mul_overflow(v, uint64_t(10), &v) ||
                      __builtin_add_overflow(v, uint64_t(s_[i_] - '0'), &v);
      FREIGHT_CHECK(!overflow && v <= uint64_t(INT64_MAX), fail("a dimension is too large"));
      ++i_;
    }
    if (peek('L')) ++i_;  // Python 2's long integers: (3L, 4L)
    return int64_t(v);
  }

  const std::string& s_;
  const std::string& where_;
  size_t i_ = 0;
};

// The dtype of a descr such as "<f4": little-endian (or byte-sized) numbers Freight reads.
DType parse_descr(const std::string& descr, const std::string& where) {
  const char* supported = "uint8, int32, int64, float32 and float64";
  FREIGHT_CHECK(descr.size() >= 2, fmt::format("{} has an unknown dtype '{}'; Freight reads {}",
                                               where, descr, supported));
  char order = descr[0];
  std::string code = descr.substr(1);
  static const std::map<std::string, DType> known = {{"u1", DType::U8},
                                                     {"i4", DType::I32},
                                                     {"i8", DType::I64},
                                                     {"f4", DType::F32},
                                                     {"f8", DType::F64}};
  auto it = known.find(code);
  FREIGHT_CHECK(
      order == '<' || order == '>' || order == '|' || order == '=',
      fmt::format("{} has an unknown dtype '{}'; Freight reads {}", where, descr, supported));
  FREIGHT_CHECK(it != known.end(),
                fmt::format("{} has dtype '{}', which Freight does not read; convert it to one "
                            "of {} (features: x.astype(np.float32); class labels: "
                            "y.astype(np.int64))",
                            where, descr, supported));
  FREIGHT_CHECK(order != '>' || code == "u1",
                fmt::format("{} is big-endian (dtype '{}'); Freight reads little-endian arrays "
                            "only: save a.astype('<{}')",
                            where, descr, code));
  return it->second;
}

}  // namespace

NpyHeader parse_npy_header(const std::string& text, const std::string& where) {
  std::map<std::string, Value> d = HeaderParser(text, where).dict();
  for (const auto& [key, v] : d)
    FREIGHT_CHECK(key == "descr" || key == "fortran_order" || key == "shape",
                  fmt::format("{} has a bad header: unknown key '{}' (a .npy header has "
                              "'descr', 'fortran_order' and 'shape')",
                              where, key));
  for (const char* key : {"descr", "fortran_order", "shape"})
    FREIGHT_CHECK(d.count(key), fmt::format("{} has a bad header: the key '{}' is missing (a "
                                            ".npy header has 'descr', 'fortran_order' and 'shape')",
                                            where, key));
  const Value& descr = d["descr"];
  const Value& order = d["fortran_order"];
  const Value& shape = d["shape"];
  FREIGHT_CHECK(descr.kind == Value::String,
                fmt::format("{} has a bad header: 'descr' is not a string", where));
  FREIGHT_CHECK(order.kind == Value::Bool,
                fmt::format("{} has a bad header: 'fortran_order' is not True or False", where));
  FREIGHT_CHECK(shape.kind == Value::Tuple,
                fmt::format("{} has a bad header: 'shape' is not a tuple", where));
  NpyHeader h;
  h.descr = descr.text;
  h.dtype = parse_descr(descr.text, where);
  h.shape = shape.dims;
  FREIGHT_CHECK(!order.flag,
                fmt::format("{} (shape {}) is stored in Fortran order; Freight reads C order "
                            "only: save np.ascontiguousarray(a)",
                            where, shape_str(h.shape)));
  // Counted with zero dimensions as ones too: a tensor's strides must fit in 64 bits even when
  // it is empty.
  int64_t bytes = int64_t(dtype_size(h.dtype)), span = bytes;
  for (int64_t n : h.shape)
    FREIGHT_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(n, 1), &span) &&
                      !__builtin_mul_overflow(bytes, n, &bytes),
                  fmt::format("{}: the shape {} of '{}' in its header needs more than 2^63 bytes; "
                              "the header is corrupt",
                              where, shape_str(h.shape), h.descr));
  h.data_bytes = uint64_t(bytes);
  return h;
}

Tensor read_npy_stream(ByteStream& in, uint64_t total, const std::string& where) {
  uint8_t pre[12];
  uint64_t got = in.read(pre, 10);
  FREIGHT_CHECK(got >= 6 && std::memcmp(pre, "\x93NUMPY", 6) == 0,
                fmt::format("{} is not a .npy array: it does not start with the magic "
                            "\\x93NUMPY ({} bytes{}{})",
                            where, total, got ? ", starting " : "", [&] {
                              std::string h;
                              for (uint64_t i = 0; i < std::min<uint64_t>(got, 6); ++i)
                                h += fmt::format("{}{:02x}", i ? " " : "", pre[i]);
                              return h;
                            }()));
  FREIGHT_CHECK(got == 10, fmt::format("{} is truncated: {} bytes, shorter than the 10-byte .npy "
                                       "preamble",
                                       where, total));
  int major = pre[6], minor = pre[7];
  FREIGHT_CHECK((major == 1 || major == 2 || major == 3) && minor == 0,
                fmt::format("{} is .npy version {}.{}; Freight reads versions 1.0, 2.0 and 3.0",
                            where, major, minor));
  uint64_t prefix = 10, header_len = uint64_t(pre[8]) | uint64_t(pre[9]) << 8;
  if (major > 1) {
    FREIGHT_CHECK(in.read(pre + 10, 2) == 2,
                  fmt::format("{} is truncated: {} bytes, shorter than the 12-byte .npy {}.0 "
                              "preamble",
                              where, total, major));
    prefix = 12;
    header_len |= uint64_t(pre[10]) << 16 | uint64_t(pre[11]) << 24;
  }
  FREIGHT_CHECK(header_len <= total - prefix,
                fmt::format("{} is truncated: its preamble announces a {}-byte header but only {} "
                            "bytes follow",
                            where, header_len, total - prefix));
  FREIGHT_CHECK(header_len <= kMaxHeaderBytes,
                fmt::format("{} announces a {}-byte header (NumPy writes a few hundred bytes; at "
                            "most {} are read): the file is corrupt",
                            where, header_len, kMaxHeaderBytes));
  std::string text(header_len, '\0');
  FREIGHT_CHECK(in.read(text.data(), header_len) == header_len,
                fmt::format("{} is truncated inside its {}-byte header", where, header_len));
  NpyHeader h = parse_npy_header(text, where);
  uint64_t follows = total - prefix - header_len;
  auto describes = [&] {
    return fmt::format("its header describes shape {} of '{}' ({} bytes of data)",
                       shape_str(h.shape), h.descr, h.data_bytes);
  };
  FREIGHT_CHECK(h.data_bytes <= follows,
                fmt::format("{} is truncated: {} but {} bytes follow the header", where,
                            describes(), follows));
  FREIGHT_CHECK(h.data_bytes == follows,
                fmt::format("{} has {} bytes after its data: {}; the header or the file is wrong",
                            where, follows - h.data_bytes, describes()));
  Tensor t = Tensor::empty(h.shape, h.dtype);
  uint64_t read = h.data_bytes ? in.read(t.data_ptr(), h.data_bytes) : 0;
  FREIGHT_CHECK(read == h.data_bytes, fmt::format("{} is truncated: {} but only {} could be read",
                                                  where, describes(), read));
  return t;
}

Tensor read_npy(const std::string& path) {
  InputFile file(path, "NumPy file");
  FileRange all(file, 0, file.size());
  return read_npy_stream(all, file.size(), fmt::format("NumPy file '{}'", path));
}

}  // namespace freight::data
