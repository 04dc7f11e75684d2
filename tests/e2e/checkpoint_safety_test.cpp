// Nothing lost: the `freight` command never replaces a good checkpoint with non-finite weights,
// leaves a checkpoint pair that --resume can always recover after kill -9, turns a first Ctrl-C
// or SIGTERM into a resumable save, and says which checkpoint, file or field is at fault when
// resuming or evaluating goes wrong.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/test_util.h"
#include "freight/io/safetensors.h"

namespace freight {
namespace {

namespace fs = std::filesystem;
using test::has;
using test::ShellRun;

ShellRun freight_cli(const std::string& args) {
  return test::shell(std::string(FREIGHT_CLI_PATH) + " " + args);
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The command started without a shell, its stdout and stderr into one pipe that the test reads,
// so the test can signal it while it runs.
class Running {
 public:
  explicit Running(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      std::string exe = FREIGHT_CLI_PATH;
      argv.push_back(exe.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~Running() {
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  pid_t pid() const { return pid_; }
  // Reads until the output holds `needle` (true) or the command closed its output or `seconds`
  // passed (false).
  bool read_until(const std::string& needle, double seconds = 60) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!has(output_, needle)) {
      int left =
          int(std::chrono::duration<double, std::milli>(end - std::chrono::steady_clock::now())
                  .count());
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) return false;
      char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return false;
      output_.append(buf, size_t(n));
    }
    return true;
  }
  // Waits for the exit; the status as a shell gives it (128 + the signal when killed).
  int wait() {
    read_until("\x01never\x01", 120);  // drain to the end of its output
    int st = 0;
    ::waitpid(pid_, &st, 0);
    waited_ = true;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool waited_ = false;
  std::string output_;
};

class CheckpointSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // Dropout, batch norm, AdamW and a step schedule: the RNG, running statistics, optimizer
    // buffers and the schedule's position must all survive an interruption. Big enough that an
    // epoch of 256 batches takes a good fraction of a second on one thread.
    std::ofstream(path("net.json")) << R"({
      "name": "net", "input": {"shape": [1, 28, 28]}, "classes": 4,
      "layers": [
        {"type": "conv2d", "out": 16, "kernel": 3, "padding": 1}, {"type": "batchnorm"},
        {"type": "relu"}, {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
        {"type": "dropout", "p": 0.2}, {"type": "linear", "out": 4}],
      "train": {"dataset": "synthetic", "batch_size": 16, "optimizer": "adamw", "lr": 0.01,
                "schedule": "step", "step_size": 1, "gamma": 0.5}})";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) { return (dir_ / n).string(); }
  // A short good mlp run whose checkpoint the failing runs must leave alone.
  void good_mlp_checkpoint(const std::string& ckpt) {
    ShellRun r = freight_cli(
        "train --model mlp --data synthetic --device cpu --threads 1 --epochs 1 "
        "--limit-train 128 --limit-test 64 --save " +
        ckpt);
    ASSERT_EQ(r.status, 0) << r.output;
  }
  fs::path dir_;
};

void expect_same_weights(const std::string& a_path, const std::string& b_path) {
  io::SafetensorsFile a = io::load_safetensors(a_path), b = io::load_safetensors(b_path);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_EQ(a.tensors[i].second.to_double_vector(), b.tensors[i].second.to_double_vector())
        << a.tensors[i].first << " differs";
  }
  EXPECT_EQ(a.metadata.at("step"), b.metadata.at("step"));
}

// ---------------------------------------------------------------- NaN never saved

// One step at an absurd learning rate: the loss of that step is finite (it was computed before
// the update) but the weights it leaves overflow the logits (the test loss is NaN). The
// epoch-end save must not write them.
TEST_F(CheckpointSafety, NonFiniteWeightsAfterAFiniteLossAreNotSaved) {
  std::string ckpt = path("mlp.safetensors");
  good_mlp_checkpoint(ckpt);
  std::string before = read_bytes(ckpt), state_before = read_bytes(ckpt + ".train");
  ShellRun r = freight_cli(
      "train --model mlp --data synthetic --device cpu --threads 1 --epochs 1 --limit-train 64 "
      "--batch-size 64 --limit-test 64 --lr 1e30 --save " +
      ckpt);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "freight: error:")) << r.output;
  EXPECT_TRUE(has(r.output, "1e+30")) << "names the learning rate:\n" << r.output;
  EXPECT_TRUE(has(r.output, "epoch 1")) << r.output;
  EXPECT_TRUE(has(r.output, "step 1")) << r.output;
  EXPECT_TRUE(has(r.output, "kept")) << r.output;
  EXPECT_TRUE(has(r.output, ckpt)) << "names the checkpoint kept:\n" << r.output;
  EXPECT_TRUE(read_bytes(ckpt) == before) << "the good checkpoint was replaced";
  EXPECT_TRUE(read_bytes(ckpt + ".train") == state_before) << "its training state was replaced";
}

