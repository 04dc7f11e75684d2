// What every fuzz target shares: the input as a file (the parsers read paths, as users give them),
// and the rule that a bad file may only ever end in freight::Error. Any other exception (a
// std::bad_alloc, nlohmann's type_error, std::out_of_range) is what a user would see as
// "internal error", so it aborts the run and libFuzzer keeps the input as a crash.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "freight/error.h"

namespace freight::fuzz {

// One file per fuzzing process, rewritten for every input: `suffix` lets a reader that looks at
// the name (".gz") see the name it expects.
inline std::string write_input(const uint8_t* data, size_t size, const std::string& suffix = "") {
  static const std::string base = (std::filesystem::temp_directory_path() /
                                   ("freight-fuzz-" + std::to_string(::getpid()) + "-input"))
                                      .string();
  std::string path = base + suffix;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  f.close();
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot write the input to %s\n", path.c_str());
    std::abort();
  }
  return path;
}

// Runs `parse` on one input: a clean freight::Error is a pass, anything else thrown aborts.
template <class Fn>
void expect_clean(Fn&& parse) {
  try {
    parse();
  } catch (const freight::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: a bad input ended in a %s, not a freight::Error: %s\n",
                 typeid(e).name(), e.what());
    std::abort();
  }
}

}  // namespace freight::fuzz
