// Image folders (freight/data/image_folder.h) on folders the tests write: classes sorted with
// indices by position, the train/test/val layouts and the held-out split, decoding into the
// model's channels and size, the class list through a checkpoint and `freight eval`'s check,
// and every malformed folder as a freight::Error naming the folder or file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/image_files.h"
#include "common/test_util.h"
#include "freight/data/image_folder.h"
#include "freight/io/safetensors.h"
#include "freight/training.h"
#include "training/class_names.h"

namespace freight::data {
namespace {

namespace fs = std::filesystem;
using test::has;

class ImageFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_folder_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string root() const { return dir_.string(); }
  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }
  // A gray PNG of w x h whose every pixel is `value`, at root/rel (folders made).
  void gray_png(const std::string& rel, int w, int h, uint8_t value) {
    fs::create_directories(fs::path(path(rel)).parent_path());
    test::write_png8(path(rel), w, h, 1, std::vector<uint8_t>(size_t(w * h), value));
  }
  void text(const std::string& rel, const std::string& content) {
    fs::create_directories(fs::path(path(rel)).parent_path());
    std::ofstream(path(rel)) << content;
  }
  fs::path dir_;
};

TEST_F(ImageFolder, ClassesSortedAndIndexedByPosition) {
  for (const char* c : {"zebra", "Apple", "cat", "b_dog"}) {
    gray_png(std::string(c) + "/2.png", 2, 2, 1);
    gray_png(std::string(c) + "/10.png", 2, 2, 1);
  }
  gray_png("cat/sub/1.png", 2, 2, 1);  // subfolders are searched
  gray_png(".hidden/1.png", 2, 2, 1);  // hidden folders are not classes
  gray_png("cat/.x.png", 2, 2, 1);     // nor hidden files images
  text("cat/readme.txt", "about cats");
  ImageFolderIndex ix = index_image_folder(root(), "train");
  EXPECT_EQ(ix.classes, (std::vector<std::string>{"Apple", "b_dog", "cat", "zebra"}));
  // No test/ folder: each class of 2 or 3 images gives 1 to test; 9 images, 5 for training.
  ImageFolderIndex test = index_image_folder(root(), "test");
  EXPECT_EQ(test.files.size(), 4u);
  ASSERT_EQ(ix.files.size(), 5u);
  EXPECT_EQ(ix.labels.size(), ix.files.size());
  for (size_t i = 0; i < ix.files.size(); ++i) {
    ASSERT_LT(size_t(ix.labels[i]), ix.classes.size());
    EXPECT_TRUE(has(ix.files[i], "/" + ix.classes[size_t(ix.labels[i])] + "/")) << ix.files[i];
  }
  EXPECT_TRUE(std::is_sorted(ix.labels.begin(), ix.labels.end()));
  bool skipped = false;
  for (const std::string& n : ix.notes) skipped = skipped || has(n, "readme.txt");
  EXPECT_TRUE(skipped);
}

TEST_F(ImageFolder, HeldOutSplitIsStratifiedDisjointAndStable) {
  for (int i = 0; i < 10; ++i) gray_png("a/" + std::to_string(i) + ".png", 2, 2, 1);
  for (int i = 0; i < 4; ++i) gray_png("b/" + std::to_string(i) + ".png", 2, 2, 1);
  gray_png("c/only.png", 2, 2, 1);
  ImageFolderIndex tr = index_image_folder(root(), "train");
  ImageFolderIndex te = index_image_folder(root(), "test");
  std::set<std::string> a(tr.files.begin(), tr.files.end()), b(te.files.begin(), te.files.end());
  EXPECT_EQ(a.size() + b.size(), 15u);
  for (const std::string& f : b) EXPECT_EQ(a.count(f), 0u) << f;
  std::map<int64_t, int> per_class;
  for (int64_t l : te.labels) ++per_class[l];
  EXPECT_EQ(per_class[0], 2);         // 20% of 10
  EXPECT_EQ(per_class[1], 1);         // round(0.8) = 1
  EXPECT_EQ(per_class.count(2), 0u);  // a single image stays in train
  EXPECT_EQ(index_image_folder(root(), "test").files, te.files);
  bool said = false;
  for (const std::string& n : te.notes) said = said || has(n, "held out");
  EXPECT_TRUE(said);
}