// The same without a checkpoint: the run still stops at the epoch's end instead of reporting a
// NaN test loss and an accuracy with status 0.
TEST_F(CheckpointSafety, NonFiniteWeightsStopTheRunWithoutACheckpointToo) {
  ShellRun r = freight_cli(
      "train --model mlp --data synthetic --device cpu --threads 1 --epochs 1 --limit-train 64 "
      "--batch-size 64 --limit-test 64 --lr 1e30 --no-save");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "training diverged: after epoch 1 (step 1) the test loss is"))
      << r.output;
  EXPECT_TRUE(has(r.output, "1e+30")) << r.output;
  EXPECT_TRUE(has(r.output, "nothing was being saved")) << r.output;
  EXPECT_FALSE(has(r.output, "test accuracy")) << r.output;
}

TEST_F(CheckpointSafety, ANonFiniteLossStopsWithAdviceAndKeepsTheCheckpoint) {
  std::string ckpt = path("mlp.safetensors");
  good_mlp_checkpoint(ckpt);
  std::string before = read_bytes(ckpt), state_before = read_bytes(ckpt + ".train");
  ShellRun r = freight_cli(
      "train --model mlp --data synthetic --device cpu --threads 1 --epochs 1 --limit-train 256 "
      "--batch-size 32 --limit-test 64 --lr 1e30 --save " +
      ckpt);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "diverged")) << r.output;
  EXPECT_TRUE(has(r.output, "--lr")) << r.output;
  EXPECT_TRUE(has(r.output, "epoch 1")) << r.output;
  EXPECT_TRUE(has(r.output, "step")) << r.output;
  EXPECT_TRUE(has(r.output, "kept")) << r.output;
  EXPECT_TRUE(has(r.output, ckpt + " from epoch 1")) << r.output;
  EXPECT_TRUE(read_bytes(ckpt) == before) << "the good checkpoint was replaced";
  EXPECT_TRUE(read_bytes(ckpt + ".train") == state_before) << "its training state was replaced";
}

// ---------------------------------------------------------------- Ctrl-C and SIGTERM

// The training flags of the interrupted runs (3 epochs of 256 batches, progress per batch).
std::vector<std::string> net_args(const std::string& save) {
  return {"--device",     "cpu", "--threads",      "1", "--epochs", "3", "--seed", "7",
          "--limit-test", "64",  "--log-interval", "1", "--save",   save};
}

TEST_F(CheckpointSafety, CtrlCSavesAResumableCheckpointThatReachesTheSameWeights) {
  std::string straight = path("straight.safetensors"), cut = path("cut.safetensors");
  std::vector<std::string> a = {"train", "--model", path("net.json")};
  std::vector<std::string> rest = net_args(straight);
  a.insert(a.end(), rest.begin(), rest.end());
  std::string line;
  for (const std::string& w : a) line += " " + w;
  ShellRun s = freight_cli(line);
  ASSERT_EQ(s.status, 0) << s.output;

  std::vector<std::string> b = {"train", "--model", path("net.json")};
  rest = net_args(cut);
  b.insert(b.end(), rest.begin(), rest.end());
  Running run(b);
  ASSERT_TRUE(run.read_until("batch 1/256")) << "no progress line:\n" << run.output();
  ::kill(run.pid(), SIGINT);
  int status = run.wait();
  const std::string& out = run.output();
  EXPECT_EQ(status, 130) << out;
  EXPECT_TRUE(has(out, "interrupted")) << out;
  EXPECT_TRUE(has(out, "saved")) << out;
  EXPECT_TRUE(has(out, cut)) << out;
  // The advice holds the command that continues the run; run it (with this build's binary).
  size_t at = out.find("freight train --resume");
  ASSERT_NE(at, std::string::npos) << out;
  std::string advice = out.substr(at + std::string("freight train").size());
  advice = advice.substr(0, advice.find('\n'));
  EXPECT_TRUE(has(advice, "--resume " + cut)) << advice;
  ShellRun resumed = freight_cli("train" + advice);
  ASSERT_EQ(resumed.status, 0) << advice << "\n" << resumed.output;
  expect_same_weights(straight, cut);
}

