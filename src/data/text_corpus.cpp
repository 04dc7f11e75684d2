// Text corpora in the Penn Treebank layout (freight/data/text_corpus.h): reading, the vocabulary,
// and cutting the token stream into next-token samples.
#include "freight/data/text_corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "freight/error.h"

namespace freight::data {

namespace {
namespace fs = std::filesystem;

constexpr uint64_t kMaxCorpusBytes = uint64_t(2) << 30;
constexpr std::string_view kEos = "<eos>", kUnk = "<unk>";
constexpr const char* kLayout =
    "a text corpus is a directory of train.txt, valid.txt and test.txt (the Penn Treebank "
    "layout): whitespace-separated words, one sentence per line";

bool space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

std::string thousands(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}
}  // namespace

CorpusFile read_corpus_file(const std::string& path) {
  std::error_code ec;
  FREIGHT_CHECK(fs::is_regular_file(path, ec),
                fmt::format("corpus file '{}' does not exist or is not a regular file", path));
  uint64_t size = fs::file_size(path, ec);
  FREIGHT_CHECK(!ec, fmt::format("corpus file '{}': cannot read its size: {}", path, ec.message()));
  FREIGHT_CHECK(size <= kMaxCorpusBytes,
                fmt::format("corpus file '{}' is {} bytes, more than the {} GiB Freight reads",
                            path, size, kMaxCorpusBytes >> 30));
  CorpusFile c;
  c.path = path;
  c.text.resize(size);
  std::ifstream f(path, std::ios::binary);
  FREIGHT_CHECK(f.good(), fmt::format("corpus file '{}': cannot open it", path));
  f.read(c.text.data(), std::streamsize(size));
  FREIGHT_CHECK(uint64_t(f.gcount()) == size,
                fmt::format("corpus file '{}': read {} of its {} bytes", path, f.gcount(), size));
  FREIGHT_CHECK(size > 0, fmt::format("corpus file '{}' is empty (0 bytes); {}", path, kLayout));
  if (const void* nul = std::memchr(c.text.data(), 0, size))
    throw Error(fmt::format("corpus file '{}' is not text: it holds a NUL byte at offset {}", path,
                            static_cast<const char*>(nul) - c.text.data()));
  int64_t words = 0;
  const char* p = c.text.data();
  const char* end = p + size;
  while (p < end) {  // one line
    const char* eol = static_cast<const char*>(std::memchr(p, '\n', size_t(end - p)));
    if (!eol) eol = end;
    for (const char* q = p; q < eol;) {
      while (q < eol && space(*q)) ++q;
      const char* w = q;
      while (q < eol && !space(*q)) ++q;
      if (q > w) c.tokens.emplace_back(w, size_t(q - w)), ++words;
    }
    c.tokens.push_back(kEos);
    ++c.lines;
    if (eol == end) break;
    p = eol + 1;
  }
  FREIGHT_CHECK(words > 0, fmt::format("corpus file '{}' holds no words ({} bytes of white space "
                                       "on {} lines)",
                                       path, size, c.lines));
  return c;
}

int64_t Vocabulary::id(std::string_view word) const {
  auto it = ids.find(std::string(word));
  return it == ids.end() ? unk : it->second;
}

Vocabulary build_vocabulary(const std::vector<std::string_view>& tokens, int64_t max_size,
                            const std::string& origin) {
  FREIGHT_CHECK(max_size >= 2, fmt::format("a vocabulary of {} words cannot hold <unk> and a "
                                           "word",
                                           max_size));
  struct Entry {
    std::string_view word;
    int64_t count = 0, first = 0;
  };
  std::unordered_map<std::string_view, size_t> at;
  std::vector<Entry> entries;  // in order of first appearance
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [it, fresh] = at.try_emplace(tokens[i], entries.size());
    if (fresh) entries.push_back({tokens[i], 0, int64_t(i)});
    ++entries[it->second].count;
  }
  auto by_frequency = [](const Entry& a, const Entry& b) {
    return a.count != b.count ? a.count > b.count : a.first < b.first;
  };
  // One place is <unk>'s: the max_size - 1 most frequent other words keep theirs.
  Entry unk{kUnk, 0, INT64_MAX};
  std::vector<Entry> words;
  for (const Entry& e : entries) {
    if (e.word == kUnk)
      unk = e;
    else
      words.push_back(e);
  }
  std::stable_sort(words.begin(), words.end(), by_frequency);
  const size_t keep = std::min(words.size(), size_t(max_size - 1));
  int64_t dropped_tokens = 0, dropped_max_count = 0;
  for (size_t i = keep; i < words.size(); ++i) {
    dropped_tokens += words[i].count;
    dropped_max_count = std::max(dropped_max_count, words[i].count);
    unk.count += words[i].count;
    unk.first = std::min(unk.first, words[i].first);
  }
  const size_t distinct = entries.size();
  const size_t dropped = words.size() - keep;
  words.resize(keep);
  words.push_back(unk);
  std::stable_sort(words.begin(), words.end(), by_frequency);
  Vocabulary v;
  for (const Entry& e : words) {
    v.ids.emplace(std::string(e.word), int64_t(v.words.size()));
    v.words.emplace_back(e.word);
  }
  v.unk = v.ids.at(std::string(kUnk));
  if (dropped > 0)
    v.note = fmt::format(
        "'{}' has {} distinct words (<eos> included) and the model's vocabulary holds {}: the {} "
        "rarest (each seen at most {} times; {} tokens, {:.2f}% of the file) read as <unk>",
        origin, thousands(int64_t(distinct)), thousands(max_size), thousands(int64_t(dropped)),
        dropped_max_count, thousands(dropped_tokens),
        100.0 * double(dropped_tokens) / double(tokens.size()));
  return v;
}

