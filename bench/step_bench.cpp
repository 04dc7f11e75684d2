// Times Freight training steps of a zoo model on random data: forward, cross-entropy, backward,
// SGD with momentum (or Adam). Prints one JSON object, the same fields as
// bench/pytorch/step_bench.py, so the two can be compared row by row.
//
//   build/bench/freight_step_bench --model mlp --batch-size 64 --threads 2
#include <CLI/CLI.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "freight/freight.h"
#include "freight/nn/model_file.h"
#include "freight/training.h"

using namespace freight;

int main(int argc, char** argv) {
  std::string model_name = "mlp", optimizer = "sgd", device = "cpu";
  int64_t batch = 64, threads = 0, warmup = 20, steps = 50, repeats = 7;
  double lr = 0.01;
  CLI::App app{"Times training steps of a Freight model"};
  app.add_option("--model", model_name);
  app.add_option("--batch-size", batch);
  app.add_option("--threads", threads);
  app.add_option("--warmup", warmup);
  app.add_option("--steps", steps);
  app.add_option("--repeats", repeats);
  app.add_option("--lr", lr);
  app.add_option("--optimizer", optimizer);
  app.add_option("--device", device);
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) set_num_threads(int(threads));
    Device dev = resolve_device(device);
    manual_seed(0);
    nn::ModelSpec spec = nn::load_model_spec(model_name);
    nn::ModulePtr model = nn::build_model(spec);
    model->to(dev);
    model->train();
    auto opt = make_optimizer(optimizer, model->parameters(), lr, 0.9, 0.0);
    Shape xs{batch};
    xs.insert(xs.end(), spec.input_shape.begin(), spec.input_shape.end());
    Generator g(1);
    Tensor x = spec.input_dtype == DType::I64
                   ? Tensor::randint(xs, 0, spec.vocab > 0 ? spec.vocab : spec.classes, dev, &g)
                   : Tensor::normal(xs, 0, 1, DType::F32, dev, &g);
    Shape ys{batch};
    if (spec.task == "language_model") ys = xs;
    Tensor y = Tensor::randint(ys, 0, spec.classes, dev, &g);
    auto step = [&] {
      opt->zero_grad();
      Tensor loss = model_loss(spec, (*model)(x), y);
      loss.backward();
      opt->step();
    };
    for (int64_t i = 0; i < warmup; ++i) step();
    synchronize(dev);
    std::vector<double> times;
    for (int64_t r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < steps; ++i) step();
      synchronize(dev);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      double(steps));
    }
    std::sort(times.begin(), times.end());
    nlohmann::json j{{"framework", "freight"},
                     {"model", spec.name},
                     {"batch_size", batch},
                     {"threads", num_threads()},
                     {"device", dev.str()},
                     {"blas", build_info()},
                     {"median_ms", 1e3 * times[times.size() / 2]},
                     {"min_ms", 1e3 * times.front()},
                     {"max_ms", 1e3 * times.back()},
                     {"peak_memory_bytes", memory_stats(dev).peak}};
    std::printf("%s\n", j.dump().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "freight_step_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
