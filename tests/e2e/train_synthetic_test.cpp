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

// Class k's samples are prototype_k + noise·N(0, 1), with prototypes ~ N(0, 1) of shape `item`.
// Train and test sets share the prototypes and differ in the noise.
std::pair<Data, Data> prototype_data(const Shape& item, int64_t classes, int64_t n_train,
                                     int64_t n_test, double noise, uint64_t seed) {
  Generator gen(seed);
  Shape proto_shape = item;
  proto_shape.insert(proto_shape.begin(), classes);
  Tensor protos = Tensor::normal(proto_shape, 0, 1, DType::F32, Device::cpu(), &gen);
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
  EXPECT_LT(secs, 10.0);
}

}  // namespace
}  // namespace freight
