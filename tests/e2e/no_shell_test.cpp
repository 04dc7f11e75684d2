// No shell, ever: user-given strings that reach the roofline plot of `freight explain` (the
// --plot prefix, a model file's "name", which is the default prefix and the plot's title) are
// file names and text, never commands: not for a shell ($(...), backquotes), not for gnuplot
// (backquotes in double-quoted strings, a newline ending a comment or a command, '<cmd' as a
// data file, '|cmd' as an output file, '-x' as an option).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/test_util.h"
#include "freight/peaks.h"
#include "freight/runtime.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

class NoShell : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    peaks_file_ = new test::ScopedPeaksFile("no_shell_test");
    // Round peaks for the CPU with one thread (the runs below use --threads 1), so that the
    // command measures nothing: the plot is what these tests are about, not its numbers.
    int previous = num_threads();
    set_num_threads(1);
    DevicePeaks p;
    p.device = Device::cpu();
    p.key = peaks_key(p.device);
    p.threads = 1;
    p.fp32_flops = 100e9;
    p.mem_bandwidth = 10e9;
    p.op_s = 1e-6;
    p.gemm_n = 2048;
    p.measured_at = "2000-01-01T00:00:00Z";
    save_peaks(p, peaks_cache_path());
    set_num_threads(previous);
  }
  static void TearDownTestSuite() { delete peaks_file_; }
  void SetUp() override {
    dir_ = fs::path(peaks_file_->dir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(dir_);
  }
  // `freight explain` on a tiny step in dir_ (the cwd, where a shell or gnuplot would run what
  // it was tricked into). `args` is already quoted for the test's own shell.
  test::ShellRun explain(const std::string& args) const {
    return test::shell(
        fmt::format("cd '{}' && {} explain {} --device cpu --threads 1 -b 2 "
                    "--steps 1 --warmup 0",
                    dir_.string(), FREIGHT_CLI_PATH, args));
  }
  // Files that the injected commands would have created.
  void expect_nothing_ran(const std::vector<std::string>& canaries) const {
    for (const std::string& c : canaries)
      EXPECT_FALSE(fs::exists(dir_ / c)) << c << " was created: a command ran";
  }
  static bool have_gnuplot() { return test::shell("command -v gnuplot").status == 0; }
  // The plot of `prefix` was written under its literal name.
  void expect_plot(const std::string& prefix, const std::string& out) const {
    EXPECT_TRUE(fs::exists(dir_ / (prefix + ".gp"))) << prefix << "\n" << out;
    EXPECT_TRUE(fs::exists(dir_ / (prefix + ".dat"))) << prefix << "\n" << out;
    if (have_gnuplot()) {
      EXPECT_TRUE(fs::exists(dir_ / (prefix + ".png"))) << prefix << "\n" << out;
      EXPECT_TRUE(fs::exists(dir_ / (prefix + ".svg"))) << prefix << "\n" << out;
    }
  }

  static test::ScopedPeaksFile* peaks_file_;
  fs::path dir_;
};
test::ScopedPeaksFile* NoShell::peaks_file_ = nullptr;

TEST_F(NoShell, PlotPrefixIsAFileNameNotACommand) {
  // Each prefix, single-quoted for the test's shell, and what it would create if run.
  struct Case {
    std::string prefix;
    std::vector<std::string> canaries;
  };
  for (const Case& c : std::vector<Case>{
           {"p$(touch X1)`touch Y1`", {"X1", "Y1"}},  // shell, and gnuplot's backquotes
           {"|touch Z1", {"Z1.png", "Z1.svg"}},       // gnuplot: set output '|cmd' pipes
           {"<touch V1", {"V1.dat"}},                 // gnuplot: plot '<cmd' reads a pipe
           {"-p", {}}}) {                             // not an option of gnuplot
    test::ShellRun run = explain(fmt::format("--model mlp '--plot={}'", c.prefix));
    EXPECT_EQ(run.status, 0) << c.prefix << "\n" << run.output;
    expect_nothing_ran(c.canaries);
    expect_plot(c.prefix, run.output);
  }
}

TEST_F(NoShell, ModelNameIsTextNotACommand) {
  // The name becomes the default prefix (explain-<name>-cpu) and the plot's title and comment.
  std::string name = "m$(touch X2)`touch Y2`'\"\nsystem 'touch W2'\n@M";
  nlohmann::json model = {{"name", name},
                          {"input", {{"shape", {1, 4, 4}}}},
                          {"classes", 3},
                          {"layers", {{{"type", "flatten"}}, {{"type", "linear"}, {"out", 3}}}}};
  std::ofstream(dir_ / "hostile.json") << model.dump();
  test::ShellRun run = explain("--model hostile.json");
  EXPECT_EQ(run.status, 0) << run.output;
  expect_nothing_ran({"X2", "Y2", "W2"});
  // The default prefix is a plain file name here: control characters (and '/') become '_'.
  std::string file_name = name;
  for (char& c : file_name)
    if (c == '\n') c = '_';
  expect_plot("explain-" + file_name + "-cpu", run.output);

  // The same name under a plain prefix: only the script's title and comment carry it.
  run = explain("--model hostile.json --plot plain");
  EXPECT_EQ(run.status, 0) << run.output;
  expect_nothing_ran({"X2", "Y2", "W2"});
  expect_plot("plain", run.output);
}

TEST_F(NoShell, PlotPrefixThatNoScriptCanNameIsRefused) {
  // A newline cannot be written into a gnuplot script: refused up front, naming the flag.
  test::ShellRun run = explain("--model mlp --plot \"$(printf 'p\\nsystem \"touch W3\"')\"");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("--plot"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("control character"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("internal error"), std::string::npos) << run.output;
  expect_nothing_ran({"W3"});
}

}  // namespace
}  // namespace freight
