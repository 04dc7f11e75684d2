#include "io/install_paths.h"

#include "core/engine_modules.h"

#include <fstream>
#include <system_error>

// How <prefix>/share/freight is reached from the installed library and program directories:
// relative paths that CMake computes from the install layout (GNUInstallDirs: lib may be
// lib/x86_64-linux-gnu, so "../share" is not a constant). The defaults are the usual layout.
#ifndef FREIGHT_LIB_TO_SHARE
#define FREIGHT_LIB_TO_SHARE "../share/freight"
#endif
#ifndef FREIGHT_BIN_TO_SHARE
#define FREIGHT_BIN_TO_SHARE "../share/freight"
#endif

namespace freight::io {

namespace fs = std::filesystem;

namespace {
// `p` made absolute and free of "." and ".." where the file system allows, else as it was.
fs::path tidy(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

std::optional<fs::path> read_marker(const fs::path& dir) {
  if (dir.empty()) return std::nullopt;
  std::ifstream in(dir / kBuildTreeMarker);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) return std::nullopt;
  std::error_code ec;
  if (!fs::is_directory(line, ec)) return std::nullopt;
  return fs::path(line);
}
}  // namespace

fs::path library_dir() {
  return detail::engine_library_dir();
}

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

std::vector<fs::path> installed_share_dirs() {
  std::vector<fs::path> dirs;
  auto add = [&](const fs::path& base, const char* to_share) {
    if (base.empty()) return;
    fs::path d = tidy(base / to_share);
    for (const fs::path& seen : dirs)
      if (seen == d) return;
    dirs.push_back(d);
  };
  add(library_dir(), FREIGHT_LIB_TO_SHARE);
  add(executable_dir(), FREIGHT_BIN_TO_SHARE);
  return dirs;
}

std::optional<fs::path> build_tree_source_dir() {
  if (auto src = read_marker(library_dir())) return src;
  return read_marker(executable_dir());
}

std::vector<fs::path> split_path_list(const char* list) {
  std::vector<fs::path> dirs;
  if (list == nullptr) return dirs;
  std::string s(list);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) dirs.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return dirs;
}

}  // namespace freight::io
