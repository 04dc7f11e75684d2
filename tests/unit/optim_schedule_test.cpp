// Learning-rate schedules against their closed forms at several steps, and their effect on the
// optimizer's lr.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "freight/freight.h"
#include "freight/optim/optim.h"
#include "freight/training.h"

namespace freight {
namespace {

using namespace freight::optim;

std::vector<Tensor> one_param() {
  return {Tensor::zeros({2}).set_requires_grad()};
}

TEST(Schedule, StepLR) {
  SGD opt(one_param(), 0.5);
  StepLR sched(opt, 3, 0.1);
  // lr = 0.5 · 0.1^⌊t/3⌋: t = 0,1,2 → 0.5; 3,4,5 → 0.05; 6 → 0.005
  std::vector<double> want = {0.5, 0.5, 0.5, 0.05, 0.05, 0.05, 0.005, 0.005};
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_EQ(sched.last_step(), int64_t(t));
    EXPECT_NEAR(opt.lr(), want[t], 1e-15) << "step " << t;
    EXPECT_EQ(sched.last_lr(), opt.lr()) << "PyTorch's get_last_lr(), step " << t;
    sched.step();
  }
}

TEST(Schedule, CosineAnnealing) {
  SGD opt(one_param(), 0.1);
  CosineAnnealingLR sched(opt, 10, 0.001);
  // η(t) = 0.001 + 0.099·(1 + cos(πt/10))/2: t = 0 → 0.1, t = 5 → 0.0505, t = 10 → 0.001,
  // t = 2 → 0.001 + 0.099·(1 + cos(0.2π))/2 = 0.001 + 0.0495·1.809016994 = 0.0905463412
  std::map<int, double> want = {{0, 0.1}, {2, 0.0905463412}, {5, 0.0505}, {10, 0.001}};
  for (int t = 0; t <= 10; ++t) {
    if (want.count(t)) {
      EXPECT_NEAR(opt.lr(), want[t], 1e-10) << "step " << t;
    }
    double closed = 0.001 + 0.099 * (1 + std::cos(M_PI * t / 10)) / 2;
    EXPECT_NEAR(opt.lr(), closed, 1e-15);
    sched.step();
  }
  // Past T_max the closed form rises again (period 2·T_max), as PyTorch's.
  EXPECT_NEAR(opt.lr(), 0.001 + 0.099 * (1 + std::cos(M_PI * 1.1)) / 2, 1e-15);
}

TEST(Schedule, OneCycle) {
  SGD opt(one_param(), 123.0);  // ignored by OneCycleLR
  OneCycleLR sched(opt, 1.0, 100, 0.3, 25, 1e4);
  // initial = 1/25 = 0.04, min = 0.04/1e4 = 4e-6; warm-up ends at step 0.3·100 − 1 = 29,
  // the decay at 99.
  auto anneal = [](double from, double to, double pct) {
    return to + (from - to) / 2 * (1 + std::cos(M_PI * pct));
  };
  EXPECT_NEAR(opt.lr(), 0.04, 1e-15);
  for (int t = 1; t <= 100; ++t) {
    sched.step();
    double want = t <= 29 ? anneal(0.04, 1.0, t / 29.0) : anneal(1.0, 4e-6, (t - 29) / 70.0);
    ASSERT_NEAR(opt.lr(), want, 1e-12) << "step " << t;
    if (t == 29) {
      EXPECT_NEAR(opt.lr(), 1.0, 1e-15);
    }
    if (t == 99) {
      EXPECT_NEAR(opt.lr(), 4e-6, 1e-15);
    }
  }
  // By hand at t = 10: 1 + (0.04 − 1)/2·(1 + cos(10π/29)) = 1 − 0.48·1.4684084 ≈ 0.2951639
  EXPECT_NEAR(sched.lr_at(10), 0.2951639, 1e-6);
  EXPECT_THROW(sched.step(), Error);  // step 101 > total_steps
  EXPECT_EQ(sched.last_step(), 100);
}

TEST(Schedule, RestoreJumpsToAStep) {
  Adam opt(one_param(), 0.2);
  StepLR sched(opt, 2, 0.5);
  sched.set_last_step(5);  // 0.2 · 0.5² = 0.05
  EXPECT_NEAR(opt.lr(), 0.05, 1e-15);
  sched.step();  // t = 6 → 0.2 · 0.5³
  EXPECT_NEAR(opt.lr(), 0.025, 1e-15);
  EXPECT_THROW(StepLR(opt, 0), Error);
}

// Each epoch reports the learning rate of its last step, not the optimizer's rate after it (the
// next step's): after a OneCycle run's last epoch that would be the cosine one step past the end,
// 7.03e-06 rising again where the last step used the floor, 0.05 / 25 / 1e4.
TEST(Schedule, EachEpochReportsTheRateOfItsLastStep) {
  TrainOptions o;
  o.model = "mlp";
  o.data = "synthetic";
  o.limit_train = 256;  // 4 steps of 64 per epoch, 12 in all
  o.limit_test = 64;
  o.epochs = 3;
  o.batch_size = 64;
  o.optimizer = "sgd";
  o.lr = 0.05;
  o.schedule = "onecycle";
  o.device = "cpu";
  TrainResult r = train(o);
  ASSERT_EQ(r.epochs.size(), 3u);
  SGD opt(one_param(), 1.0);
  OneCycleLR sched(opt, 0.05, 12);
  for (int e = 0; e < 3; ++e)
    EXPECT_DOUBLE_EQ(r.epochs[size_t(e)].lr, sched.lr_at(4 * e + 3)) << "epoch " << e + 1;
  EXPECT_NEAR(r.epochs[2].lr, 0.05 / 25 / 1e4, 1e-18);
}

}  // namespace
}  // namespace freight
