// The `freight` command on a user's own data: an image folder (PNGs and JPEGs of other sizes and
// channels than the model's) trains, saves its classes, evaluates with them and refuses data of
// other classes; a PTB-layout corpus trains lstm-ptb and reports perplexity, per epoch and in
// the metrics; each malformed folder or corpus exits 1 with a message naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/image_files.h"
#include "common/test_util.h"

namespace {

namespace fs = std::filesystem;
using freight::test::has;
using freight::test::ShellRun;

ShellRun freight_cli(const std::string& args) {
  return freight::test::shell(std::string(FREIGHT_CLI_PATH) + " " + args);
}

class DataFolders : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_datafolders_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(path(rel)).parent_path());
    std::ofstream(path(rel), std::ios::binary) << text;
  }
  // Class k of a folder: 20 x 24 images, bright in band k of three horizontal bands, RGB PNGs and
  // gray JPEGs alternating.
  void image_class(const std::string& folder, const std::string& name, int band, int count) {
    fs::create_directories(path(folder + "/" + name));
    const int w = 20, h = 24;
    for (int i = 0; i < count; ++i) {
      std::vector<uint8_t> gray(size_t(w * h));
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          gray[size_t(y * w + x)] = uint8_t((y * 3 / h == band ? 220 : 30) + (x + i) % 7);
      std::string stem = path(folder + "/" + name + "/" + std::to_string(i));
      if (i % 2) {
        freight::test::write_jpeg(stem + ".jpg", w, h, 1, gray, 95);
      } else {
        std::vector<uint8_t> rgb;
        for (uint8_t v : gray) rgb.insert(rgb.end(), {v, v, v});
        freight::test::write_png8(stem + ".png", w, h, 3, rgb);
      }
    }
  }
  void expect_failure(const std::string& args, const std::vector<std::string>& fragments) {
    freight::test::expect_refusal(freight_cli(args), args, fragments);
  }
  fs::path dir_;
};

TEST_F(DataFolders, ImageFolderTrainsSavesItsClassesAndEvaluates) {
  const char* classes[] = {"top", "middle", "bottom"};
  for (int k = 0; k < 3; ++k) image_class("shapes", classes[k], k, 10);
  write("shapes/top/notes.txt", "not an image");
  std::string ck = path("ck.safetensors");
  ShellRun r = freight_cli("train --model lenet5 --data " + path("shapes") +
                           " --epochs 1 --device cpu --batch-size 8 --lr 0.05 --save " + ck);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "3 classes (bottom, middle, top)")) << r.output;
  EXPECT_TRUE(has(r.output, "24 train / 6 test samples")) << r.output;
  EXPECT_TRUE(has(r.output, "resized 24 of 24 images to 28x28")) << r.output;
  EXPECT_TRUE(has(r.output, "of 24 images to grayscale")) << r.output;  // the PNGs (RGB)
  EXPECT_TRUE(has(r.output, "6 images held out")) << r.output;
  EXPECT_TRUE(has(r.output, "skipped 1 file")) << r.output;
  EXPECT_TRUE(has(r.output, "decoded 24 images in")) << r.output;
  EXPECT_TRUE(has(r.output, "test accuracy")) << r.output;

  ShellRun ev = freight_cli("eval " + ck + " --data " + path("shapes") + " --device cpu");
  ASSERT_EQ(ev.status, 0) << ev.output;
  EXPECT_TRUE(has(ev.output, "classes (3): 0 bottom, 1 middle, 2 top")) << ev.output;
  EXPECT_TRUE(has(ev.output, "6 samples")) << ev.output;
  // The data it was trained on is the default.
  ShellRun ev2 = freight_cli("eval " + ck + " --device cpu");
  EXPECT_EQ(ev2.status, 0) << ev2.output;
  EXPECT_TRUE(has(ev2.output, "6 samples") && has(ev2.output, "held out")) << ev2.output;

  for (const char* c : {"bottom", "middle", "zenith"}) image_class("other", c, 0, 2);
  expect_failure("eval " + ck + " --device cpu --data " + path("other"),
                 {ck, "class 2 is 'top' in the checkpoint but 'zenith' in the data"});
}

