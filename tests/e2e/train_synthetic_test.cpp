// End-to-end training with the C++ API on synthetic, learnable data: an MLP on Gaussian
// clusters, LeNet-5 on noisy class-prototype images, and an LSTM classifier on noisy
// class-prototype sequences. Each must drive the loss below a stated threshold and classify
// held-out samples accurately, within a few seconds on two cores.
#include <gtest/gtest.h>

#include <chrono>

#include "freight/freight.h"
#include "freight/nn/nn.h"
#include "freight/optim/optim.h"

namespace freight {
namespace {

using namespace freight::nn;

struct Data {
  Tensor x;       // [N, ...]
  Tensor labels;  // int64 [N]
};

// Class k's samples are prototype_k + noise·N(0, 1), with prototypes ~ N(0, 1) of shape `item`
// (multiplied by `signal`, broadcast to `item`, when given: zeros there leave only noise).
// Train and test sets share the prototypes and differ in the noise.
std::pair<Data, Data> prototype_data(const Shape& item, int64_t classes, int64_t n_train,
                                     int64_t n_test, double noise, uint64_t seed,
                                     const Tensor& signal = Tensor()) {
  Generator gen(seed);
  Shape proto_shape = item;
  proto_shape.insert(proto_shape.begin(), classes);
  Tensor protos = Tensor::normal(proto_shape, 0, 1, DType::F32, Device::cpu(), &gen);
  if (signal.defined()) protos = mul(protos, signal);
  auto make = [&](int64_t n) {
    Tensor labels = Tensor::randint({n}, 0, classes, Device::cpu(), &gen);
    std::vector<Tensor> rows;
    for (int64_t k : labels.to_int_vector()) rows.push_back(protos.select(0, k));
    Tensor clean = stack(rows, 0);
    Tensor x = add(clean, Tensor::normal(clean.shape(), 0, noise, DType::F32, Device::cpu(), &gen));
    return Data{x, labels};
  };
  Data train = make(n_train);
  Data test = make(n_test);
  return {train, test};
}

double accuracy(Module& model, const Data& d) {
  NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> pred = argmax(model(d.x), 1).to_int_vector();
  std::vector<int64_t> want = d.labels.to_int_vector();
  model.train();
  int64_t right = 0;
  for (size_t i = 0; i < pred.size(); ++i) right += pred[i] == want[i];
  return double(right) / double(pred.size());
}

// Mini-batch training for `epochs`; returns the mean loss of the last epoch.
double train(Module& model, optim::Optimizer& opt, const Data& d, int64_t batch, int epochs,
             optim::LRScheduler* sched = nullptr) {
  int64_t n = d.x.size(0);
  double last = 0;
  for (int e = 0; e < epochs; ++e) {
    double total = 0;
    int64_t batches = 0;
    for (int64_t at = 0; at < n; at += batch) {
      int64_t end = std::min(n, at + batch);
      Tensor xb = d.x.slice(0, at, end), yb = d.labels.slice(0, at, end);
      opt.zero_grad();
      Tensor loss = cross_entropy(model(xb), yb);
      loss.backward();
      opt.step();
      if (sched) sched->step();
      total += loss.item();
      ++batches;
    }
    last = total / double(batches);
  }
  return last;
}

// Each run takes about a second or less on two idle cores; the limit only catches a pathological
// slowdown and leaves room for a machine shared with other jobs.
constexpr double kTimeLimit = 60.0;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(TrainSynthetic, MlpOnGaussianClusters) {
  manual_seed(1);
  // 4 clusters in 10-D: centres ~ N(0, 1) (about 4.5 apart), points with N(0, 0.75²) noise,
  // so the Bayes error is well below 1%.
  auto [train_set, test_set] = prototype_data({10}, 4, 1024, 512, 0.75, 17);
  Sequential model({std::make_shared<Linear>(10, 64), std::make_shared<ReLU>(),
                    std::make_shared<Linear>(64, 64), std::make_shared<ReLU>(),
                    std::make_shared<Linear>(64, 4)});
  double before = accuracy(model, test_set);
  optim::SGD opt(model.parameters(), 0.05, 0.9, 0, 1e-4, true);
  auto t0 = std::chrono::steady_clock::now();
  double loss = train(model, opt, train_set, 64, 15);
  double secs = seconds_since(t0);
  double acc = accuracy(model, test_set);
  std::cout << "MLP: loss " << loss << ", accuracy " << acc << " (before " << before << "), "
            << secs << " s\n";
  EXPECT_LT(loss, 0.1);
  EXPECT_GT(acc, 0.95);
  EXPECT_LT(secs, kTimeLimit);
}

TEST(TrainSynthetic, LeNet5OnPrototypeImages) {
  manual_seed(2);
  // 10 classes of 28x28 images: a random prototype per class plus N(0, 0.8²) pixel noise.
  auto [train_set, test_set] = prototype_data({1, 28, 28}, 10, 512, 256, 0.8, 23);
  Sequential lenet({std::make_shared<Conv2d>(1, 6, 5, 1, 2), std::make_shared<ReLU>(),
                    std::make_shared<MaxPool2d>(2), std::make_shared<Conv2d>(6, 16, 5),
                    std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
                    std::make_shared<Flatten>(), std::make_shared<Linear>(400, 120),
                    std::make_shared<ReLU>(), std::make_shared<Linear>(120, 84),
                    std::make_shared<ReLU>(), std::make_shared<Linear>(84, 10)});
  EXPECT_EQ(lenet.output_shape({64, 1, 28, 28}), (Shape{64, 10}));
  EXPECT_EQ(lenet.num_parameters(), 61706);  // LeNet-5's well-known count
  optim::Adam opt(lenet.parameters(), 2e-3);
  auto t0 = std::chrono::steady_clock::now();
  double loss = train(lenet, opt, train_set, 64, 8);
  double secs = seconds_since(t0);
  double acc = accuracy(lenet, test_set);
  std::cout << "LeNet-5: loss " << loss << ", accuracy " << acc << ", " << secs << " s\n";
  EXPECT_LT(loss, 0.1);
  EXPECT_GT(acc, 0.95);
  EXPECT_LT(secs, kTimeLimit);
}

TEST(TrainSynthetic, LstmClassifierOnPrototypeSequences) {
  manual_seed(3);
  // 3 classes of sequences [T = 12, I = 4]: a prototype per class over the first 4 steps only,
  // plus N(0, 0.7²) noise everywhere, so the classifier reading the last step must carry the
  // class through 8 steps of noise (gradients flow back through time).
  std::vector<float> first4(12, 0.0f);
  for (int t = 0; t < 4; ++t) first4[t] = 1.0f;
  auto [train_set, test_set] =
      prototype_data({12, 4}, 3, 512, 256, 0.7, 31, Tensor::from_vector(first4, {12, 1}));
  Sequential model({std::make_shared<LSTM>(4, 24), std::make_shared<LastStep>(),
                    std::make_shared<Linear>(24, 3)});
  optim::AdamW opt(model.parameters(), 1e-2);
  int epochs = 30;
  optim::OneCycleLR sched(opt, 2e-2, epochs * 8);
  auto t0 = std::chrono::steady_clock::now();
  double loss = train(model, opt, train_set, 64, epochs, &sched);
  double secs = seconds_since(t0);
  double acc = accuracy(model, test_set);
  std::cout << "LSTM: loss " << loss << ", accuracy " << acc << ", " << secs << " s\n";
  EXPECT_LT(loss, 0.1);
  EXPECT_GT(acc, 0.95);
  EXPECT_LT(secs, kTimeLimit);
}

}  // namespace
}  // namespace freight