TEST_F(ImageFolder, TrainTestAndValLayouts) {
  for (const char* c : {"cat", "dog", "emu"})
    gray_png(std::string("train/") + c + "/1.png", 2, 2, 1);
  gray_png("val/dog/1.png", 2, 2, 1);
  gray_png("val/emu/1.png", 2, 2, 1);
  ImageFolderIndex te = index_image_folder(root(), "test");
  EXPECT_EQ(te.classes, (std::vector<std::string>{"cat", "dog", "emu"}));
  EXPECT_EQ(te.labels, (std::vector<int64_t>{1, 2}));  // the train split's indices
  EXPECT_TRUE(has(te.split_dir, "val"));
  bool missing = false;
  for (const std::string& n : te.notes) missing = missing || has(n, "cat");
  EXPECT_TRUE(missing) << "the note names the class test/ lacks";
  gray_png("test/cat/1.png", 2, 2, 1);  // test/ wins over val/
  EXPECT_TRUE(has(index_image_folder(root(), "test").split_dir, "test"));
  EXPECT_EQ(index_image_folder(root(), "train").files.size(), 3u);
  gray_png("test/yak/1.png", 2, 2, 1);
  std::string e = test::error_of([&] { index_image_folder(root(), "test"); });
  EXPECT_TRUE(has(e, "'yak'") && has(e, "lacks")) << e;
}

