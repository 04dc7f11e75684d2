#include "freight/io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "freight/error.h"
#include "io/atomic_file.h"
#include "io/json_limits.h"

namespace freight::io {

namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// Headers are a few kB for real models; anything near this is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::U8:
      return "U8";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType* t) {
  static const std::pair<const char*, DType> known[] = {{"F32", DType::F32},   {"F64", DType::F64},
                                                        {"BF16", DType::BF16}, {"I32", DType::I32},
                                                        {"I64", DType::I64},   {"U8", DType::U8}};
  for (auto& [name, dt] : known)
    if (s == name) {
      *t = dt;
      return true;
    }
  return false;
}
}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    FREIGHT_CHECK(t.defined(),
                  fmt::format("checkpoint '{}': tensor '{}' is undefined", path, name));
    FREIGHT_CHECK(!header.contains(name) && name != "__metadata__",
                  fmt::format("checkpoint '{}': tensor name '{}' appears twice", path, name));
    Tensor h = t.detach().to(Device::cpu()).contiguous();
    uint64_t bytes = h.nbytes();
    header[name] = {{"dtype", st_dtype(h.dtype())},
                    {"shape", h.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(h);
  }
  std::string text = header.dump();
  // Pad the header with spaces to a multiple of 8 so the data that follows is 8-byte aligned.
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  uint64_t n = text.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));

  // Atomic, through a fresh temporary that is never a planted link (io/atomic_file.h).
  write_file_atomically(
      path,
      [&](const WriteBytes& write) {
        write(len, 8);
        write(text.data(), text.size());
        for (const Tensor& h : host)
          if (h.numel() > 0) write(h.data_ptr(), h.nbytes());
      },
      "checkpoint");
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::error_code ec;
  FREIGHT_CHECK(!fs::is_directory(path, ec),
                fmt::format("checkpoint '{}' is a directory, not a safetensors file", path));
  std::ifstream in(path, std::ios::binary);
  FREIGHT_CHECK(in.good(), fmt::format("cannot open checkpoint '{}': {}", path,
                                       fs::exists(path) ? "unreadable" : "no such file"));
  uint64_t file_size = fs::file_size(path, ec);
  FREIGHT_CHECK(!ec,
                fmt::format("cannot read the size of checkpoint '{}': {}", path, ec.message()));
  FREIGHT_CHECK(file_size >= 8, fmt::format("checkpoint '{}' is truncated: {} bytes, shorter than "
                                            "the 8-byte header length",
                                            path, file_size));
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  FREIGHT_CHECK(n <= kMaxHeaderBytes && n <= file_size - 8,
                fmt::format("checkpoint '{}' declares a {}-byte header but the file holds {} "
                            "bytes: truncated or not a safetensors file",
                            path, n, file_size));
  std::string text(n, '\0');
  in.read(text.data(), std::streamsize(n));
  // The parser is iterative but serialising a value back (the metadata below) recurses once per
  // level, so the nesting is bounded before parsing; real headers are 3 levels deep.
  FREIGHT_CHECK(json_nesting_depth(text) <= kMaxJsonDepth,
                fmt::format("checkpoint '{}': its header is nested more than {} levels deep: "
                            "corrupt or not a safetensors file",
                            path, kMaxJsonDepth));
  json header;
  std::string duplicate;
  try {
    header = parse_json_unique_keys(text, duplicate);
  } catch (const json::exception& e) {
    throw Error(fmt::format("checkpoint '{}': its header is not valid JSON ({})", path, e.what()));
  }
  FREIGHT_CHECK(duplicate.empty(),
                fmt::format("checkpoint '{}': its header names the key {} twice: corrupt "
                            "(which tensor would it be?)",
                            path, duplicate));
  FREIGHT_CHECK(header.is_object(),
                fmt::format("checkpoint '{}': header is not a JSON object", path));
  uint64_t data_size = file_size - 8 - n;

  SafetensorsFile out;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      FREIGHT_CHECK(it->is_object(),
                    fmt::format("checkpoint '{}': __metadata__ is not an object", path));
      for (auto m = it->begin(); m != it->end(); ++m)
        out.metadata[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    const json& e = *it;
    auto bad = [&](const std::string& what) {
      return Error(fmt::format("checkpoint '{}': tensor '{}': {}", path, it.key(), what));
    };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets"))
      throw bad("entry needs dtype, shape and data_offsets");
    Entry en;
    en.name = it.key();
    if (!e["dtype"].is_string() || !parse_st_dtype(e["dtype"].get<std::string>(), &en.dtype))
      throw bad(fmt::format("unsupported dtype {}", e["dtype"].dump()));
    if (!e["shape"].is_array()) throw bad("shape is not a list");
    // Every size comes from the file, so every product below is checked: element count and byte
    // count (the span it must equal is checked against the data section below). nlohmann reads
    // non-negative integers as unsigned; those above 2^63 - 1 are no sizes for a Shape.
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
        throw bad(
            fmt::format("shape {} holds {}, which is not a size", e["shape"].dump(), d.dump()));
      en.shape.push_back(d.get<int64_t>());
    }
    // A zero size makes the tensor empty whatever the others multiply to.
    uint64_t numel = 1, want = 0;
    bool overflow = false;
    if (std::find(en.shape.begin(), en.shape.end(), 0) == en.shape.end()) {
      for (int64_t d : en.shape) overflow |= __builtin_mul_overflow(numel, uint64_t(d), &numel);
      overflow |= __builtin_mul_overflow(numel, uint64_t(dtype_size(en.dtype)), &want);
    }
    if (overflow || want > uint64_t(INT64_MAX))
      throw bad(
          fmt::format("shape {} of {} holds more bytes than a 64-bit size can count: the "
                      "header is corrupt",
                      shape_str(en.shape), dtype_name(en.dtype)));
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw bad("data_offsets is not [begin, end]");
    en.begin = off[0].get<uint64_t>();
    en.end = off[1].get<uint64_t>();
    if (en.begin > en.end || en.end > data_size)
      throw bad(
          fmt::format("data [{}, {}) lies outside the {} bytes of data: the file is "
                      "truncated or corrupt",
                      en.begin, en.end, data_size));
    if (en.end - en.begin != want)
      throw bad(fmt::format("shape {} of {} needs {} bytes but data_offsets span {}",
                            shape_str(en.shape), dtype_name(en.dtype), want, en.end - en.begin));
    entries.push_back(std::move(en));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i)
    FREIGHT_CHECK(entries[i].begin >= entries[i - 1].end,
                  fmt::format("checkpoint '{}': tensors '{}' and '{}' overlap", path,
                              entries[i - 1].name, entries[i].name));
  for (const Entry& en : entries) {
    Tensor t = Tensor::empty(en.shape, en.dtype);
    in.seekg(std::streamoff(8 + n + en.begin));
    in.read(static_cast<char*>(t.data_ptr()), std::streamsize(en.end - en.begin));
    FREIGHT_CHECK(in.good() || en.end == en.begin,
                  fmt::format("checkpoint '{}': reading tensor '{}' failed", path, en.name));
    out.tensors.emplace_back(en.name, t);
  }
  return out;
}

}  // namespace freight::io
