// Text corpora for language models, in the Penn Treebank layout of the standard word-level
// language-model setup (Zaremba et al.; PyTorch's examples/word_language_model):
//
//   DIR/train.txt  DIR/valid.txt  DIR/test.txt
//
// Each file is whitespace-separated words, one sentence per line; every line, an empty one
// included, ends with the token "<eos>" (a last line without a newline too; the empty line a
// final newline seems to open is not a line, as Python's file iteration has it). The vocabulary
// is built from train.txt alone: by frequency, most frequent first, ties by first appearance,
// and always holds "<unk>": where the corpus has it (PTB's files do), by its frequency, otherwise
// added last. A word of valid.txt or test.txt that is not in it reads as "<unk>". When train.txt
// has more distinct words than the model's vocabulary, the rarest map to "<unk>" (which then
// counts their occurrences for its place) and a note says how many.
//
// The token stream of a split is cut into samples of the model's sequence length T: sample i is
// tokens [iT, iT + T) and its labels the next tokens [iT + 1, iT + T + 1) (inputs and labels
// int64 [N, T]); the last tokens that do not fill a sample are left out. Samples are independent:
// the LSTM state is not carried from one to the next (the loader shuffles them).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "freight/data/dataset.h"

namespace freight::data {

// A corpus file's text and its tokens (views into the text, and of "<eos>").
struct CorpusFile {
  std::string path;
  std::vector<char> text;  // (a vector: moving it keeps the views valid)
  std::vector<std::string_view> tokens;
  int64_t lines = 0;
};

// Reads one corpus file. Errors name the file: missing, larger than 2 GiB, holding a NUL byte
// (not text), or holding no words.
CorpusFile read_corpus_file(const std::string& path);

struct Vocabulary {
  std::vector<std::string> words;  // id -> word
  std::unordered_map<std::string, int64_t> ids;
  int64_t unk = -1;  // the id of "<unk>"
  // What building it did that a user should hear (words mapped to <unk>); "" when nothing.
  std::string note;

  int64_t id(std::string_view word) const;  // unk for a word not in it
  int64_t size() const { return int64_t(words.size()); }
};

// The vocabulary of `tokens` with at most `max_size` words (>= 2), as described above.
Vocabulary build_vocabulary(const std::vector<std::string_view>& tokens, int64_t max_size,
                            const std::string& origin);

// The corpus directory that --data names: "ptb:DIR" -> DIR, "ptb" -> the dataset directory
// ptb/ found as named datasets are (data::find_data_dir), a directory holding train.txt -> it;
// "" for anything else.
std::string text_corpus_dir(const std::string& data);

// Split "train" (train.txt) or "test" (test.txt, or valid.txt when there is no test.txt; a note
// says which) of the corpus in `dir`, cut for a model of sequence length `seq_len` whose
// vocabulary holds `max_vocab` words. `name` is how --data named it (for messages). The
// dataset's class_names are the vocabulary (a word's id is its class), num_classes its size.
Dataset load_text_corpus(const std::string& dir, const std::string& split, int64_t seq_len,
                         int64_t max_vocab, const std::string& name);

}  // namespace freight::data