TEST_F(CheckpointSafety, SigtermWithNoSaveSaysNothingWasSaved) {
  std::vector<std::string> b = {"train", "--model", path("net.json"), "--no-save"};
  std::vector<std::string> rest = net_args(path("unused.safetensors"));
  rest.resize(rest.size() - 2);  // no --save
  b.insert(b.end(), rest.begin(), rest.end());
  Running run(b);
  ASSERT_TRUE(run.read_until("batch 1/256")) << run.output();
  ::kill(run.pid(), SIGTERM);
  EXPECT_EQ(run.wait(), 143) << run.output();
  EXPECT_TRUE(has(run.output(), "interrupted")) << run.output();
  EXPECT_TRUE(has(run.output(), "nothing was saved")) << run.output();
}

// One signal at whatever moment it lands (a GEMM, an evaluation, a save) ends the run cleanly.
// The command takes the signals on a thread of its own: when a handler ran on a compute
// thread, its frame overwrote what oneDNN's JIT kernels keep below the stack pointer, and most
// such runs died in free() or with a segmentation fault instead of exiting with 143.
TEST_F(CheckpointSafety, ASignalAtAnyMomentEndsTheRunCleanly) {
  std::mt19937 rng(2026);
  for (int round = 0; round < 8; ++round) {
    Running run({"train", "--model", "mlp", "--data", "synthetic", "--device", "cpu", "--threads",
                 "1", "--epochs", "2000", "--limit-train", "64", "--no-save"});
    ASSERT_TRUE(run.read_until("epoch  2")) << run.output();
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 200));
    ::kill(run.pid(), SIGTERM);
    EXPECT_EQ(run.wait(), 143) << "round " << round << ":\n" << run.output();
    EXPECT_TRUE(has(run.output(), "nothing was saved")) << run.output();
  }
}

// A second signal while the first is being handled quits at once. Both are queued while the
// process is stopped, so the second arrives before the first step could finish.
TEST_F(CheckpointSafety, ASecondSignalQuitsAtOnce) {
  std::vector<std::string> b = {"train", "--model", path("net.json")};
  std::vector<std::string> rest = net_args(path("c.safetensors"));
  b.insert(b.end(), rest.begin(), rest.end());
  Running run(b);
  ASSERT_TRUE(run.read_until("batch 1/256")) << run.output();
  ::kill(run.pid(), SIGSTOP);
  ::kill(run.pid(), SIGINT);
  ::kill(run.pid(), SIGTERM);
  ::kill(run.pid(), SIGCONT);
  // Both signals are pending when the process continues; which thread takes which first is up
  // to the kernel, and the exit code is 128 + the signal handled second.
  int status = run.wait();
  EXPECT_TRUE(status == 143 || status == 130) << status << "\n" << run.output();
  EXPECT_TRUE(has(run.output(), "at once")) << run.output();
}

// ---------------------------------------------------------------- kill -9 during saves

// Saves every few milliseconds (tiny epochs), killed at random moments: every time, --resume
// must find a consistent pair and continue.
TEST_F(CheckpointSafety, KillNineDuringSavesAlwaysLeavesAResumablePair) {
  std::string ckpt = path("k.safetensors");
  std::mt19937 rng(12345);
  int resumed = 0;
  for (int round = 0; round < 8; ++round) {
    std::vector<std::string> args = {
        "train",    "--model", path("net.json"), "--device", "cpu",          "--threads", "1",
        "--epochs", "100000",  "--limit-train",  "32",       "--limit-test", "16",        "--save",
        ckpt};
    if (round > 0) args.insert(args.end(), {"--resume", ckpt});
    Running run(args);
    ASSERT_TRUE(run.read_until("train loss")) << run.output();  // a save happened
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    ::kill(run.pid(), SIGKILL);
    EXPECT_EQ(run.wait(), 137);
    if (round > 0) {
      EXPECT_TRUE(has(run.output(), "resuming")) << run.output();
      ++resumed;
    }
  }
  // The last kill's files resume too, through the command.
  ShellRun r = freight_cli(
      "train --resume " + ckpt +
      " --device cpu --threads 1 --epochs 1 --limit-train 32 --limit-test 16");  // nothing to do
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(resumed, 7);
}

