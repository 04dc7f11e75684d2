// fork/exec with pipes for the JSON-lines workers, and one-shot commands.
#include "bench/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "freight/error.h"
#include "io/install_paths.h"

extern char** environ;

namespace freight::bench {

namespace {
// The current environment with `changes` applied, as NAME=VALUE strings.
std::vector<std::string> environment_with(const EnvChanges& changes) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [name, value] : changes) {
    if (value)
      env[name] = *value;
    else
      env.erase(name);
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In a forked child: stdout/stderr to the log (stdout too when `both`), or die.
void redirect_to_log(const std::string& log_path, bool both) {
  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) _exit(126);
  ::dup2(fd, STDERR_FILENO);
  if (both) ::dup2(fd, STDOUT_FILENO);
}
}  // namespace

JsonLinesWorker::JsonLinesWorker(const std::vector<std::string>& argv, const EnvChanges& env,
                                 std::string log_path)
    : log_path_(std::move(log_path)) {
  FREIGHT_CHECK(!argv.empty(), "JsonLinesWorker: empty command");
  int in[2], out[2];
  FREIGHT_CHECK(::pipe2(in, O_CLOEXEC) == 0 && ::pipe2(out, O_CLOEXEC) == 0,
                fmt::format("cannot create pipes for {}: {}", argv[0], std::strerror(errno)));
  std::vector<std::string> args = argv, envs = environment_with(env);
  std::vector<char*> cargs = c_strings(args), cenv = c_strings(envs);
  pid_ = ::fork();
  if (pid_ < 0) {
    throw Error(fmt::format("cannot start {}: fork failed: {}", argv[0], std::strerror(errno)));
  }
  if (pid_ == 0) {
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    redirect_to_log(log_path_, false);
    ::execve(cargs[0], cargs.data(), cenv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", cargs[0], std::strerror(errno));
    _exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  greeting_ = read_json();
}

JsonLinesWorker::~JsonLinesWorker() {
  if (to_child_ >= 0) ::close(to_child_);
  if (from_child_ >= 0) ::close(from_child_);
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  std::error_code ec;  // an empty log says nothing: leave no file behind
  if (std::filesystem::exists(log_path_, ec) && std::filesystem::file_size(log_path_, ec) == 0)
    std::filesystem::remove(log_path_, ec);
}

std::string log_tail(const std::string& log_path) {
  std::ifstream f(log_path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > 2000) s = "..." + s.substr(s.size() - 2000);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "(its log " + log_path + " is empty)"
                   : "its log " + log_path + " ends with:\n" + s;
}

std::string JsonLinesWorker::log_tail() const {
  return bench::log_tail(log_path_);
}

nlohmann::json JsonLinesWorker::read_json() {
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.empty() || line[0] != '{') continue;  // stray output (a library's banner)
      try {
        return nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error(fmt::format("worker answered a line that is not JSON ({}): {}", e.what(),
                                line.substr(0, 200)));
      }
    }
    char buf[4096];
    ssize_t n = ::read(from_child_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(fmt::format("the worker process exited; {}", log_tail()));
    buffer_.append(buf, size_t(n));
  }
}

nlohmann::json JsonLinesWorker::request(const nlohmann::json& req) {
  std::string line = req.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(to_child_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(fmt::format("the worker process exited; {}", log_tail()));
    done += size_t(n);
  }
  return read_json();
}

int run_command(const std::vector<std::string>& argv, const std::string& cwd,
                const std::string& log_path) {
  if (argv.empty()) return 127;
  std::vector<std::string> args = argv;
  std::vector<char*> cargs = c_strings(args);
  std::fflush(nullptr);  // what we printed comes before what the child prints
  pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) _exit(127);
    int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    if (!log_path.empty()) redirect_to_log(log_path, true);
    ::execvp(cargs[0], cargs.data());
    std::fprintf(stderr, "cannot run %s: %s\n", cargs[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string default_pytorch_script() {
  // The script imports its neighbours and reads ../../models, so it runs from a source tree only;
  // an installed Freight is given one with --pytorch-script.
  auto src = io::build_tree_source_dir();
  return src ? (*src / "bench" / "pytorch" / "step_bench.py").string() : std::string();
}

bool program_in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string p = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(p.c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace freight::bench
