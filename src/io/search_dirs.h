// The places where Freight looks for the model zoo and for named datasets, in order, and the
// error text that lists them when nothing is found. Models: FREIGHT_MODEL_PATH, the older
// FREIGHT_MODELS_DIR, <prefix>/share/freight/models, the build tree's source models/. Data:
// FREIGHT_DATA_DIR, <prefix>/share/freight/data, the build tree's source data/, then the system
// data directories of the XDG convention ($XDG_DATA_DIRS, default /usr/local/share:/usr/share)
// followed by datasets/, where Debian's dataset-* packages put theirs. An explicit path given by
// the user (--model x.json, --data DIR) is used as it is and never searched.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace freight::io {

// One directory on a search list and what put it there ("FREIGHT_MODEL_PATH", ...).
struct SearchDir {
  std::filesystem::path dir;
  std::string origin;
};

// Directories that may hold <model>.json, in the order they are searched.
std::vector<SearchDir> model_search_dirs();
// Directories that may hold a dataset's directory (<dir>/<dataset>), in order.
std::vector<SearchDir> data_search_dirs();

// The first dir/name that exists, if any.
std::optional<std::filesystem::path> find_in(const std::vector<SearchDir>& dirs,
                                             const std::filesystem::path& name);

// "  1. /first/dir/name (origin)\n  2. ..." : every place find_in looked, in order, for errors.
std::string describe_search(const std::vector<SearchDir>& dirs, const std::filesystem::path& name);

}  // namespace freight::io
