// Where this Freight is: the directories of the loaded library and of the running program, and
// from them the installed share directory (<prefix>/share/freight) or, in a build tree, the
// source tree it was built from. Nothing here is a path compiled into the binary: the installed
// layout is found relative to the library, and a build tree names its source tree in a small file
// that CMake writes next to the library (kBuildTreeMarker), never installed.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace freight::io {

// The file a build tree holds next to libfreight.so (and the freight program): one line, the
// absolute path of the source tree. Written by CMake at configure time; `cmake --install` leaves
// it out, so an installed Freight never looks into a source tree.
inline constexpr const char* kBuildTreeMarker = "freight-source-dir.txt";

// The directory of the loaded libfreight.so (found with dladdr on one of its functions), empty
// when the loader cannot say.
std::filesystem::path library_dir();

// The directory of the running executable (/proc/self/exe), empty when unreadable.
std::filesystem::path executable_dir();

// <prefix>/share/freight as reached from the library's directory (<prefix>/lib) and from the
// executable's (<prefix>/bin), in that order, without repeats; a directory is listed whether or
// not it exists (the caller says where it looked).
std::vector<std::filesystem::path> installed_share_dirs();

// The source tree named by a build tree's marker file next to the library or the executable, when
// there is one and it names an existing directory.
std::optional<std::filesystem::path> build_tree_source_dir();

// The entries of a colon-separated list of directories ($PATH style), empty entries dropped;
// nullptr gives none.
std::vector<std::filesystem::path> split_path_list(const char* list);

}  // namespace freight::io
