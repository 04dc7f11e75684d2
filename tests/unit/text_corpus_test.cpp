// Text corpora in the Penn Treebank layout (freight/data/text_corpus.h) on tiny corpora the
// tests write: tokens with <eos> per line, the vocabulary's order and <unk>, the rarest words
// mapped to <unk> for a small model vocabulary, next-token samples, valid.txt standing in for
// test.txt, load_dataset's dispatch, and each malformed corpus as a named freight::Error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "freight/data/text_corpus.h"
#include "freight/nn/model_file.h"
#include "freight/training.h"

namespace freight::data {
namespace {

namespace fs = std::filesystem;
using test::has;

class TextCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_corpus_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string root() const { return dir_.string(); }
  std::string write(const std::string& name, const std::string& text) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
};

std::vector<std::string> strings(const std::vector<std::string_view>& v) {
  return std::vector<std::string>(v.begin(), v.end());
}

TEST_F(TextCorpus, TokensEndEachLineWithEos) {
  CorpusFile c = read_corpus_file(write("a.txt", " the cat\t sat \n\nthe end"));
  EXPECT_EQ(strings(c.tokens), (std::vector<std::string>{"the", "cat", "sat", "<eos>", "<eos>",
                                                         "the", "end", "<eos>"}));
  EXPECT_EQ(c.lines, 3);
  // A final newline ends the last line; it does not open another (Python's file iteration).
  EXPECT_EQ(read_corpus_file(write("b.txt", "x y\n")).tokens.size(), 3u);
  EXPECT_EQ(read_corpus_file(write("c.txt", "x\r\ny\n")).lines, 2);
}

TEST_F(TextCorpus, VocabularyByFrequencyThenFirstAppearance) {
  CorpusFile c = read_corpus_file(write("t.txt", "b a c a\nc d a\n"));
  // counts: a 3, c 2, <eos> 2, b 1, d 1; ties by first appearance (c at 2 before <eos> at 4, b
  // at 0 before d at 6), then <unk> (absent from the corpus: added last).
  Vocabulary v = build_vocabulary(c.tokens, 100, c.path);
  EXPECT_EQ(v.words, (std::vector<std::string>{"a", "c", "<eos>", "b", "d", "<unk>"}));
  EXPECT_EQ(v.unk, 5);
  EXPECT_EQ(v.id("c"), 1);
  EXPECT_EQ(v.id("never"), 5);
  EXPECT_TRUE(v.note.empty());
  // <unk> in the corpus keeps its place by frequency.
  CorpusFile u = read_corpus_file(write("u.txt", "<unk> x <unk>\n"));
  EXPECT_EQ(build_vocabulary(u.tokens, 100, u.path).words,
            (std::vector<std::string>{"<unk>", "x", "<eos>"}));
}

TEST_F(TextCorpus, RarestWordsBecomeUnkWhenTheModelsVocabularyIsSmaller) {
  CorpusFile c = read_corpus_file(write("t.txt", "a a a b b c d e\na b\n"));
  // a 4, b 3, <eos> 2, c 1, d 1, e 1: four places = a, b, <eos>, <unk> (c, d, e: 3 tokens).
  Vocabulary v = build_vocabulary(c.tokens, 4, c.path);
  EXPECT_EQ(v.words, (std::vector<std::string>{"a", "b", "<unk>", "<eos>"}))
      << "<unk> counts the 3 words it stands for (first at 5), tying with b (first at 3)";
  EXPECT_EQ(v.id("d"), v.unk);
  EXPECT_TRUE(has(v.note, "3 rarest") && has(v.note, "holds 4") && has(v.note, c.path)) << v.note;
  EXPECT_TRUE(has(test::error_of([&] { build_vocabulary(c.tokens, 1, "x"); }), "1 words"));
}

TEST_F(TextCorpus, SamplesAreNextTokenSequences) {
  write("train.txt", "a b c\nd e\n");  // a b c <eos> d e <eos>: 7 tokens
  write("valid.txt", "a z\n");
  Dataset tr = load_text_corpus(root(), "train", 3, 100, "ptb:" + root());
  // vocabulary: <eos> 2 first, then a b c d e by first appearance, <unk> last.
  ASSERT_EQ(tr.class_names, (std::vector<std::string>{"<eos>", "a", "b", "c", "d", "e", "<unk>"}));
  EXPECT_EQ(tr.num_classes, 7);
  ASSERT_EQ(tr.inputs.shape(), (Shape{2, 3}));  // (7 - 1) / 3 samples
  EXPECT_EQ(tr.inputs.dtype(), DType::I64);
  EXPECT_EQ(tr.inputs.to_int_vector(), (std::vector<int64_t>{1, 2, 3, 0, 4, 5}));
  EXPECT_EQ(tr.labels.to_int_vector(), (std::vector<int64_t>{2, 3, 0, 4, 5, 0}));
  Dataset te = load_text_corpus(root(), "test", 2, 100, "ptb:" + root());
  EXPECT_EQ(te.inputs.to_int_vector(), (std::vector<int64_t>{1, 6}));  // z -> <unk>
  EXPECT_EQ(te.labels.to_int_vector(), (std::vector<int64_t>{6, 0}));
  std::string notes;
  for (const std::string& n : te.notes) notes += n + "\n";
  EXPECT_TRUE(has(notes, "valid.txt") && has(notes, "there is no test.txt")) << notes;
  EXPECT_TRUE(has(notes, "1 of its 3 tokens")) << notes;
  write("test.txt", "e d c\n");
  notes.clear();
  for (const std::string& n : load_text_corpus(root(), "test", 2, 100, "x").notes) notes += n;
  EXPECT_TRUE(has(notes, "test.txt") && !has(notes, "valid.txt")) << notes;
}

TEST_F(TextCorpus, LoadDatasetDispatchesToTheLanguageModel) {
  std::string words;
  for (int i = 0; i < 200; ++i) {
    words += std::string("w").append(std::to_string(i % 37));
    words += i % 11 == 10 ? "\n" : " ";
  }
  write("train.txt", words);
  write("valid.txt", words.substr(0, 400));
  nn::ModelSpec lm = nn::load_model_spec("lstm-ptb");
  for (const std::string& data : {"ptb:" + root(), root()}) {
    Dataset d = load_dataset(data, "train", lm);
    EXPECT_EQ(d.sample_shape(), (Shape{32}));
    EXPECT_EQ(d.labels.shape(), d.inputs.shape());
    EXPECT_EQ(d.size(), (200 + 19 - 1) / 32);  // words + <eos> lines, minus one, over 32
  }
  std::string e =
      test::error_of([&] { load_dataset("ptb:" + root(), "train", nn::load_model_spec("mlp")); });
  EXPECT_TRUE(has(e, "text corpus") && has(e, "'mlp'") && has(e, "language_model")) << e;
}

TEST_F(TextCorpus, MalformedCorporaNameTheFile) {
  auto err = [&](const std::string& split = "train", int64_t t = 4) {
    return test::error_of([&] { load_text_corpus(root(), split, t, 100, "ptb:" + root()); });
  };
  std::string e = err();
  EXPECT_TRUE(has(e, "no train.txt") && has(e, "valid.txt") && has(e, "test.txt")) << e;
  std::string p = write("train.txt", "");
  e = err();
  EXPECT_TRUE(has(e, p) && has(e, "empty")) << e;
  write("train.txt", " \n\t\n");
  e = err();
  EXPECT_TRUE(has(e, p) && has(e, "no words")) << e;
  write("train.txt", std::string("a b\0c\n", 6));
  e = err();
  EXPECT_TRUE(has(e, p) && has(e, "NUL byte at offset 3")) << e;
  write("train.txt", "one two\n");
  e = err();
  EXPECT_TRUE(has(e, p) && has(e, "3 tokens") && has(e, "needs 5")) << e;
  e = err("test", 1);
  EXPECT_TRUE(has(e, "neither test.txt nor valid.txt")) << e;
  e = test::error_of([&] { text_corpus_dir("ptb:" + root() + "/nowhere"); });
  EXPECT_TRUE(has(e, "nowhere") && has(e, "does not exist")) << e;
}

}  // namespace
}  // namespace freight::data
