// freight eval: loss and accuracy of a checkpoint on a dataset split.
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "freight/training.h"

namespace freight::cli {

void add_eval(CLI::App& app) {
  struct Opts {
    std::string checkpoint, data, split = "test", device = "auto";
    int64_t batch_size = 1000, limit = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint written by freight train");
  cmd->add_option("checkpoint,--checkpoint", o->checkpoint, "Checkpoint (.safetensors)")
      ->required();
  cmd->add_option("--data", o->data, "Dataset (default: the one the model trained on)");
  cmd->add_option("--split", o->split, "Dataset split")
      ->capture_default_str()
      ->check(one_of(limits::splits));
  cmd->add_option("--device,-d", o->device, "cpu | cuda | cuda:N | auto")->capture_default_str();
  cmd->add_option("--batch-size,-b", o->batch_size, "Batch size")
      ->capture_default_str()
      ->check(in_range(limits::batch_size));
  // 0 (all samples) is the default when the flag is not given, not a value to type.
  cmd->add_option("--limit", o->limit, "Evaluate the first N samples only")
      ->check(in_range(limits::count));
  cmd->callback([o] {
    EvalResult r =
        evaluate_checkpoint(o->checkpoint, o->data, o->split, o->device, o->batch_size, o->limit);
    if (!r.non_finite.empty())
      fmt::print(stderr,
                 "freight: warning: checkpoint {} holds NaN or infinite weights: {}; its loss and "
                 "accuracy below say little (was it saved from a diverged run?)\n",
                 o->checkpoint, r.non_finite);
    for (const std::string& n : r.data_notes) fmt::print("{}\n", n);
    if (!r.class_names.empty()) {
      // Index -> name, as the checkpoint saved them (a vocabulary: its first and last words).
      const size_t n = r.class_names.size(), head = n > 24 ? 20 : n;
      std::string list;
      for (size_t i = 0; i < head; ++i)
        list += fmt::format("{}{} {}", i ? ", " : "", i, r.class_names[i]);
      if (head < n)
        list += fmt::format(", ..., {} {} (all {} in the checkpoint's \"class_names\" metadata)",
                            n - 1, r.class_names[n - 1], n);
      // (A language model's classes are its vocabulary: a word's id is its class.)
      fmt::print("{} ({}): {}\n", r.perplexity > 0 ? "vocabulary" : "classes", n, list);
    }
    fmt::print("{}: {} samples, loss {:.4f}{}, accuracy {:.2f}% ({:.1f} s)\n", o->checkpoint,
               r.samples, r.loss,
               r.perplexity > 0 ? fmt::format(", perplexity {:.2f}", r.perplexity) : std::string(),
               100 * r.accuracy, r.seconds);
  });
}

}  // namespace freight::cli
