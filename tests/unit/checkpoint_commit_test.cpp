// The commit order of a checkpoint pair (src/training/checkpoint.h): a crash after any stage of
// a save leaves files from which open_for_resume picks a consistent pair (the previous save or
// the new one) and tidies up; and the checked reading of the training state's fields.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/test_util.h"
#include "freight/io/safetensors.h"
#include "training/checkpoint.h"

namespace freight::detail {
namespace {

namespace fs = std::filesystem;

struct Crash {};  // thrown from the stage hook: the process "dies" there

class CheckpointCommit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("freight_commit_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = (dir_ / "c.safetensors").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A save of "step" `step`: weights and optimizer state that say which save they belong to.
  void save(int step, const std::function<void(CommitStage)>& hook = {}) {
    io::NamedTensors w{{"w", Tensor::full({3}, double(step))}};
    io::NamedTensors st{{"state.0.step", Tensor::full({1}, double(step))}};
    commit_checkpoint(path_, w, {{"step", std::to_string(step)}}, st,
                      {{"step", std::to_string(step)}}, hook);
  }
  // The step whose pair open_for_resume picks (its weights and state must agree).
  int resumed_step() {
    ResumeFiles f = open_for_resume(path_);
    int w = int(f.checkpoint.tensors.at(0).second.to_double_vector()[0]);
    int s = int(f.state.tensors.at(0).second.to_double_vector()[0]);
    EXPECT_EQ(w, s) << "the weights and the optimizer state come from different saves";
    EXPECT_EQ(f.checkpoint.metadata.at("save_id"), f.state.metadata.at("save_id"));
    return w;
  }
  fs::path dir_;
  std::string path_;
};

TEST_F(CheckpointCommit, ACompleteSaveLeavesThePairAndNoStagedState) {
  save(1);
  EXPECT_TRUE(fs::exists(path_ + ".train"));
  EXPECT_FALSE(fs::exists(path_ + ".train.next"));
  EXPECT_EQ(resumed_step(), 1);
  save(2);
  EXPECT_EQ(resumed_step(), 2);
}

TEST_F(CheckpointCommit, ACrashAfterEachStageLeavesAResumablePair) {
  struct Case {
    CommitStage stage;
    int expect;  // the save that resumes: the previous one before the commit point
  };
  for (Case c : {Case{CommitStage::state_staged, 1}, Case{CommitStage::checkpoint_replaced, 2},
                 Case{CommitStage::state_renamed, 2}}) {
    SCOPED_TRACE(int(c.stage));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    save(1);
    EXPECT_THROW(save(2,
                      [&](CommitStage s) {
                        if (s == c.stage) throw Crash{};
                      }),
                 Crash);
    EXPECT_EQ(resumed_step(), c.expect);
    // Whatever the crash left, the next resume finds the pair in place, nothing staged.
    EXPECT_FALSE(fs::exists(path_ + ".train.next"));
    EXPECT_EQ(resumed_step(), c.expect);
    // And saving goes on from there.
    save(3);
    EXPECT_EQ(resumed_step(), 3);
  }
}

// The first save of a run cut off after its commit point: no .train at all yet.
TEST_F(CheckpointCommit, AFirstSaveCutOffAfterItsCommitPointResumes) {
  EXPECT_THROW(save(1,
                    [](CommitStage s) {
                      if (s == CommitStage::checkpoint_replaced) throw Crash{};
                    }),
               Crash);
  EXPECT_FALSE(fs::exists(path_ + ".train"));
  EXPECT_EQ(resumed_step(), 1);
}

// Two saves of the same step from different runs (a new run over an old checkpoint) are told
// apart by their save id: a state of the other run is never taken for this checkpoint's.
TEST_F(CheckpointCommit, AStateOfTheSameStepFromAnotherSaveIsNotTaken) {
  save(5);
  fs::copy_file(path_ + ".train", dir_ / "old.train");
  save(5);
  fs::copy_file(dir_ / "old.train", path_ + ".train", fs::copy_options::overwrite_existing);
  std::string m = test::error_of([&] { open_for_resume(path_); });
  EXPECT_NE(m.find("no training state belongs to it"), std::string::npos) << m;
  EXPECT_NE(m.find(path_ + ".train is from step 5"), std::string::npos) << m;
}

TEST_F(CheckpointCommit, AMissingTrainingStateIsAClearError) {
  save(1);
  fs::remove(path_ + ".train");
  std::string m = test::error_of([&] { open_for_resume(path_); });
  EXPECT_NE(m.find("no training state beside it"), std::string::npos) << m;
  EXPECT_NE(m.find(path_ + ".train"), std::string::npos) << m;
}

TEST(FieldReader, NamesTheFileFieldAndValue) {
  io::Metadata m{{"a", "12"}, {"b", "12x"}, {"c", "-3"}, {"d", "nan"}, {"e", "0.25"}, {"f", ""}};
  FieldReader r(m, "x.train");
  EXPECT_EQ(r.integer("a"), 12);
  EXPECT_EQ(r.unsigned_integer("a"), 12u);
  EXPECT_EQ(r.real("e"), 0.25);
  EXPECT_EQ(r.integer("c"), -3);
  auto msg = [&](auto fn) { return test::error_of(fn); };
  std::string e = msg([&] { r.integer("b"); });
  EXPECT_NE(e.find("'x.train': the field 'b' = '12x' is not an integer"), std::string::npos) << e;
  e = msg([&] { r.integer("c", 0); });
  EXPECT_NE(e.find("'-3' is not an integer >= 0"), std::string::npos) << e;
  e = msg([&] { r.unsigned_integer("c"); });
  EXPECT_NE(e.find("'c' = '-3'"), std::string::npos) << e;
  e = msg([&] { r.real("d"); });
  EXPECT_NE(e.find("'d' = 'nan' is not a finite number"), std::string::npos) << e;
  e = msg([&] { r.integer("f"); });
  EXPECT_NE(e.find("'f' = ''"), std::string::npos) << e;
  e = msg([&] { r.text("missing"); });
  EXPECT_NE(e.find("'x.train': the field 'missing' is missing"), std::string::npos) << e;
}

}  // namespace
}  // namespace freight::detail