std::string text_corpus_dir(const std::string& data) {
  if (data.starts_with("ptb:")) {
    std::string dir = data.substr(4);
    FREIGHT_CHECK(!dir.empty(), "--data ptb:DIR needs the corpus directory after 'ptb:'");
    FREIGHT_CHECK(fs::is_directory(dir),
                  fmt::format("--data {}: directory '{}' does not exist; {}", data, dir, kLayout));
    return dir;
  }
  if (data == "ptb") return find_data_dir("ptb");
  std::error_code ec;
  if (fs::is_directory(data, ec) && fs::is_regular_file(fs::path(data) / "train.txt", ec))
    return data;
  return "";
}

Dataset load_text_corpus(const std::string& dir, const std::string& split, int64_t seq_len,
                         int64_t max_vocab, const std::string& name) {
  FREIGHT_CHECK(split == "train" || split == "test",
                fmt::format("text corpus '{}': split '{}' is not train or test", dir, split));
  FREIGHT_CHECK(seq_len >= 1, fmt::format("text corpus '{}': sequence length {}", dir, seq_len));
  auto t0 = std::chrono::steady_clock::now();
  const fs::path d(dir);
  const fs::path train_path = d / "train.txt";
  FREIGHT_CHECK(fs::exists(train_path),
                fmt::format("--data {}: corpus directory '{}' has no train.txt; {} (valid.txt "
                            "serves as test.txt when that is missing)",
                            name, dir, kLayout));
  CorpusFile train = read_corpus_file(train_path.string());
  Vocabulary vocab = build_vocabulary(train.tokens, max_vocab, train.path);

  Dataset ds;
  CorpusFile other;
  const CorpusFile* file = &train;
  if (split == "test") {
    fs::path test_path = d / "test.txt", valid_path = d / "valid.txt";
    FREIGHT_CHECK(fs::exists(test_path) || fs::exists(valid_path),
                  fmt::format("--data {}: corpus directory '{}' has neither test.txt nor "
                              "valid.txt for the test split; {}",
                              name, dir, kLayout));
    const bool valid = !fs::exists(test_path);
    other = read_corpus_file((valid ? valid_path : test_path).string());
    file = &other;
    ds.notes.push_back(valid ? fmt::format("test split: '{}' (there is no test.txt)", other.path)
                             : fmt::format("test split: '{}'", other.path));
  }
  const int64_t tokens = int64_t(file->tokens.size());
  const int64_t n = (tokens - 1) / seq_len;
  FREIGHT_CHECK(n >= 1, fmt::format("corpus file '{}' has {} tokens (<eos> included), too few for "
                                    "one sample: a sequence of {} needs {} (the labels are the "
                                    "next tokens)",
                                    file->path, tokens, seq_len, seq_len + 1));
  std::vector<int64_t> ids(static_cast<size_t>(tokens));
  int64_t unknown = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    ids[size_t(i)] = vocab.id(file->tokens[size_t(i)]);
    unknown += ids[size_t(i)] == vocab.unk && file->tokens[size_t(i)] != kUnk;
  }
  std::vector<int64_t> in(static_cast<size_t>(n * seq_len)), out(static_cast<size_t>(n * seq_len));
  for (int64_t i = 0; i < n * seq_len; ++i) {
    in[size_t(i)] = ids[size_t(i)];
    out[size_t(i)] = ids[size_t(i + 1)];
  }
  ds.name = name + "/" + split;
  ds.inputs = Tensor::from_vector(in, {n, seq_len});
  ds.labels = Tensor::from_vector(out, {n, seq_len});
  ds.num_classes = vocab.size();
  ds.class_names = vocab.words;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (split == "train") {
    ds.notes.push_back(fmt::format(
        "text corpus '{}': vocabulary of {} words from train.txt (most frequent first; <eos> "
        "ends each line, <unk> stands for the rest)",
        dir, thousands(vocab.size())));
    if (!vocab.note.empty()) ds.notes.push_back(vocab.note);
  } else if (unknown > 0) {
    ds.notes.push_back(
        fmt::format("test split: {} of its {} tokens are not in the vocabulary "
                    "and read as <unk>",
                    thousands(unknown), thousands(tokens)));
  }
  ds.notes.push_back(
      fmt::format("{} split: {} tokens on {} lines cut into {} sequences of {} "
                  "({} tokens left over) in {:.2f} s",
                  split, thousands(tokens), thousands(file->lines), thousands(n), seq_len,
                  tokens - 1 - n * seq_len, seconds));
  return ds;
}

}  // namespace freight::data
