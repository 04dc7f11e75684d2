// The ranges of settings (freight/settings.h): NaN and infinities never pass, integers are read
// whole and in decimal, and a model file's defaults are refused with the file, key and value.
#include "freight/settings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/test_util.h"

namespace freight {
namespace {

using test::error_of;
using test::has;

TEST(Settings, RealRangesRefuseNanAndInfinity) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (const RealRange& r : {limits::lr, limits::momentum, limits::weight_decay, limits::gamma}) {
    EXPECT_FALSE(r.contains(nan));
    EXPECT_FALSE(r.contains(inf));
    EXPECT_FALSE(r.contains(-inf));
  }
  EXPECT_FALSE(limits::lr.contains(0));
  EXPECT_TRUE(limits::lr.contains(1e-12));
  EXPECT_TRUE(limits::momentum.contains(0));
  EXPECT_FALSE(limits::momentum.contains(1));
  EXPECT_EQ(limits::momentum.describe(), "a number in [0, 1)");
  EXPECT_EQ(limits::lr.describe(), "a number > 0 and at most float32's largest, 3.402823e+38");
  // The optimizers apply them in float32, where a larger value is infinite.
  EXPECT_FALSE(limits::lr.contains(1e39));
  EXPECT_FALSE(limits::weight_decay.contains(1e39));
  EXPECT_TRUE(limits::lr.contains(double(std::numeric_limits<float>::max())));
}

TEST(Settings, IntegersAreWholeDecimalNumbers) {
  EXPECT_EQ(parse_int("010"), 10);  // not octal, as strtoll base 0 would read it
  EXPECT_EQ(parse_int("-1"), -1);
  EXPECT_FALSE(parse_int("3x"));
  EXPECT_FALSE(parse_int("2.5"));
  EXPECT_FALSE(parse_int(""));
  EXPECT_FALSE(parse_int("99999999999999999999"));  // overflow is not clamped
  EXPECT_FALSE(parse_uint("-1"));                   // no wrap-around to 2^64-1
  EXPECT_EQ(parse_uint("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(limits::batch_size.describe(), "an integer in 1..16777216");
  EXPECT_EQ(limits::count.describe(), "an integer >= 1");
}

TEST(Settings, ChecksNameWhatAndValue) {
  std::string e = error_of([] { check_setting("--epochs", int64_t(-1), limits::epochs); });
  EXPECT_TRUE(has(e, "--epochs: -1 is not an integer in 1..1000000")) << e;
  e = error_of([] { check_setting("--lr", std::nan(""), limits::lr); });
  EXPECT_TRUE(has(e, "--lr: nan")) << e;
  e = error_of([] { check_setting("--optimizer", std::string("rmsprop"), limits::optimizers); });
  EXPECT_TRUE(has(e, "'rmsprop' is not one of sgd, nesterov, adam, adamw")) << e;
}

TEST(Settings, ModelFileDefaultsAreCheckedAndNameTheFile) {
  nn::ModelSpec spec;
  spec.path = "models/x.json";
  spec.train_defaults = {{"batch_size", "64.0"}, {"epochs", "2.5"}, {"lr", "nan"},
                         {"momentum", "0.9"},    {"gamma", "0"},    {"optimizer", "rms"}};
  // JSON writes 6.4e1 back as 64.0: a whole number is an integer.
  EXPECT_EQ(train_default_int(spec, "batch_size", 1, limits::batch_size), 64);
  EXPECT_EQ(train_default_real(spec, "momentum", 0, limits::momentum), 0.9);
  EXPECT_EQ(train_default_int(spec, "step_size", 7, limits::step_size), 7);  // absent: fallback
  std::string e = error_of([&] { train_default_int(spec, "epochs", 1, limits::epochs); });
  EXPECT_TRUE(has(e, "model file 'models/x.json': train.epochs = 2.5 is not an integer")) << e;
  e = error_of([&] { train_default_real(spec, "lr", 1, limits::lr); });
  EXPECT_TRUE(has(e, "train.lr = nan")) << e;
  e = error_of([&] { train_default_real(spec, "gamma", 1, limits::gamma); });
  EXPECT_TRUE(has(e, "train.gamma = 0")) << e;
  e = error_of([&] { train_default_choice(spec, "optimizer", "sgd", limits::optimizers); });
  EXPECT_TRUE(has(e, "train.optimizer: 'rms' is not one of")) << e;
}

}  // namespace
}  // namespace freight
