// Temporaries of atomic writes (checkpoints, the peaks cache): a symlink planted where a
// temporary goes is never followed, and temporaries left by a writer that died (kill -9 during a
// save) are removed by the next save, while those of live writers are kept.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "freight/error.h"
#include "freight/io/safetensors.h"
#include "freight/peaks.h"
#include "freight/tensor.h"
#include "io/atomic_file.h"

namespace freight {
using io::load_safetensors;
using io::NamedTensors;
using io::SafetensorsFile;
using io::save_safetensors;
namespace {

namespace fs = std::filesystem;

class TemporaryFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_tmpfiles_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    victim_ = dir_ / "victim.txt";
    std::ofstream(victim_) << "precious";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string victim_text() const {
    std::ifstream f(victim_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  static NamedTensors tensors() { return {{"w", Tensor::full({3, 2}, 1.5f)}}; }
  static void expect_intact(const fs::path& ckpt) {
    SafetensorsFile f = load_safetensors(ckpt.string());
    ASSERT_EQ(f.tensors.size(), 1u);
    EXPECT_EQ(f.tensors[0].first, "w");
    EXPECT_EQ(f.tensors[0].second.shape(), (Shape{3, 2}));
    EXPECT_FLOAT_EQ(f.tensors[0].second.to_float_vector()[5], 1.5f);
  }
  // The pid of a process that has exited and been reaped: no process has it (barring reuse
  // within the test, which would only keep a temporary, never remove a live one).
  static pid_t dead_pid() {
    pid_t pid = ::fork();
    if (pid == 0) _exit(0);
    int st = 0;
    ::waitpid(pid, &st, 0);
    return pid;
  }

  template <class Fn>
  static std::string test_error(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_, victim_;
};

TEST_F(TemporaryFiles, CheckpointSaveNeverFollowsAPlantedSymlink) {
  fs::path ckpt = dir_ / "model.safetensors";
  // The name the temporary had before (<path>.tmp.<pid>, predictable) and names of the
  // temporary's pattern (<path>.tmp.<pid>.<random>) all point at the victim.
  fs::create_symlink(victim_, fs::path(ckpt.string() + ".tmp." + std::to_string(::getpid())));
  for (const char* suffix : {".0", ".00000000", ".0000000000000000", ".ffffffffffffffff"})
    fs::create_symlink(victim_,
                       fs::path(ckpt.string() + ".tmp." + std::to_string(::getpid()) + suffix));
  save_safetensors(ckpt.string(), tensors());
  EXPECT_EQ(victim_text(), "precious");
  EXPECT_FALSE(fs::is_symlink(ckpt));
  expect_intact(ckpt);
}

TEST_F(TemporaryFiles, PeaksCacheSaveNeverFollowsAPlantedSymlink) {
  fs::path cache = dir_ / "peaks.json";
  // Every name a temporary of this process could have had or have.
  for (const std::string& tmp : {cache.string() + ".tmp" + std::to_string(::getpid()),
                                 cache.string() + ".tmp." + std::to_string(::getpid())})
    fs::create_symlink(victim_, fs::path(tmp));
  DevicePeaks p;
  p.key = "test key";
  p.name = "test device";
  p.fp32_flops = 1e9;
  p.mem_bandwidth = 1e9;
  save_peaks(p, cache.string());
  EXPECT_EQ(victim_text(), "precious");
  DevicePeaks back;
  ASSERT_TRUE(load_peaks("test key", cache.string(), back));
  EXPECT_EQ(back.name, "test device");
}

// A target in a directory where no file can be made fails when it is prepared, before any
// training, naming the directory and the reason; a writable one is left as it was.
TEST_F(TemporaryFiles, PreparingATargetWhereNoFileCanBeMadeFailsAtOnce) {
  if (!fs::is_directory("/proc")) GTEST_SKIP() << "no /proc here";
  const std::string m =
      test_error([] { io::prepare_target("/proc/freight_probe.safetensors", "checkpoint"); });
  EXPECT_NE(m.find("cannot write checkpoint '/proc/freight_probe.safetensors'"), std::string::npos)
      << m;
  EXPECT_NE(m.find("creating a file in '/proc'"), std::string::npos) << m;

  const fs::path ok = dir_ / "sub" / "model.safetensors";
  io::prepare_target(ok.string(), "checkpoint");
  std::vector<fs::path> left;
  for (const auto& e : fs::directory_iterator(dir_ / "sub")) left.push_back(e.path());
  EXPECT_TRUE(left.empty()) << "the probe left " << left.front();
}

TEST_F(TemporaryFiles, StaleTemporariesOfDeadWritersAreRemovedOnTheNextSave) {
  fs::path ckpt = dir_ / "model.safetensors";
  std::string dead = std::to_string(dead_pid()), live = std::to_string(::getpid());
  fs::path stale_old = ckpt.string() + ".tmp." + dead;            // the format before
  fs::path stale_new = ckpt.string() + ".tmp." + dead + ".1a2b";  // today's format
  fs::path stale_link = ckpt.string() + ".tmp." + dead + ".link";
  fs::path in_progress = ckpt.string() + ".tmp." + live + ".abcd";  // a live writer's
  fs::path other = dir_ / "other.safetensors.tmp.1";                // another file's
  fs::path not_ours = ckpt.string() + ".tmp.notapid";
  for (const fs::path& p : {stale_old, stale_new, in_progress, other, not_ours})
    std::ofstream(p) << "partial";
  fs::create_symlink(victim_, stale_link);

  save_safetensors(ckpt.string(), tensors());
  EXPECT_FALSE(fs::exists(fs::symlink_status(stale_old)));
  EXPECT_FALSE(fs::exists(fs::symlink_status(stale_new)));
  EXPECT_FALSE(fs::exists(fs::symlink_status(stale_link)));
  EXPECT_EQ(victim_text(), "precious");  // the link went, not what it pointed at
  EXPECT_TRUE(fs::exists(in_progress));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(not_ours));
  expect_intact(ckpt);
  // The save leaves no temporary of its own.
  size_t temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind("model.safetensors.tmp." + live + ".", 0) == 0 &&
        e.path() != in_progress)
      ++temporaries;
  EXPECT_EQ(temporaries, 0u);
}

TEST_F(TemporaryFiles, AFailedWriteLeavesTheTargetAsItWasAndNoTemporary) {
  fs::path target = dir_ / "state.json";
  io::write_file_atomically(target.string(), "first", "state");
  EXPECT_THROW(io::write_file_atomically(
                   target.string(),
                   [](const io::WriteBytes& write) {
                     write("half", 4);
                     throw std::runtime_error("the producer failed");
                   },
                   "state"),
               std::runtime_error);
  std::ifstream f(target);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "first");
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  // A directory that does not exist: an error naming the file, not a crash.
  std::string msg = test_error(
      [&] { io::write_file_atomically((dir_ / "no" / "such.json").string(), "x", "state"); });
  EXPECT_NE(msg.find("state"), std::string::npos) << msg;
  EXPECT_NE(msg.find("such.json"), std::string::npos) << msg;
}

TEST_F(TemporaryFiles, OnlyNamesWithAPidOfADeadProcessCountAsStale) {
  fs::path target = dir_ / "m.safetensors";
  std::string dead = std::to_string(dead_pid());
  // pid 0 and -1 address process groups in kill(): never asked about, never removed.
  const std::vector<std::string> kept = {
      ".tmp.0.a",           ".tmp.-1.a", ".tmp.99999999999999999999.a",
      ".tmp." + dead + ".", ".tmp..a",   ".tmpx." + dead + ".a"};
  for (const std::string& keep : kept) std::ofstream(target.string() + keep) << "x";
  std::ofstream(target.string() + ".tmp." + dead + ".a") << "x";
  EXPECT_EQ(io::remove_stale_temporaries(target.string()), 1u);
  EXPECT_EQ(io::remove_stale_temporaries(target.string()), 0u);
  size_t left = 0;
  for (const auto& e : fs::directory_iterator(dir_)) left += e.path() != victim_;
  EXPECT_EQ(left, 6u);
}

}  // namespace
}  // namespace freight
