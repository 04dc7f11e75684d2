// freight::Error: the one exception type. Messages name the op, layer, file or flag involved,
// the shapes, and what to do about it.
#pragma once
#include <stdexcept>
#include <string>

namespace freight {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace freight

// Throws freight::Error with the message built from the remaining arguments (any expression that
// yields a std::string; inside the library that is usually fmt::format(...)). The message is only
// built when the check fails.
#define FREIGHT_CHECK(cond, ...)                                 \
  do {                                                           \
    if (!(cond)) [[unlikely]] throw ::freight::Error(__VA_ARGS__); \
  } while (0)
