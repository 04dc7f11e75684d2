// freight::Error: the one exception type. Messages name the op, layer, file or flag involved,
// the shapes, and what to do about it.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace freight {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A device allocator could not serve a request, even after giving its cached blocks back. The
// numbers let a caller that knows more (the trainer knows the batch size) say what would fit.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& what, size_t requested, size_t free_bytes, size_t in_use)
      : Error(what), requested_(requested), free_(free_bytes), in_use_(in_use) {}
  size_t requested() const { return requested_; }  // bytes asked for
  size_t free_bytes() const { return free_; }      // bytes the device had free (0: unknown)
  size_t in_use() const { return in_use_; }        // bytes held by live tensors at the time

 private:
  size_t requested_, free_, in_use_;
};

}  // namespace freight

// Throws freight::Error with the message built from the remaining arguments (any expression that
// yields a std::string; inside the library that is usually fmt::format(...)). The message is only
// built when the check fails.
#define FREIGHT_CHECK(cond, ...)           \
  do {                                     \
    if (!(cond)) [[unlikely]]              \
      throw ::freight::Error(__VA_ARGS__); \
  } while (0)
