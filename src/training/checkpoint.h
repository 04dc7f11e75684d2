// Checkpoints on disk, and how a save stays recoverable when the process dies half-way.
//
// A checkpoint is two files:
//   <path>              the model's state_dict (PyTorch names) and metadata: a plain safetensors
//                       file that PyTorch loads with a strict load_state_dict
//   <path>.train        the optimizer state and the counters and RNG state needed to resume
//                       exactly (kept out of <path> for that reason)
// Each file is replaced atomically (io::save_safetensors: temporary, fsync, rename), but two
// files cannot be replaced by one rename, so a save commits in this order:
//   1. the new training state is written to <path>.train.next
//   2. <path> is replaced                            <- the commit point
//   3. <path>.train.next is renamed over <path>.train
// Both files of a save carry the same "step" and "save_id" metadata. A crash (kill -9, power)
// leaves one of these states, and open_for_resume picks the training state that belongs to
// <path> in each:
//   during or after 1, before 2: <path> and .train are the previous save (a .train.next that
//                                belongs to no checkpoint is left over: removed)
//   after 2, before 3:           <path> is the new save, its state is in .train.next (the
//                                rename is completed)
//   after 3:                     both agree.
// Internal to the library.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "freight/io/safetensors.h"

namespace freight::detail {

std::string train_state_path(const std::string& checkpoint);   // <checkpoint>.train
std::string staged_state_path(const std::string& checkpoint);  // <checkpoint>.train.next

// The stages of commit_checkpoint, for tests that simulate a crash after each.
enum class CommitStage { state_staged, checkpoint_replaced, state_renamed };

// Saves a checkpoint pair in the order above. `meta` and `state_meta` must both hold the same
// "step"; a fresh "save_id" is added to both. `after_stage`, when set, runs after each stage
// (tests throw from it to leave the files as a crash at that point would).
void commit_checkpoint(const std::string& path, const io::NamedTensors& model, io::Metadata meta,
                       const io::NamedTensors& state, io::Metadata state_meta,
                       const std::function<void(CommitStage)>& after_stage = {});

struct ResumeFiles {
  io::SafetensorsFile checkpoint, state;
  bool completed_commit = false;  // the state came from .train.next (a save cut off after 2)
};
// Loads a checkpoint and the training state that belongs to it, finishing an interrupted commit
// (see above). Errors name the files and their steps.
ResumeFiles open_for_resume(const std::string& path);

// Reads the string fields of a training state (or checkpoint) with checks: a missing field or a
// value that does not parse is a freight::Error naming the file, the field and the value.
class FieldReader {
 public:
  FieldReader(const io::Metadata& meta, std::string file) : meta_(meta), file_(std::move(file)) {}
  const std::string& text(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t min = INT64_MIN) const;
  uint64_t unsigned_integer(const std::string& key) const;
  double real(const std::string& key) const;  // finite values only
  bool has(const std::string& key) const { return meta_.count(key) > 0; }

 private:
  const io::Metadata& meta_;
  std::string file_;
};

}  // namespace freight::detail
