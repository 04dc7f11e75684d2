// cross_entropy and mse_loss: values against hand-computed examples, gradients in closed form,
// and the errors for bad labels, shapes and dtypes.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"

namespace freight {
namespace {

using test::error_of;
using test::has;

TEST(CrossEntropy, HandComputedExample) {
  // Row 0: logits (1, 2, 3), label 2: loss = log(e + e² + e³) − 3 = log(1 + e⁻¹ + e⁻²)
  //        = log(1.50321472) = 0.40760596.
  // Row 1: logits (1, 1, 1), label 0: loss = log 3 = 1.09861229.
  // Mean: 0.75310912.
  for (DType dtype : {DType::F32, DType::F64}) {
    Tensor logits = Tensor::from_vector(std::vector<double>{1, 2, 3, 1, 1, 1}, {2, 3}).to(dtype);
    Tensor labels = Tensor::from_vector(std::vector<int64_t>{2, 0}, {2});
    logits.set_requires_grad();
    Tensor loss = cross_entropy(logits, labels);
    EXPECT_EQ(loss.shape(), Shape{});
    EXPECT_EQ(loss.dtype(), dtype);
    EXPECT_NEAR(loss.item(), 0.75310912, 1e-6);
    loss.backward();
    // g = (softmax − onehot) / N; softmax of row 0 is (0.09003057, 0.24472847, 0.66524096).
    std::vector<double> g = logits.grad().to_double_vector();
    std::vector<double> want = {0.09003057 / 2,    0.24472847 / 2, (0.66524096 - 1) / 2,
                                (1.0 / 3 - 1) / 2, 1.0 / 6,        1.0 / 6};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
  }
}

TEST(CrossEntropy, EvaluationPathMatchesTrainingPath) {
  // Without gradients the kernel skips storing the probabilities; the loss must not change.
  Generator gen(3);
  Tensor logits = Tensor::normal({256, 10}, 0, 2, DType::F32, Device::cpu(), &gen);
  Tensor labels = Tensor::randint({256}, 0, 10, Device::cpu(), &gen);
  double eval;
  {
    NoGradGuard guard;
    eval = cross_entropy(logits, labels).item();
  }
  Tensor w = logits.detach().set_requires_grad();
  EXPECT_EQ(cross_entropy(w, labels).item(), eval);
}

TEST(CrossEntropy, LabelOutOfRangeNamesLabelPositionAndClasses) {
  Tensor logits = Tensor::zeros({3, 4});
  std::string m = error_of([&] {
    (void)cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 3, 7}, {3}));
  });
  EXPECT_TRUE(has(m, "cross_entropy")) << m;
  EXPECT_TRUE(has(m, "label 7")) << m;
  EXPECT_TRUE(has(m, "position 2")) << m;
  EXPECT_TRUE(has(m, "4 classes")) << m;
  m = error_of([&] {
    (void)cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, -1, 1}, {3}));
  });
  EXPECT_TRUE(has(m, "cross_entropy") && has(m, "label -1") && has(m, "position 1")) << m;
}

TEST(CrossEntropy, BadShapesAndDtypesNameTheOpAndShapes) {
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 1}, {2});
  std::string m = error_of([&] { (void)cross_entropy(Tensor::zeros({2, 3, 4}), labels); });
  EXPECT_TRUE(has(m, "cross_entropy") && has(m, "[2, 3, 4]")) << m;
  m = error_of([&] {
    (void)cross_entropy(Tensor::zeros({3, 5}), labels);  // 2 labels for 3 rows
  });
  EXPECT_TRUE(has(m, "cross_entropy") && has(m, "[2]") && has(m, "[3, 5]")) << m;
  m = error_of([&] { (void)cross_entropy(Tensor::zeros({2, 5}), Tensor::zeros({2})); });
  EXPECT_TRUE(has(m, "cross_entropy") && has(m, "int64") && has(m, "float32")) << m;
}

TEST(MseLoss, ValueAndGradients) {
  Tensor p = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}).set_requires_grad();
  Tensor t = Tensor::from_vector(std::vector<double>{0, 2, 5, 3}, {2, 2}).set_requires_grad();
  Tensor loss = mse_loss(p, t);
  EXPECT_EQ(loss.shape(), Shape{});
  EXPECT_DOUBLE_EQ(loss.item(), (1.0 + 0 + 4 + 1) / 4);  // differences 1, 0, −2, 1
  loss.backward();
  // d/dp = 2(p − t)/n = (0.5, 0, −1, 0.5); d/dt is its negation.
  EXPECT_EQ(p.grad().to_double_vector(), (std::vector<double>{0.5, 0, -1, 0.5}));
  EXPECT_EQ(t.grad().to_double_vector(), (std::vector<double>{-0.5, 0, 1, -0.5}));
}

TEST(MseLoss, ShapeMismatchNamesBothShapes) {
  std::string m = error_of([] { (void)mse_loss(Tensor::zeros({4, 3}), Tensor::zeros({4})); });
  EXPECT_TRUE(has(m, "mse_loss") && has(m, "[4, 3]") && has(m, "[4]")) << m;
}

}  // namespace
}  // namespace freight