// ---------------------------------------------------------------- resume messages

TEST_F(CheckpointSafety, ResumingWithAnotherModelIsRefusedNamingBoth) {
  std::string ckpt = path("mlp.safetensors");
  good_mlp_checkpoint(ckpt);
  ShellRun r = freight_cli("train --resume " + ckpt +
                           " --model lenet5 --data synthetic --device cpu --epochs 2 "
                           "--limit-train 128 --limit-test 64");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "'mlp'")) << r.output;
  EXPECT_TRUE(has(r.output, "lenet5")) << r.output;
  // Without --model the checkpoint's model continues, and the start line says so.
  ShellRun ok = freight_cli("train --resume " + ckpt +
                            " --data synthetic --device cpu --threads 1 --epochs 2 "
                            "--limit-train 128 --limit-test 64");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_TRUE(has(ok.output, "model mlp from the checkpoint")) << ok.output;
  // The same model named explicitly is fine.
  ShellRun same = freight_cli("train --resume " + ckpt +
                              " --model mlp --data synthetic --device cpu --threads 1 --epochs 3 "
                              "--limit-train 128 --limit-test 64");
  EXPECT_EQ(same.status, 0) << same.output;
}

// Without --data, a resumed run continues on the data the checkpoint was trained on (as freight
// eval evaluates on it), not on the model's default dataset (mlp's is Fashion-MNIST).
TEST_F(CheckpointSafety, ResumingWithoutDataKeepsTheCheckpointsData) {
  std::string ckpt = path("mlp.safetensors");
  good_mlp_checkpoint(ckpt);
  ShellRun r =
      freight_cli("train --resume " + ckpt +
                  " --device cpu --threads 1 --epochs 2 --limit-train 128 --limit-test 64");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "data synthetic")) << r.output;
  EXPECT_FALSE(has(r.output, "fashion")) << r.output;
}

// --save naming a directory, a pipe or a device is refused before training, and the thing it
// names is left as it was (a rename over /dev/null as root would make it a regular file).
TEST_F(CheckpointSafety, SaveToADirectoryPipeOrDeviceIsRefusedBeforeTraining) {
  const std::string fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (const std::string& target : {path(""), fifo, std::string("/dev/null")}) {
    ShellRun r = freight_cli(
        "train --model mlp --data synthetic --device cpu --threads 1 --epochs 1 "
        "--limit-train 64 --limit-test 64 --save " +
        target);
    EXPECT_EQ(r.status, 1) << target << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "--save")) << r.output;
    EXPECT_TRUE(has(r.output, "give the path of a file")) << r.output;
    EXPECT_FALSE(has(r.output, "epoch 1")) << "refused before training:\n" << r.output;
  }
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(CheckpointSafety, ACorruptTrainingStateFieldNamesTheFileFieldAndValue) {
  std::string ckpt = path("mlp.safetensors");
  good_mlp_checkpoint(ckpt);
  fs::copy_file(ckpt, path("good"));
  io::SafetensorsFile st = io::load_safetensors(ckpt + ".train");
  // ("12x" once passed as 12: std::stoll stops at the first character it cannot read.)
  for (const char* field : {"rng_offset", "batch_size", "lr", "schedule_step"}) {
    fs::copy_file(path("good"), ckpt, fs::copy_options::overwrite_existing);
    io::SafetensorsFile bad = st;
    bad.metadata[field] = "12x";
    io::save_safetensors(ckpt + ".train", bad.tensors, bad.metadata);
    ShellRun r = freight_cli("train --resume " + ckpt +
                             " --data synthetic --device cpu --epochs 2 --limit-train 128 "
                             "--limit-test 64");
    EXPECT_EQ(r.status, 1) << field << "\n" << r.output;
    EXPECT_FALSE(has(r.output, "internal error")) << r.output;
    EXPECT_TRUE(has(r.output, ckpt + ".train")) << r.output;
    EXPECT_TRUE(has(r.output, field)) << r.output;
    EXPECT_TRUE(has(r.output, "12x")) << r.output;
  }
}

