// Layers built on the conv, pooling, batch-norm and LSTM ops: training versus
// evaluation behaviour, shapes, FLOPs and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "freight/freight.h"
#include "freight/nn/nn.h"

namespace freight {
namespace {

using namespace freight::nn;

TEST(NnLayers, BatchNormTrainingAndEvaluation) {
  BatchNorm1d bn(3);
  // Channel c has mean 2c + 1 and std c + 1.
  Generator gen(4);
  Tensor z = Tensor::normal({64, 3}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor x = add(mul(z, Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})),
                 Tensor::from_vector(std::vector<float>{1, 3, 5}, {3}));
  std::vector<float> xv = x.to_float_vector();
  std::vector<double> mean(3, 0), var(3, 0);
  for (int n = 0; n < 64; ++n)
    for (int c = 0; c < 3; ++c) mean[c] += xv[n * 3 + c] / 64.0;
  for (int n = 0; n < 64; ++n)
    for (int c = 0; c < 3; ++c) var[c] += std::pow(xv[n * 3 + c] - mean[c], 2);

  // Training: the batch statistics normalise (biased variance), the running
  // ones move by momentum 0.1 towards the batch mean and the unbiased batch
  // variance.
  std::vector<float> y = bn(x).to_float_vector();
  for (int c = 0; c < 3; ++c) {
    double inv = 1 / std::sqrt(var[c] / 64 + 1e-5);
    for (int n = 0; n < 64; n += 9)
      EXPECT_NEAR(y[n * 3 + c], (xv[n * 3 + c] - mean[c]) * inv, 1e-4);
    EXPECT_NEAR(bn.running_mean().to_float_vector()[c], 0.1 * mean[c], 1e-5);
    EXPECT_NEAR(bn.running_var().to_float_vector()[c], 0.9 + 0.1 * var[c] / 63, 1e-4);
  }
  EXPECT_EQ(bn.num_batches_tracked().item(), 1);

  // Evaluation: the running statistics normalise and nothing is updated.
  bn.eval();
  std::vector<float> rm = bn.running_mean().to_float_vector();
  std::vector<float> rv = bn.running_var().to_float_vector();
  std::vector<float> ye = bn(x).to_float_vector();
  for (int c = 0; c < 3; ++c)
    for (int n = 0; n < 64; n += 7)
      EXPECT_NEAR(ye[n * 3 + c], (xv[n * 3 + c] - rm[c]) / std::sqrt(rv[c] + 1e-5), 1e-4);
  EXPECT_EQ(bn.running_mean().to_float_vector(), rm);
  EXPECT_EQ(bn.num_batches_tracked().item(), 1);