TEST_F(DataFolders, PtbCorpusTrainsLstmPtbAndReportsPerplexity) {
  // A tiny corpus with the PTB conventions (<unk> in the text, one sentence a line), and no
  // test.txt: valid.txt is the test split.
  std::string train, valid;
  const char* words[] = {"the", "cat", "sat", "on", "mat", "<unk>", "a", "dog", "ran", "far"};
  for (int line = 0; line < 300; ++line) {
    std::string s;
    for (int i = 0; i < 4 + line % 5; ++i) s += std::string(" ") + words[(line * 7 + i * 3) % 10];
    (line % 10 == 9 ? valid : train) += s + " \n";
  }
  valid += " zebra unicorn the cat\n";  // words outside the vocabulary
  write("ptb/train.txt", train);
  write("ptb/valid.txt", valid);
  std::string metrics = path("m.jsonl");
  ShellRun r = freight_cli("train --model lstm-ptb --data ptb:" + path("ptb") +
                           " --epochs 1 --limit-train 64 --batch-size 32 --device cpu --no-save "
                           "--metrics " +
                           metrics);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "vocabulary of 11 words")) << r.output;
  EXPECT_TRUE(has(r.output, "valid.txt' (there is no test.txt)")) << r.output;
  EXPECT_TRUE(has(r.output, "read as <unk>")) << r.output;
  EXPECT_TRUE(has(r.output, " ppl ")) << r.output;
  EXPECT_TRUE(has(r.output, "test perplexity ")) << r.output;
  std::ifstream m(metrics);
  std::string line;
  ASSERT_TRUE(std::getline(m, line));
  nlohmann::json j = nlohmann::json::parse(line);
  ASSERT_TRUE(j.contains("test_perplexity")) << line;
  EXPECT_NEAR(j["test_perplexity"].get<double>(), std::exp(j["test_loss"].get<double>()),
              1e-6 * j["test_perplexity"].get<double>());
  EXPECT_NEAR(j["train_perplexity"].get<double>(), std::exp(j["train_loss"].get<double>()),
              1e-6 * j["train_perplexity"].get<double>());
  // A plain directory holding train.txt is a corpus too.
  ShellRun plain = freight_cli("train --model lstm-ptb --data " + path("ptb") +
                               " --epochs 1 --limit-train 32 --limit-test 8 --batch-size 32 "
                               "--device cpu --no-save");
  EXPECT_EQ(plain.status, 0) << plain.output;
}

TEST_F(DataFolders, MalformedDataExitsWithTheFileNamed) {
  const std::string train = "train --model lenet5 --epochs 1 --device cpu --no-save --data ";
  fs::create_directories(path("empty_root"));
  expect_failure(train + path("empty_root"), {path("empty_root"), "no class folders", "train.txt"});
  image_class("no_cat", "dog", 0, 3);
  fs::create_directories(path("no_cat/cat"));
  expect_failure(train + path("no_cat"), {path("no_cat/cat"), "holds no .png, .jpg or .jpeg"});
  image_class("bad", "dog", 0, 3);
  image_class("bad", "cat", 1, 3);
  write("bad/cat/broken.png", "\x89PNG\r\n\x1a\n and then nothing useful");
  expect_failure(train + path("bad"), {path("bad/cat/broken.png"), "PNG"});
  write("bad/cat/broken.png", "hello");
  expect_failure(train + path("bad"), {path("bad/cat/broken.png"), "not a PNG or JPEG"});

  const std::string lm = "train --model lstm-ptb --epochs 1 --device cpu --no-save --data ";
  fs::create_directories(path("corpus"));
  expect_failure(lm + "ptb:" + path("corpus"), {"has no train.txt", "valid.txt", "test.txt"});
  write("corpus/train.txt", "");
  expect_failure(lm + "ptb:" + path("corpus"), {path("corpus/train.txt"), "empty"});
  write("corpus/train.txt", "too short\n");
  write("corpus/valid.txt", "too short\n");
  expect_failure(lm + "ptb:" + path("corpus"),
                 {path("corpus/train.txt"), "3 tokens", "too few for one sample"});
  expect_failure("train --model lenet5 --epochs 1 --no-save --data ptb:" + path("corpus"),
                 {"text corpus", "'lenet5'"});
}

}  // namespace
