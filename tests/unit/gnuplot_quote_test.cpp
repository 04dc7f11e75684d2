// Text quoted for gnuplot reads back literally and runs nothing: fed through a real gnuplot
// (skipped when none is installed) with backquotes, $(...), @macros, newlines and quotes, and
// file names that gnuplot would otherwise take for pipes or options.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "bench/gnuplot.h"
#include "bench/subprocess.h"

namespace freight::bench {
namespace {

namespace fs = std::filesystem;

TEST(GnuplotQuote, EscapesWhatGnuplotExpandsAndControlCharactersBecomeSpaces) {
  EXPECT_EQ(gnuplot_string("it's"), R"("it's")");
  EXPECT_EQ(gnuplot_string("a\nb\r\tc"), R"("a b  c")");
  EXPECT_EQ(gnuplot_string("`x` \"y\" \\ @z $(w)"), R"x("\140x\140 \"y\" \\ \100z $(w)")x");
  EXPECT_EQ(gnuplot_string(""), R"("")");
  EXPECT_EQ(gnuplot_path("<cmd"), "./<cmd");
  EXPECT_EQ(gnuplot_path("-x.gp"), "./-x.gp");
  EXPECT_EQ(gnuplot_path("/abs/p"), "/abs/p");
  EXPECT_EQ(gnuplot_path("../up"), "../up");
  EXPECT_EQ(gnuplot_file("|cmd"), R"("./|cmd")");
  EXPECT_EQ(gnuplot_data_label("a \"b\"\nc"), "\"a 'b' c\"");
  EXPECT_EQ(gnuplot_data_word("a b\n'c\""), "a_b__c_");
  EXPECT_EQ(gnuplot_data_word(""), "_");
  EXPECT_EQ(gnuplot_command("-x.gp"), (std::vector<std::string>{"gnuplot", "./-x.gp"}));
}

class GnuplotRun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!program_in_path("gnuplot")) GTEST_SKIP() << "gnuplot is not installed (gnuplot-nox)";
    dir_ = fs::temp_directory_path() /
           ("freight_gnuplot_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Runs `script` (written to `name` in dir_) through gnuplot in dir_; its exit status.
  int run(const std::string& name, const std::string& script) {
    std::ofstream(dir_ / name) << script;
    return run_command(gnuplot_command(name), dir_.string(), (dir_ / "gnuplot.log").string());
  }
  std::string read(const std::string& name) const {
    std::ifstream f(dir_ / name);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(GnuplotRun, HostileTitlesArePrintedLiterallyAndRunNothing) {
  // Each would create a file in dir_ if gnuplot (or a shell it started) ran it.
  const std::vector<std::string> texts = {
      "$(touch c1)",
      "`touch c2`",
      "@M",
      "title\nsystem 'touch c3'",
      "it's \"quoted\" '' ''' # not a comment",
      "ends in a backslash\\",
      "''''",  // what the '' escape of single-quoted strings gets wrong in gnuplot 5.4
      R"(\140 \100 \" typed by the user)",
      "tab\there, cr\r, del\x7f",
      "",
      "\xc2\xb5s \xe2\x9c\x93",  // UTF-8 passes through
  };
  // M would run a command if @M were expanded on a command line.
  std::string script = "M = \"print 'macro ran'; system 'touch c4'\"\nset print " +
                       gnuplot_file("printed.txt") + "\n";
  for (const std::string& t : texts)
    script += "print " + gnuplot_string(t) + "\nset title " + gnuplot_string(t) +
              " noenhanced\n# a comment: " + gnuplot_string(t) + "\n";
  script += "print 'end'\n";
  ASSERT_EQ(run("titles.gp", script), 0) << read("gnuplot.log");
  std::string expected;
  for (std::string t : texts) {
    for (char& c : t)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    expected += t + "\n";
  }
  EXPECT_EQ(read("printed.txt"), expected + "end\n");
  for (const char* c : {"c1", "c2", "c3", "c4"})
    EXPECT_FALSE(fs::exists(dir_ / c)) << c << " was created: gnuplot ran a command";
}

TEST_F(GnuplotRun, FileNamesAreNeitherPipesNorOptions) {
  std::ofstream(dir_ / "<touch p1") << "1 2\n3 4\n";  // data that plot '<cmd' would not read
  const std::string script = "stats " + gnuplot_file("<touch p1") + " nooutput\nset print " +
                             gnuplot_file("|touch p2") + "\nprint STATS_records\n";
  ASSERT_EQ(run("-x.gp", script), 0) << read("gnuplot.log");  // "-x.gp": not an option
  EXPECT_FALSE(fs::exists(dir_ / "p1"));
  EXPECT_FALSE(fs::exists(dir_ / "p2"));
  EXPECT_EQ(read("|touch p2"), "2\n");
}

}  // namespace
}  // namespace freight::bench
