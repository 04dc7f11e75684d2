// `freight train` writes its checkpoint through a fresh temporary: a link planted at a name
// the temporary had or could have is never followed, and the temporaries that a run killed
// during a save (kill -9) left behind are removed by the next save.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/test_util.h"

namespace freight {
namespace {

namespace fs = std::filesystem;

TEST(StaleTemporaries, TrainRemovesThoseOfDeadRunsAndFollowsNoLink) {
  fs::path dir = fs::temp_directory_path() / ("freight_stale_tmp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path victim = dir / "victim.txt";
  std::ofstream(victim) << "precious";
  // A pid no process has: a child that has exited and been reaped.
  pid_t dead = ::fork();
  if (dead == 0) _exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string ckpt = (dir / "m.safetensors").string(), d = std::to_string(dead);
  for (const std::string& f :
       {ckpt + ".tmp." + d, ckpt + ".tmp." + d + ".5eed", ckpt + ".train.tmp." + d + ".5eed"})
    std::ofstream(f) << "half a checkpoint";
  fs::create_symlink(victim, ckpt + ".tmp." + d + ".link");

  test::ShellRun r = test::shell(std::string(FREIGHT_CLI_PATH) +
                                 " train --model mlp --data synthetic --epochs 1 --limit-train 64 "
                                 "--limit-test 64 --device cpu --threads 1 --save " +
                                 ckpt);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(ckpt));
  std::ifstream v(victim);
  std::stringstream text;
  text << v.rdbuf();
  EXPECT_EQ(text.str(), "precious");
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos)
        << e.path() << " was left behind";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace freight
