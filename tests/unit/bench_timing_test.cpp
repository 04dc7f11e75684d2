// The adaptive timing rule of `freight bench` (src/bench/timing.h), on steps of known cost.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "bench/timing.h"

namespace freight::bench {
namespace {

void sleep_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

TEST(BenchTiming, CheapStepsGetFiveRoundsOfSeveralSteps) {
  int calls = 0;
  TimingOptions o;
  o.seconds = 0.2;
  o.warmup_seconds = 0.01;
  StepTiming t = time_steps([&] { ++calls, sleep_ms(1); }, [] {}, o);
  ASSERT_FALSE(t.skipped);
  EXPECT_EQ(t.rounds, 5);
  EXPECT_GE(t.steps_per_round, 2);  // about 0.2 s / (5 x 1 ms) = 40 on an idle machine
  EXPECT_GE(t.warmup_steps, 2);
  EXPECT_EQ(calls, t.warmup_steps + t.rounds * t.steps_per_round);
  EXPECT_GE(t.min_s, 0.001);
  EXPECT_LE(t.min_s, t.median_s);
  EXPECT_LE(t.median_s, t.max_s);
}

TEST(BenchTiming, DearStepsKeepTheMinimumRounds) {
  TimingOptions o;
  o.seconds = 0.01;  // less than one step
  o.min_rounds = 3;
  o.warmup_seconds = 0;
  StepTiming t = time_steps([] { sleep_ms(5); }, [] {}, o);
  ASSERT_FALSE(t.skipped);
  EXPECT_EQ(t.rounds, 3);
  EXPECT_EQ(t.steps_per_round, 1);
  EXPECT_EQ(t.warmup_steps, 2);
}

// The hook between rounds (freight bench's cache-sharing reading) runs once after each round and
// is not timed: a round's time is its steps' alone.
TEST(BenchTiming, TheHookBetweenRoundsRunsOncePerRoundOutsideTheTiming) {
  int hooks = 0, steps_seen_by_hook = 0, steps = 0;
  TimingOptions o;
  o.seconds = 0.03;
  o.min_rounds = 3;
  o.warmup_seconds = 0;
  o.between_rounds = [&] {
    ++hooks;
    steps_seen_by_hook = steps;
    sleep_ms(100);  // far longer than a round's steps (at most 3 of about 2 ms)
  };
  StepTiming t = time_steps([&] { ++steps, sleep_ms(2); }, [] {}, o);
  ASSERT_FALSE(t.skipped);
  EXPECT_EQ(hooks, t.rounds);
  EXPECT_EQ(steps_seen_by_hook, steps);  // the last call came after the last round
  EXPECT_LT(t.max_s, 0.015) << "the hook's 100 ms were timed as a step's";
}

TEST(BenchTiming, ASlowFirstStepSkipsTheRowAfterOneStep) {
  int calls = 0;
  TimingOptions o;
  o.max_step_seconds = 0.001;
  StepTiming t = time_steps([&] { ++calls, sleep_ms(5); }, [] {}, o);
  EXPECT_TRUE(t.skipped);
  EXPECT_EQ(calls, 1);
  EXPECT_NE(t.reason.find("--max-step-seconds"), std::string::npos) << t.reason;
}

TEST(BenchTiming, LatencyCallsAreBounded) {
  int calls = 0;
  CallTiming c = time_calls([&] { ++calls; }, [] {}, 0.001);
  EXPECT_LE(c.calls, 2000);
  EXPECT_GE(c.calls, 10);
  EXPECT_EQ(calls, 3 + 1 + c.calls);
  EXPECT_LE(c.min_s, c.median_s);
}

}  // namespace
}  // namespace freight::bench
