// Child processes of `freight bench`: long-lived JSON-lines workers (the PyTorch side,
// bench/pytorch/step_bench.py --serve) and one-shot commands (gnuplot).
#pragma once
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace freight::bench {

// Changes to the environment a child gets: a value sets the variable, nullopt removes it.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

// A child that reads one JSON request per line on its stdin and answers each with one JSON line
// on its stdout; its first line is a greeting (versions, libraries). Its stderr is appended to
// `log_path`, which error messages name.
class JsonLinesWorker {
 public:
  // Starts argv[0] (a path) with `env` applied and reads the greeting; throws freight::Error
  // (with the end of the log) when the child cannot start or exits before greeting.
  JsonLinesWorker(const std::vector<std::string>& argv, const EnvChanges& env,
                  std::string log_path);
  ~JsonLinesWorker();  // closes the child's stdin and waits for it to exit
  JsonLinesWorker(const JsonLinesWorker&) = delete;
  JsonLinesWorker& operator=(const JsonLinesWorker&) = delete;

  const nlohmann::json& greeting() const { return greeting_; }
  // Sends a request and waits for the answer; throws freight::Error when the child has died.
  nlohmann::json request(const nlohmann::json& request);

 private:
  nlohmann::json read_json();
  std::string log_tail() const;

  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffer_;  // bytes read past the last line
  std::string log_path_;
  nlohmann::json greeting_;
};

// Runs argv[0] (searched in PATH) with the arguments argv[1...] as they are, never through a
// shell, in directory `cwd` ("": ours) with stdout and stderr appended to `log_path` ("": ours),
// and returns its exit status (127 when it could not be started).
int run_command(const std::vector<std::string>& argv, const std::string& cwd,
                const std::string& log_path);

// The end of a child's log (its last 2000 bytes), for an error message: "its log <path> ends
// with:\n..." or "(its log <path> is empty)".
std::string log_tail(const std::string& log_path);

// bench/pytorch/step_bench.py of the source tree that a build tree names (io/install_paths.h;
// "" for an installed Freight, or when unknown).
std::string default_pytorch_script();

// True when `program` (a name) is found in PATH.
bool program_in_path(const std::string& program);

}  // namespace freight::bench
