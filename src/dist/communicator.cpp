#include "dist/communicator.h"

#include <fmt/format.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "freight/dist.h"
#include "freight/error.h"

#if FREIGHT_WITH_MPI
#include <mpi.h>
#endif

namespace freight::dist {

namespace {

bool alone() {
  return world().size <= 1;
}

#if FREIGHT_WITH_MPI
using Clock = std::chrono::steady_clock;

// Waits for `requests` by polling: MPI's own blocking waits never time out. Without a progress
// thread a nonblocking collective advances only inside MPI calls (each test moves it a round),
// so for the first second the wait tests back to back, yielding the core in between (to another
// rank when ranks outnumber cores); after that, when a rank is late or stuck, it sleeps between
// tests with a growing pause (up to 1 ms). Past the deadline it aborts the job, naming `what`.
void wait_all(std::vector<MPI_Request>& requests, const std::string& what) {
  if (requests.empty()) return;
  auto t0 = Clock::now();
  const double limit = timeout_seconds();
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    int done = 0;
    MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) break;
    double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (waited > limit)
      abort_job(3, fmt::format("{} waited {:.0f} s for the other ranks: a rank is stuck or died "
                               "(the limit is --dist-timeout or FREIGHT_DIST_TIMEOUT, {:g} s)",
                               what, waited, limit));
    if (waited < 1.0) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  requests.clear();
}

void wait_one(MPI_Request r, const std::string& what) {
  std::vector<MPI_Request> v{r};
  wait_all(v, what);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I64:
      return MPI_INT64_T;
    default:
      break;
  }
  throw Error(fmt::format("dist: no sum over ranks for {} tensors", dtype_name(t)));
}

void all_reduce(std::vector<double>& v, MPI_Op op, const std::string& what) {
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, v.data(), int(v.size()), MPI_DOUBLE, op, MPI_COMM_WORLD, &r);
  wait_one(r, what);
}
#endif

}  // namespace

void broadcast_bytes(void* data, size_t bytes, int root, const std::string& what) {
  if (alone() || bytes == 0) return;
#if FREIGHT_WITH_MPI
  // MPI counts are ints: large tensors go in pieces of at most 1 GiB.
  char* p = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += size_t(1) << 30) {
    size_t n = std::min(bytes - off, size_t(1) << 30);
    MPI_Request r;
    MPI_Ibcast(p + off, int(n), MPI_BYTE, root, MPI_COMM_WORLD, &r);
    wait_one(r, what);
  }
#endif
}

void all_reduce_sum(std::vector<double>& values, const std::string& what) {
  if (alone() || values.empty()) return;
#if FREIGHT_WITH_MPI
  all_reduce(values, MPI_SUM, what);
#endif
}

void all_reduce_max(std::vector<double>& values, const std::string& what) {
  if (alone() || values.empty()) return;
#if FREIGHT_WITH_MPI
  all_reduce(values, MPI_MAX, what);
#endif
}

bool on_every_rank(bool mine, const std::string& what) {
  std::vector<double> v{mine ? 0.0 : 1.0};
  all_reduce_max(v, what);
  return v[0] == 0;
}

void all_reduce_sum(void* data, int64_t count, DType dtype, const std::string& what) {
  AsyncSums sums;
  sums.start(data, count, dtype);
  sums.finish(what);
}

std::vector<std::string> all_gather_text(const std::string& mine, const std::string& what) {
  if (alone()) return {mine};
  std::vector<std::string> out;
#if FREIGHT_WITH_MPI
  const int n = world().size;
  int len = int(mine.size());
  std::vector<int> lens(size_t(n), 0);
  MPI_Request r;
  MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD, &r);
  wait_one(r, what);
  std::vector<int> offsets(size_t(n), 0);
  int total = 0;
  for (int i = 0; i < n; ++i) offsets[size_t(i)] = total, total += lens[size_t(i)];
  std::string all(size_t(total), '\0');
  MPI_Iallgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                  MPI_COMM_WORLD, &r);
  wait_one(r, what);
  for (int i = 0; i < n; ++i)
    out.push_back(all.substr(size_t(offsets[size_t(i)]), size_t(lens[size_t(i)])));
#endif
  return out;
}

void barrier(const std::string& what) {
  if (alone()) return;
#if FREIGHT_WITH_MPI
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  wait_one(r, what);
#endif
}

struct AsyncSums::Impl {
#if FREIGHT_WITH_MPI
  std::vector<MPI_Request> requests;
#endif
};

AsyncSums::AsyncSums() : impl_(std::make_unique<Impl>()) {}
AsyncSums::~AsyncSums() = default;

void AsyncSums::start(void* data, int64_t count, DType dtype) {
  if (alone() || count == 0) return;
#if FREIGHT_WITH_MPI
  FREIGHT_CHECK(count <= int64_t(INT32_MAX),
                fmt::format("dist: a sum of {} elements is beyond MPI's int count: use a smaller "
                            "--bucket-mb",
                            count));
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, data, int(count), mpi_type(dtype), MPI_SUM, MPI_COMM_WORLD, &r);
  impl_->requests.push_back(r);
#endif
}

void AsyncSums::progress() {
#if FREIGHT_WITH_MPI
  if (impl_->requests.empty()) return;
  int done = 0;
  MPI_Testall(int(impl_->requests.size()), impl_->requests.data(), &done, MPI_STATUSES_IGNORE);
  if (done) impl_->requests.clear();
#endif
}

void AsyncSums::finish(const std::string& what) {
#if FREIGHT_WITH_MPI
  wait_all(impl_->requests, what);
#endif
}

size_t AsyncSums::pending() const {
#if FREIGHT_WITH_MPI
  return impl_->requests.size();
#else
  return 0;
#endif
}

}  // namespace freight::dist
