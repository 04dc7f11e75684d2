#include "training/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "freight/error.h"
#include "io/atomic_file.h"

namespace freight::detail {

namespace {
namespace fs = std::filesystem;

// Distinct for every save of every process: the process, the time and a counter.
std::string new_save_id() {
  static std::atomic<uint64_t> counter{0};
  auto ns = std::chrono::system_clock::now().time_since_epoch() / std::chrono::nanoseconds(1);
  return fmt::format("{:x}-{:x}-{:x}", uint64_t(::getpid()), uint64_t(ns), counter++);
}

// Makes a rename in `file`'s directory durable (as io::save_safetensors does for its own).
void sync_directory_of(const fs::path& file) {
  fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

void rename_or_throw(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  FREIGHT_CHECK(!ec, fmt::format("cannot rename '{}' to '{}': {}", from, to, ec.message()));
  sync_directory_of(to);
}

std::string field(const io::Metadata& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

// Both files of one save: the same step and (since checkpoints carry one) the same save id.
bool same_save(const io::Metadata& checkpoint, const io::Metadata& state) {
  return field(checkpoint, "step") == field(state, "step") &&
         field(checkpoint, "save_id") == field(state, "save_id");
}
}  // namespace

std::string train_state_path(const std::string& checkpoint) {
  return checkpoint + ".train";
}
std::string staged_state_path(const std::string& checkpoint) {
  return checkpoint + ".train.next";
}

void commit_checkpoint(const std::string& path, const io::NamedTensors& model, io::Metadata meta,
                       const io::NamedTensors& state, io::Metadata state_meta,
                       const std::function<void(CommitStage)>& after_stage) {
  FREIGHT_CHECK(field(meta, "step") == field(state_meta, "step"),
                "commit_checkpoint: the checkpoint and its training state name different steps");
  std::string id = new_save_id();
  meta["save_id"] = id;
  state_meta["save_id"] = id;
  // The sidecar's final name is only ever renamed onto, so temporaries of it that older runs
  // killed mid-save left behind are cleaned here (save_safetensors cleans those of the others).
  io::remove_stale_temporaries(train_state_path(path));
  io::save_safetensors(staged_state_path(path), state, state_meta);
  if (after_stage) after_stage(CommitStage::state_staged);
  io::save_safetensors(path, model, meta);
  if (after_stage) after_stage(CommitStage::checkpoint_replaced);
  rename_or_throw(staged_state_path(path), train_state_path(path));
  if (after_stage) after_stage(CommitStage::state_renamed);
}

ResumeFiles open_for_resume(const std::string& path) {
  ResumeFiles f;
  f.checkpoint = io::load_safetensors(path);
  const io::Metadata& cm = f.checkpoint.metadata;
  std::string state = train_state_path(path), staged = staged_state_path(path);
  // What each candidate holds, for the message when neither belongs to the checkpoint.
  std::vector<std::string> seen;
  auto candidate = [&](const std::string& file, io::SafetensorsFile* out) {
    if (!fs::exists(file)) return false;
    try {
      *out = io::load_safetensors(file);
    } catch (const Error& e) {
      seen.push_back(fmt::format("{} cannot be read ({})", file, e.what()));
      return false;
    }
    if (same_save(cm, out->metadata)) return true;
    seen.push_back(fmt::format("{} is from step {}", file, field(out->metadata, "step")));
    return false;
  };
  if (candidate(state, &f.state)) {
    // A staged state beside a matching pair belongs to a save that never reached its commit.
    std::error_code ec;
    fs::remove(staged, ec);
    return f;
  }
  io::SafetensorsFile next;
  if (candidate(staged, &next)) {
    f.state = std::move(next);
    rename_or_throw(staged, state);  // the save's last stage
    f.completed_commit = true;
    return f;
  }
  if (seen.empty())
    throw Error(fmt::format(
        "--resume {}: no training state beside it ({}): the checkpoint was not written by "
        "freight train, or that file was removed; `freight eval` can still read the checkpoint",
        path, state));
  std::string list;
  for (const std::string& s : seen) list += (list.empty() ? "" : "; ") + s;
  throw Error(fmt::format(
      "--resume {}: the checkpoint is from step {} but no training state belongs to it ({}); a "
      "save was interrupted between the two files, or they were copied from different runs, so "
      "training cannot resume exactly (`freight eval` can still read the checkpoint)",
      path, field(cm, "step"), list));
}

const std::string& FieldReader::text(const std::string& key) const {
  auto it = meta_.find(key);
  FREIGHT_CHECK(it != meta_.end(), fmt::format("'{}': the field '{}' is missing (the file is "
                                               "damaged or from another program)",
                                               file_, key));
  return it->second;
}

namespace {
template <class T>
bool parse_whole(const std::string& s, T* out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && p == end && !s.empty();
}
}  // namespace

int64_t FieldReader::integer(const std::string& key, int64_t min) const {
  const std::string& s = text(key);
  int64_t v = 0;
  FREIGHT_CHECK(parse_whole(s, &v) && v >= min,
                fmt::format("'{}': the field '{}' = '{}' is not an integer{}", file_, key, s,
                            min == INT64_MIN ? "" : fmt::format(" >= {}", min)));
  return v;
}

uint64_t FieldReader::unsigned_integer(const std::string& key) const {
  const std::string& s = text(key);
  uint64_t v = 0;
  FREIGHT_CHECK(
      parse_whole(s, &v),
      fmt::format("'{}': the field '{}' = '{}' is not an unsigned integer", file_, key, s));
  return v;
}

double FieldReader::real(const std::string& key) const {
  const std::string& s = text(key);
  double v = 0;
  FREIGHT_CHECK(parse_whole(s, &v) && std::isfinite(v),
                fmt::format("'{}': the field '{}' = '{}' is not a finite number", file_, key, s));
  return v;
}

}  // namespace freight::detail