  // Rank and channel checks name the layer.
  try {
    bn(Tensor::zeros({4, 5}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BatchNorm1d(3)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BatchNorm2d(3)(Tensor::zeros({4, 3})), Error);
  EXPECT_EQ(BatchNorm2d(3)(Tensor::normal({2, 3, 4, 4})).shape(), (Shape{2, 3, 4, 4}));
}

TEST(NnLayers, ConvAndPoolingShapesFlopsAndErrors) {
  Conv2d conv(3, 8, 5, 1, 2);
  EXPECT_EQ(conv.describe(), "Conv2d(3, 8, kernel=5, padding=2)");
  EXPECT_EQ(conv.weight().shape(), (Shape{8, 3, 5, 5}));
  EXPECT_EQ(conv.output_shape({2, 3, 28, 28}), (Shape{2, 8, 28, 28}));
  // 2·O·OH·OW·C·kh·kw per image
  EXPECT_EQ(conv.flops({2, 3, 28, 28}), 2.0 * 2 * 8 * 28 * 28 * 3 * 5 * 5);
  Tensor x = Tensor::normal({2, 3, 12, 10});
  EXPECT_EQ(conv(x).shape(), conv.output_shape(x.shape()));
  Conv2d strided(3, 4, {3, 2}, 2, 0, {2, 1}, false);
  // H: (12 − 2·2 − 1)/2 + 1 = 4; W: (10 − 1·1 − 1)/2 + 1 = 5
  EXPECT_EQ(strided.output_shape(x.shape()), (Shape{2, 4, 4, 5}));
  EXPECT_EQ(strided(x).shape(), (Shape{2, 4, 4, 5}));
  EXPECT_EQ(strided.named_parameters().size(), 1u);
  try {
    conv(Tensor::zeros({2, 4, 8, 8}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Conv2d(3, 8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 4, 8, 8]"), std::string::npos) << e.what();
  }

  MaxPool2d pool(2);
  EXPECT_EQ(pool.describe(), "MaxPool2d(kernel=2, stride=2)");
  EXPECT_EQ(pool.output_shape({2, 3, 12, 10}), (Shape{2, 3, 6, 5}));
  Tensor p = pool(x);
  EXPECT_EQ(p.shape(), (Shape{2, 3, 6, 5}));
  std::vector<float> xv = x.to_float_vector(), pv = p.to_float_vector();
  // Element (0, 0, 1, 2) is the max of rows 2..3, columns 4..5.
  float m = -1e30f;
  for (int r = 2; r < 4; ++r)
    for (int c = 4; c < 6; ++c) m = std::max(m, xv[r * 10 + c]);
  EXPECT_EQ(pv[1 * 5 + 2], m);
  AvgPool2d avg(3, 1, 1);
  EXPECT_EQ(avg(x).shape(), x.shape());
  EXPECT_EQ(avg.flops({1, 1, 4, 4}), 16.0 * 9);
  EXPECT_THROW(pool.output_shape({2, 3, 12}), Error);
}

TEST(NnLayers, LstmStacksLayersAndKeepsFinalStates) {
  manual_seed(5);
  LSTM lstm(3, 4, 2);
  Tensor x = Tensor::normal({2, 5, 3});
  Tensor y = lstm(x);
  EXPECT_EQ(y.shape(), (Shape{2, 5, 4}));
  EXPECT_EQ(lstm.h_n().shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(lstm.c_n().shape(), (Shape{2, 2, 4}));
  // The top layer's last hidden state is the last output step.
  EXPECT_TRUE(test::all_close(lstm.h_n().select(0, 1), y.select(1, -1), 0, 1e-7));
  // Layer 1 reads layer 0's outputs: rebuild the stack from lstm_layer and the
  // named weights.
  NamedTensors p = lstm.named_parameters();
  LstmResult l0 =
      lstm_layer(x, Tensor(), Tensor(), p[0].second, p[1].second, p[2].second, p[3].second);
  LstmResult l1 =
      lstm_layer(l0.output, Tensor(), Tensor(), p[4].second, p[5].second, p[6].second, p[7].second);
  EXPECT_TRUE(test::all_close(y, l1.output, 0, 0));
  EXPECT_TRUE(test::all_close(lstm.c_n().select(0, 0), l0.c_n, 0, 0));
  // Given initial states change the result.
  Tensor h0 = Tensor::normal({2, 2, 4}), c0 = Tensor::normal({2, 2, 4});
  EXPECT_GT(test::max_abs_diff(lstm.forward(x, h0, c0), y), 1e-4);
  EXPECT_THROW(lstm.forward(x, Tensor::zeros({1, 2, 4}), Tensor()), Error);
  EXPECT_THROW(lstm(Tensor::zeros({2, 5, 4})), Error);
  // Gradients reach every layer's weights.
  sum(lstm(x)).backward();
  for (auto& [n, t] : lstm.named_parameters()) EXPECT_TRUE(t.grad().defined()) << n;
  EXPECT_EQ(lstm.describe(), "LSTM(3, 4, num_layers=2)");
  EXPECT_EQ(lstm.flops({2, 5, 3}),
            10.0 * (2.0 * 16 * (3 + 4) + 40) + 10.0 * (2.0 * 16 * (4 + 4) + 40));
}

TEST(NnLayers, SequenceClassifierShapes) {
  // Sequence classifier: Embedding → LSTM → LastStep → Linear.
  Sequential clf({std::make_shared<Embedding>(10, 3), std::make_shared<LSTM>(3, 5),
                  std::make_shared<LastStep>(), std::make_shared<Linear>(5, 2)});
  EXPECT_EQ(clf.output_shape({4, 7}), (Shape{4, 2}));
  EXPECT_EQ(clf(Tensor::randint({4, 7}, 0, 10)).shape(), (Shape{4, 2}));
}

}  // namespace
}  // namespace freight
