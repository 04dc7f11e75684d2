// Seeded random numbers. A Generator is a Philox-4x32-10 counter-based stream: draw i of a
// kernel is a pure function of (seed, offset + i), so the CPU and the GPU can produce the same
// numbers (dropout masks, initialisation) for the same seed without sharing state.
#pragma once
#include <cstdint>

namespace freight {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `n` counters (each yields 4 x 32 random bits) and returns the first one.
  uint64_t reserve(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

// The process-wide generator used when none is passed (initialisation, dropout, shuffling).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace freight
