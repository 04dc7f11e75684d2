// A run whose loss or weights became NaN or infinite. Both training loops and the guard before
// every checkpoint save throw it; train() catches it and adds what became of the last good
// checkpoint (kept, since nothing non-finite is ever saved). Internal.
#pragma once
#include "freight/error.h"

namespace freight::detail {

class DivergedError : public Error {
 public:
  using Error::Error;
};

}  // namespace freight::detail
