// Collectives among the ranks of the world (freight/dist.h), on host memory, over MPI. Every one
// is started nonblocking and then waited for by polling, so that a rank that died or hangs
// cannot hang the others: past dist::timeout_seconds() the wait aborts the job with a message
// naming the collective. In a world of one each is the identity. Internal to the library.
//
// Every rank must call the same collectives in the same order (MPI's rule): no collective may
// sit behind a condition that differs between ranks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "freight/dtype.h"

namespace freight::dist {

// Rank `root`'s bytes to every rank.
void broadcast_bytes(void* data, size_t bytes, int root, const std::string& what);
// Sums (or maxima) of each element over the ranks, in place.
void all_reduce_sum(std::vector<double>& values, const std::string& what);
void all_reduce_max(std::vector<double>& values, const std::string& what);
// In-place sum over the ranks of `count` elements of `dtype` in a host buffer, waited for.
void all_reduce_sum(void* data, int64_t count, DType dtype, const std::string& what);
// Every rank's text, in rank order.
std::vector<std::string> all_gather_text(const std::string& mine, const std::string& what);
// Returns once every rank has called it.
void barrier(const std::string& what);

// In-place sums over the ranks of host buffers, started one after another (each runs while the
// caller goes on) and finished together. OpenMPI has no progress thread: a started sum moves
// only inside MPI calls, which progress() makes without waiting.
class AsyncSums {
 public:
  AsyncSums();
  ~AsyncSums();
  AsyncSums(const AsyncSums&) = delete;
  AsyncSums& operator=(const AsyncSums&) = delete;

  void start(void* data, int64_t count, DType dtype);
  void progress();
  // Waits for every started sum; `what` names them in a timeout's message.
  void finish(const std::string& what);
  size_t pending() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace freight::dist
