// Files that appear whole or not at all (checkpoints, the peaks cache), written without ever
// following a link planted where the temporary goes.
//
// A file is written to a fresh temporary beside it, `<name>.tmp.<pid>.<random>`, created with
// O_CREAT|O_EXCL|O_NOFOLLOW (so neither a symlink nor an existing file at that name is ever
// opened), fsynced, renamed over the target, and the directory fsynced so the rename survives a
// crash. The pid in the name lets a later save recognise temporaries whose writer died (kill -9
// during a save) and remove them; the random part makes the name unpredictable.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace freight::io {

// Appends bytes to the temporary; throws freight::Error naming the target when a write fails.
using WriteBytes = std::function<void(const void* data, size_t size)>;

// Writes `path` atomically with the bytes that `produce` hands to its argument (in as many
// pieces as it likes). `what` names the file in error messages ("checkpoint", "peaks cache").
// Stale temporaries of `path` are removed first (remove_stale_temporaries). On any error the
// temporary is removed, the target is left as it was, and freight::Error is thrown.
void write_file_atomically(const std::string& path,
                           const std::function<void(const WriteBytes&)>& produce,
                           const std::string& what = "file");
void write_file_atomically(const std::string& path, std::string_view bytes,
                           const std::string& what = "file");

// Makes `path` ready to be written by write_file_atomically, before any work that would be lost
// when it cannot be: refuses a path that names an existing directory, device, pipe or socket
// (the rename would replace it: `--save /dev/null` as root would leave a regular file there),
// creates its directory, and creates and removes a temporary there (a directory where no file
// can be made fails now). Throws freight::Error naming `what` and the path.
void prepare_target(const std::string& path, const std::string& what = "file");

// Removes the temporaries `<name>.tmp.<pid>` and `<name>.tmp.<pid>.<anything>` beside `path`
// whose writer (pid) no longer exists; those of live processes (another save in progress, this
// process) are kept. Links are removed themselves, never followed. Best effort: returns how
// many were removed and never throws.
size_t remove_stale_temporaries(const std::string& path);

}  // namespace freight::io
