#include "io/search_dirs.h"

#include <fmt/format.h>

#include <cstdlib>
#include <system_error>

#include "io/install_paths.h"

namespace freight::io {

namespace fs = std::filesystem;

namespace {
void add_list(std::vector<SearchDir>& dirs, const char* variable, const std::string& origin) {
  for (const fs::path& d : split_path_list(std::getenv(variable))) dirs.push_back({d, origin});
}

// <share>/<sub> for each installed share directory, then <source>/<sub> of a build tree.
void add_installed_and_build_tree(std::vector<SearchDir>& dirs, const char* sub) {
  for (const fs::path& share : installed_share_dirs())
    dirs.push_back(
        {share / sub,
         "an installed Freight's share directory, relative to libfreight.so or the program"});
  if (auto src = build_tree_source_dir())
    dirs.push_back({*src / sub, fmt::format("the source tree that {} in the build directory names",
                                            kBuildTreeMarker)});
}
}  // namespace

std::vector<SearchDir> model_search_dirs() {
  std::vector<SearchDir> dirs;
  add_list(dirs, "FREIGHT_MODEL_PATH", "FREIGHT_MODEL_PATH");
  add_list(dirs, "FREIGHT_MODELS_DIR", "FREIGHT_MODELS_DIR, the older name of FREIGHT_MODEL_PATH");
  add_installed_and_build_tree(dirs, "models");
  return dirs;
}

std::vector<SearchDir> data_search_dirs() {
  std::vector<SearchDir> dirs;
  add_list(dirs, "FREIGHT_DATA_DIR", "FREIGHT_DATA_DIR");
  add_installed_and_build_tree(dirs, "data");
  // The XDG base directory convention: an unset or empty XDG_DATA_DIRS means this default.
  const char* xdg = std::getenv("XDG_DATA_DIRS");
  bool unset = xdg == nullptr || xdg[0] == '\0';
  std::string origin = unset ? "the system data directories (XDG_DATA_DIRS unset: its default)"
                             : "the system data directories (XDG_DATA_DIRS)";
  for (const fs::path& d : split_path_list(unset ? "/usr/local/share:/usr/share" : xdg))
    dirs.push_back({d / "datasets", origin});
  return dirs;
}

std::optional<fs::path> find_in(const std::vector<SearchDir>& dirs, const fs::path& name) {
  for (const SearchDir& d : dirs) {
    std::error_code ec;
    fs::path p = d.dir / name;
    if (fs::exists(p, ec)) return p;
  }
  return std::nullopt;
}

std::string describe_search(const std::vector<SearchDir>& dirs, const fs::path& name) {
  if (dirs.empty()) return "  (nowhere: no directory to search)\n";
  std::string out;
  for (size_t i = 0; i < dirs.size(); ++i)
    out += fmt::format("  {}. {} ({})\n", i + 1, (dirs[i].dir / name).string(), dirs[i].origin);
  return out;
}

}  // namespace freight::io