TEST_F(ImageFolder, DecodesIntoTheModelsChannelsAndSize) {
  // Class "a": a 3x2 RGB PNG with known pixels; class "b": a gray 6x4 PNG (to be shrunk).
  std::vector<uint8_t> rgb{10, 20, 30, 40, 50, 60, 70, 80, 90, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  fs::create_directories(path("train/a"));
  test::write_png8(path("train/a/x.png"), 3, 2, 3, rgb);
  gray_png("train/b/y.png", 6, 4, 200);
  gray_png("test/a/z.png", 3, 2, 5);
  Dataset d = load_image_folder(root(), "train", {3, 2, 3}, "m");
  ASSERT_EQ(d.inputs.shape(), (Shape{2, 3, 2, 3}));
  ASSERT_EQ(d.inputs.dtype(), DType::U8);
  const uint8_t* p = static_cast<const uint8_t*>(d.inputs.data_ptr());
  for (int c = 0; c < 3; ++c)  // [N, C, H, W] from the file's [H, W, C]
    for (int i = 0; i < 6; ++i) EXPECT_EQ(p[c * 6 + i], rgb[size_t(i * 3 + c)]) << c << "," << i;
  for (int i = 18; i < 36; ++i) EXPECT_EQ(p[i], 200);  // gray -> RGB, shrunk: still 200
  EXPECT_EQ(d.labels.to_int_vector(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"a", "b"}));
  std::string notes;
  for (const std::string& n : d.notes) notes += n + "\n";
  EXPECT_TRUE(has(notes, "resized 1 of 2 images to 3x2") && has(notes, "6x4 (1)")) << notes;
  EXPECT_TRUE(has(notes, "converted 1 of 2 images to RGB")) << notes;
  EXPECT_TRUE(has(notes, "decoded 2 images")) << notes;

  Dataset g = load_image_folder(root(), "train", {2, 3}, "m");  // [H, W]: gray
  ASSERT_EQ(g.inputs.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(static_cast<const uint8_t*>(g.inputs.data_ptr())[0],
            (299 * 10 + 587 * 20 + 114 * 30 + 500) / 1000);
  std::string e = test::error_of([&] { load_image_folder(root(), "train", {784}, "mlp784"); });
  EXPECT_TRUE(has(e, "mlp784") && has(e, "[784]")) << e;
  e = test::error_of([&] { load_image_folder(root(), "train", {4, 8, 8}, "m4"); });
  EXPECT_TRUE(has(e, "4 channels")) << e;
}

TEST_F(ImageFolder, MalformedFoldersNameTheCulprit) {
  auto err = [&](const std::string& split = "train") {
    return test::error_of([&] { load_image_folder(root(), split, {1, 4, 4}, "m"); });
  };
  std::string e = err();
  EXPECT_TRUE(has(e, "no class folders") && has(e, "empty") && has(e, root())) << e;
  gray_png("loose.png", 2, 2, 1);
  e = err();
  EXPECT_TRUE(has(e, "no class folders") && has(e, "1 images directly")) << e;
  fs::create_directories(path("cat"));
  gray_png("dog/1.png", 2, 2, 1);
  e = err();
  EXPECT_TRUE(has(e, path("cat")) && has(e, "holds no .png")) << e;
  text("cat/1.png", "not really a png");
  e = err("test");  // the bad file is wherever the split puts it: load both
  std::string e2 = err("train");
  EXPECT_TRUE(has(e + e2, path("cat/1.png")) && has(e + e2, "not a PNG or JPEG")) << e << e2;
  fs::remove(path("cat/1.png"));
  gray_png("cat/1.png", 2, 2, 1);
  text("cat/2.gif", "GIF89a");
  e = err();
  EXPECT_TRUE(has(e, path("cat/2.gif")) && has(e, ".gif")) << e;
  fs::remove(path("cat/2.gif"));
  fs::create_directories(path("test/cat"));
  e = err();
  EXPECT_TRUE(has(e, "test/ folder but no train/")) << e;
  e = test::error_of([&] { index_image_folder(path("nowhere"), "train"); });
  EXPECT_TRUE(has(e, path("nowhere")) && has(e, "does not exist")) << e;
}

TEST_F(ImageFolder, OnlyOneImagePerClassLeavesNoTestSplit) {
  gray_png("a/1.png", 2, 2, 1);
  gray_png("b/1.png", 2, 2, 1);
  std::string e = test::error_of([&] { index_image_folder(root(), "test"); });
  EXPECT_TRUE(has(e, "no test/ or val/") && has(e, "2 images")) << e;
}

// Through the training API: the class list lands in the checkpoint, `evaluate_checkpoint` gives
// it back, and data with other classes is refused with the first difference named.
TEST_F(ImageFolder, ClassNamesRoundTripThroughACheckpoint) {
  for (const char* c : {"circle", "square", "zigzag"})
    for (int i = 0; i < 3; ++i)
      gray_png(std::string("set/") + c + "/" + std::to_string(i) + ".png", 8, 8, uint8_t(40 * i));
  TrainOptions o;
  o.model = "lenet5";
  o.data = path("set");
  o.epochs = 1;
  o.batch_size = 4;
  o.device = "cpu";
  o.save = path("ck.safetensors");
  TrainResult r = train(o);
  ASSERT_EQ(r.checkpoint, o.save);
  io::SafetensorsFile f = io::load_safetensors(o.save);
  std::vector<std::string> names = detail::class_names_of(f.metadata, o.save, 10);
  EXPECT_EQ(names, (std::vector<std::string>{"circle", "square", "zigzag"}));
  EvalResult ev = evaluate_checkpoint(o.save, path("set"), "test", "cpu", 10);
  EXPECT_EQ(ev.class_names, names);
  EXPECT_EQ(ev.samples, 3);

  for (const char* c : {"circle", "square", "zebra"})
    for (const char* f : {"/0.png", "/1.png"}) gray_png(std::string("other/") + c + f, 8, 8, 1);
  std::string e =
      test::error_of([&] { evaluate_checkpoint(o.save, path("other"), "train", "cpu", 10); });
  EXPECT_TRUE(has(e, o.save) && has(e, "class 2 is 'zigzag' in the checkpoint but 'zebra'")) << e;
  // Resuming on other classes is refused the same way.
  TrainOptions again = o;
  again.resume = o.save;
  again.model = "";
  again.data = path("other");
  again.epochs = 2;
  e = test::error_of([&] { train(again); });
  EXPECT_TRUE(has(e, "zebra")) << e;
}

// Not an array of strings, more names than the model has outputs, or a name twice: each is an
// error naming the checkpoint and what is wrong.
TEST(ClassNames, MalformedMetadataIsNamed) {
  io::Metadata m{{"class_names", "{\"a\": 1}"}};
  std::string e = test::error_of([&] { detail::class_names_of(m, "ck.safetensors", 10); });
  EXPECT_TRUE(has(e, "ck.safetensors") && has(e, "class_names")) << e;
  EXPECT_TRUE(detail::class_names_of({}, "x", 10).empty());
  m["class_names"] = R"(["a", "b", "c"])";
  EXPECT_EQ(detail::class_names_of(m, "ck.safetensors", 3).size(), 3u);
  e = test::error_of([&] { detail::class_names_of(m, "ck.safetensors", 2); });
  EXPECT_TRUE(has(e, "ck.safetensors") && has(e, "names 3 classes (a, b, c)") &&
              has(e, "model has 2 outputs"))
      << e;
  m["class_names"] = R"(["a", "b", "c", "b"])";
  e = test::error_of([&] { detail::class_names_of(m, "ck.safetensors", 10); });
  EXPECT_TRUE(has(e, "ck.safetensors") && has(e, "class 'b' twice (classes 1 and 3)")) << e;
}

}  // namespace
}  // namespace freight::data