TEST_F(CheckpointSafety, LoadErrorsNameTheCheckpoint) {
  std::string ckpt = path("mlp.safetensors");
  good_mlp_checkpoint(ckpt);
  io::SafetensorsFile f = io::load_safetensors(ckpt);
  io::SafetensorsFile st = io::load_safetensors(ckpt + ".train");
  // A weight of the wrong shape: the model's load_state_dict refuses it.
  io::SafetensorsFile bad = f;
  bad.tensors[0].second = Tensor::zeros({3, 3});
  io::save_safetensors(ckpt, bad.tensors, bad.metadata);
  ShellRun r = freight_cli("train --resume " + ckpt +
                           " --data synthetic --device cpu --epochs 2 --limit-train 128");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "checkpoint '" + ckpt + "'")) << r.output;
  ShellRun e = freight_cli("eval " + ckpt + " --data synthetic --device cpu --limit 64");
  EXPECT_EQ(e.status, 1) << e.output;
  EXPECT_TRUE(has(e.output, "checkpoint '" + ckpt + "'")) << e.output;
  // The weights right, an optimizer buffer of the wrong shape: names the training state.
  io::save_safetensors(ckpt, f.tensors, f.metadata);
  bool changed = false;
  for (auto& [name, t] : st.tensors) {
    if (name.find("momentum_buffer") == std::string::npos) continue;
    t = Tensor::zeros({2, 2});
    changed = true;
    break;
  }
  ASSERT_TRUE(changed);
  io::save_safetensors(ckpt + ".train", st.tensors, st.metadata);
  ShellRun o = freight_cli("train --resume " + ckpt +
                           " --data synthetic --device cpu --epochs 2 --limit-train 128");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_TRUE(has(o.output, ckpt + ".train")) << o.output;
}

// ---------------------------------------------------------------- eval of non-finite weights

TEST_F(CheckpointSafety, NonFiniteWeightsAreNamedByEvalAndRefusedByResume) {
  std::string ckpt = path("mlp.safetensors");
  good_mlp_checkpoint(ckpt);
  io::SafetensorsFile f = io::load_safetensors(ckpt);
  ASSERT_GE(f.tensors.size(), 6u);
  // One tensor with a NaN: named.
  io::SafetensorsFile one = f;
  std::vector<float> v = one.tensors[0].second.to_float_vector();
  v[3] = std::nanf("");
  one.tensors[0].second = Tensor::from_vector(v, one.tensors[0].second.shape());
  io::save_safetensors(path("one.safetensors"), one.tensors, one.metadata);
  ShellRun r =
      freight_cli("eval " + path("one.safetensors") + " --data synthetic --device cpu --limit 64");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "warning")) << r.output;
  EXPECT_TRUE(has(r.output, one.tensors[0].first + " (1 of")) << r.output;
  // Resuming from it is refused, naming the tensor: training on would carry the NaN along.
  fs::copy_file(ckpt + ".train", path("one.safetensors.train"));
  ShellRun resumed = freight_cli("train --resume " + path("one.safetensors") +
                                 " --data synthetic --device cpu --threads 1 --epochs 2 "
                                 "--limit-train 128 --limit-test 64");
  EXPECT_EQ(resumed.status, 1) << resumed.output;
  EXPECT_TRUE(has(resumed.output, "NaN or infinite")) << resumed.output;
  EXPECT_TRUE(has(resumed.output, one.tensors[0].first)) << resumed.output;
  EXPECT_FALSE(has(resumed.output, "epoch 2 ")) << resumed.output;
  // Every tensor infinite: a few named, the rest counted.
  io::SafetensorsFile all = f;
  for (auto& [name, t] : all.tensors) t = Tensor::full(t.shape(), INFINITY);
  io::save_safetensors(path("all.safetensors"), all.tensors, all.metadata);
  ShellRun a =
      freight_cli("eval " + path("all.safetensors") + " --data synthetic --device cpu --limit 64");
  EXPECT_TRUE(has(a.output, "warning")) << a.output;
  EXPECT_TRUE(has(a.output, all.tensors[0].first)) << a.output;
  EXPECT_TRUE(has(a.output, "and " + std::to_string(all.tensors.size() - 3) + " more")) << a.output;
}

}  // namespace
}  // namespace freight
