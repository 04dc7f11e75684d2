// Where models and datasets are looked for (src/io/search_dirs.h): the order of the search, that
// the first hit wins, and the error that lists every place looked at when nothing is found.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "common/test_util.h"
#include "freight/data/dataset.h"
#include "freight/nn/model_file.h"
#include "io/install_paths.h"
#include "io/search_dirs.h"

namespace freight {
namespace {
namespace fs = std::filesystem;

// Sets environment variables for one test and restores them after it.
class EnvGuard {
 public:
  void set(const char* name, const std::string& value) {
    keep(name);
    ::setenv(name, value.c_str(), 1);
  }
  void unset(const char* name) {
    keep(name);
    ::unsetenv(name);
  }
  ~EnvGuard() {
    for (const auto& [name, old] : saved_) {
      if (old)
        ::setenv(name.c_str(), old->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  void keep(const char* name) {
    if (saved_.count(name)) return;
    const char* v = std::getenv(name);
    saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

class SearchDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("freight_search_dirs_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    for (const char* v : {"FREIGHT_MODEL_PATH", "FREIGHT_MODELS_DIR", "FREIGHT_DATA_DIR"})
      env_.unset(v);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path dir(const std::string& name) {
    fs::create_directories(root_ / name);
    return root_ / name;
  }
  static void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  static std::string model(const std::string& name) {
    return R"({"name": ")" + name +
           R"(", "input": {"shape": [4]}, "classes": 2, "layers": [{"type": "linear", "out": 2}]})";
  }
  fs::path root_;
  EnvGuard env_;
};

TEST_F(SearchDirs, SplitsColonSeparatedLists) {
  EXPECT_EQ(io::split_path_list(nullptr).size(), 0u);
  EXPECT_EQ(io::split_path_list("").size(), 0u);
  auto dirs = io::split_path_list(":a::b/c:");
  ASSERT_EQ(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], fs::path("a"));
  EXPECT_EQ(dirs[1], fs::path("b/c"));
}

TEST_F(SearchDirs, ModelOrder) {
  env_.set("FREIGHT_MODEL_PATH", (root_ / "a").string() + ":" + (root_ / "b").string());
  env_.set("FREIGHT_MODELS_DIR", (root_ / "old").string());
  auto dirs = io::model_search_dirs();
  ASSERT_GE(dirs.size(), 4u);
  EXPECT_EQ(dirs[0].dir, root_ / "a");
  EXPECT_EQ(dirs[1].dir, root_ / "b");
  EXPECT_EQ(dirs[2].dir, root_ / "old");
  // Then the installed share directory, found from the library: <libdir>/../share/freight.
  EXPECT_EQ(dirs[3].dir, (io::library_dir().parent_path() / "share" / "freight" / "models"));
  // The test runs in a build tree, whose marker names this source tree: its zoo comes last.
  auto src = io::build_tree_source_dir();
  ASSERT_TRUE(src) << "no " << io::kBuildTreeMarker << " beside " << io::library_dir();
  EXPECT_TRUE(fs::exists(*src / "models" / "mlp.json"));
  EXPECT_EQ(dirs.back().dir, *src / "models");
}

TEST_F(SearchDirs, FirstModelFoundWins) {
  write(root_ / "b" / "mlp.json", model("b-mlp"));
  env_.set("FREIGHT_MODEL_PATH", (root_ / "a").string() + ":" + (root_ / "b").string());
  // b's mlp.json shadows the zoo's; a has none.
  EXPECT_EQ(nn::load_model_spec("mlp").name, "b-mlp");
  write(root_ / "a" / "mlp.json", model("a-mlp"));
  EXPECT_EQ(nn::load_model_spec("mlp").name, "a-mlp");
  // Without the variable, the name comes from the build tree's zoo.
  env_.unset("FREIGHT_MODEL_PATH");
  EXPECT_EQ(nn::load_model_spec("mlp").name, "mlp");
}

// Each part appears in `text`, after the previous one.
void expect_in_order(const std::string& text, const std::vector<std::string>& parts) {
  size_t at = 0;
  for (const std::string& p : parts) {
    size_t found = text.find(p, at);
    ASSERT_NE(found, std::string::npos) << "'" << p << "' missing (in order) from:\n" << text;
    at = found + p.size();
  }
}

TEST_F(SearchDirs, MissingModelListsWhereItLooked) {
  env_.set("FREIGHT_MODEL_PATH", (root_ / "a").string() + ":" + (root_ / "b").string());
  std::string e = test::error_of([] { nn::load_model_spec("no-such-net"); });
  auto src = io::build_tree_source_dir();
  ASSERT_TRUE(src);
  expect_in_order(
      e,
      {"no model named 'no-such-net'", "the zoo has: ", "lenet5",
       "1. " + (root_ / "a" / "no-such-net.json").string() + " (FREIGHT_MODEL_PATH)",
       "2. " + (root_ / "b" / "no-such-net.json").string() + " (FREIGHT_MODEL_PATH)",
       "3. " + (io::library_dir().parent_path() / "share/freight/models/no-such-net.json").string(),
       (*src / "models" / "no-such-net.json").string(), "Set FREIGHT_MODEL_PATH"});
}

TEST_F(SearchDirs, DataOrderEndsInXdgDatasets) {
  env_.set("FREIGHT_DATA_DIR", (root_ / "d1").string() + ":" + (root_ / "d2").string());
  env_.set("XDG_DATA_DIRS", (root_ / "x1").string() + ":" + (root_ / "x2").string());
  auto dirs = io::data_search_dirs();
  ASSERT_GE(dirs.size(), 5u);
  EXPECT_EQ(dirs[0].dir, root_ / "d1");
  EXPECT_EQ(dirs[1].dir, root_ / "d2");
  EXPECT_EQ(dirs[2].dir, io::library_dir().parent_path() / "share" / "freight" / "data");
  EXPECT_EQ(dirs[dirs.size() - 2].dir, root_ / "x1" / "datasets");
  EXPECT_EQ(dirs.back().dir, root_ / "x2" / "datasets");
  // XDG's default when the variable is unset or empty: /usr/local/share, then /usr/share.
  env_.set("XDG_DATA_DIRS", "");
  dirs = io::data_search_dirs();
  EXPECT_EQ(dirs[dirs.size() - 2].dir, fs::path("/usr/local/share/datasets"));
  EXPECT_EQ(dirs.back().dir, fs::path("/usr/share/datasets"));
}

TEST_F(SearchDirs, FirstDatasetFoundWins) {
  env_.set("FREIGHT_DATA_DIR", (root_ / "d1").string());
  env_.set("XDG_DATA_DIRS", (root_ / "x1").string());
  EXPECT_EQ(data::default_data_dir("toy-set"), "");
  dir("x1/datasets/toy-set");
  EXPECT_EQ(data::find_data_dir("toy-set"), (root_ / "x1" / "datasets" / "toy-set").string());
  dir("d1/toy-set");
  EXPECT_EQ(data::find_data_dir("toy-set"), (root_ / "d1" / "toy-set").string());
  EXPECT_EQ(data::default_data_dir("toy-set"), (root_ / "d1" / "toy-set").string());
}

TEST_F(SearchDirs, MissingDatasetListsWhereItLooked) {
  env_.set("FREIGHT_DATA_DIR", (root_ / "d1").string());
  env_.set("XDG_DATA_DIRS", (root_ / "x1").string() + ":" + (root_ / "x2").string());
  std::string e = test::error_of([] { data::find_data_dir("fashion-mnist"); });
  auto src = io::build_tree_source_dir();
  ASSERT_TRUE(src);
  expect_in_order(
      e, {"--data fashion-mnist: the dataset is not found",
          "1. " + (root_ / "d1" / "fashion-mnist").string() + " (FREIGHT_DATA_DIR)",
          "2. " + (io::library_dir().parent_path() / "share/freight/data/fashion-mnist").string(),
          (*src / "data" / "fashion-mnist").string(),
          (root_ / "x1" / "datasets" / "fashion-mnist").string() + " (the system data",
          (root_ / "x2" / "datasets" / "fashion-mnist").string(), "Set FREIGHT_DATA_DIR",
          "apt install dataset-fashion-mnist"});
}

}  // namespace
}  // namespace freight
