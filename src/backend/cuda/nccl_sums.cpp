// Gradient sums over the ranks on GPUs: NCCL's in-place all-reduce, on a stream of its own.
//
// The order is what a GPU gets wrong silently. The gradients a sum reads are written by the
// backward kernels queued on the device's compute stream, and the sums run on the comm stream,
// which knows nothing of them: without an event between the two, a sum may read a bucket before
// backward has finished it (and the ranks then step with a stale gradient). So start() records
// an event on the compute stream and the comm stream waits for it; finish() records one on the
// comm stream and the compute stream waits for that, so the optimizer reads the sums. The host
// waits for neither. It waits, with a deadline, for the previous finish()'s sums only: by then
// they are long done unless a rank stopped answering, and a stuck NCCL call is otherwise a hang.
#include "backend/cuda/nccl_sums.h"

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "freight/error.h"

#if FREIGHT_WITH_NCCL
#include <nccl.h>

#include <chrono>
#include <thread>
#endif

namespace freight::cuda {

#if FREIGHT_WITH_NCCL
namespace {

#define FREIGHT_NCCL_CHECK(call)                                                                \
  do {                                                                                          \
    ncclResult_t freight_nccl_ = (call);                                                        \
    if (freight_nccl_ != ncclSuccess)                                                           \
      throw ::freight::Error(fmt::format("{} failed: {} (NCCL error {}) at {}:{}", #call,       \
                                         ncclGetErrorString(freight_nccl_), int(freight_nccl_), \
                                         __FILE__, __LINE__));                                  \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::BF16:
      return ncclBfloat16;
    default:
      throw Error(fmt::format("NCCL sums over the ranks: no sum for {} gradients", dtype_name(t)));
  }
}

class NcclSums final : public RankSums {
 public:
  NcclSums(int device, const RankSumsSetup& setup)
      : device_(device), timeout_(setup.timeout_seconds) {
    FREIGHT_CHECK(setup.broadcast_from_rank0 || setup.size == 1,
                  "NCCL sums over the ranks: no way to send rank 0's communicator id");
    set_device(device);
    ncclUniqueId id{};
    if (setup.rank == 0) FREIGHT_NCCL_CHECK(ncclGetUniqueId(&id));
    if (setup.broadcast_from_rank0) setup.broadcast_from_rank0(&id, sizeof id);
    FREIGHT_NCCL_CHECK(ncclCommInitRank(&comm_, setup.size, id, setup.rank));
    FREIGHT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    FREIGHT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    FREIGHT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclSums() override {
    set_device(device_);
    if (!aborted_) {  // (an aborted communicator is freed by ncclCommAbort)
      (void)cudaStreamSynchronize(comm_stream_);
      (void)ncclCommDestroy(comm_);
    }
    (void)cudaEventDestroy(done_);
    (void)cudaEventDestroy(ready_);
    (void)cudaStreamDestroy(comm_stream_);
  }

  void start(void* data, int64_t count, DType dtype) override {
    FREIGHT_CHECK(!aborted_, "NCCL sums over the ranks: the communicator was aborted");
    set_device(device_);
    FREIGHT_CUDA_CHECK(cudaEventRecord(ready_, stream(device_)));
    FREIGHT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
    FREIGHT_NCCL_CHECK(
        ncclAllReduce(data, data, size_t(count), nccl_type(dtype), ncclSum, comm_, comm_stream_));
  }

  void finish(const std::string& what) override {
    FREIGHT_CHECK(!aborted_, "NCCL sums over the ranks: the communicator was aborted");
    set_device(device_);
    wait_for_previous();
    FREIGHT_CUDA_CHECK(cudaEventRecord(done_, comm_stream_));
    FREIGHT_CUDA_CHECK(cudaStreamWaitEvent(stream(device_), done_, 0));
    previous_ = what;
  }

 private:
  // Polls the last finish()'s event (a never-recorded event is complete) and NCCL's own error
  // state until the deadline; then aborts the communicator, which unblocks its kernels.
  void wait_for_previous() {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_);
    for (;;) {
      cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) FREIGHT_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      FREIGHT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess || Clock::now() > deadline) {
        aborted_ = true;
        (void)ncclCommAbort(comm_);
        throw Error(fmt::format(
            "{}: {}", previous_,
            async != ncclSuccess
                ? fmt::format("NCCL failed: {}", ncclGetErrorString(async))
                : fmt::format("not finished after {:g} s (--dist-timeout): a rank stopped "
                              "answering",
                              timeout_)));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int device_;
  double timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  std::string previous_;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<RankSums> make_nccl_sums(int device, const RankSumsSetup& setup) {
  return std::make_unique<NcclSums>(device, setup);
}

#else

std::unique_ptr<RankSums> make_nccl_sums(int, const RankSumsSetup&) {
  throw Error(
      "data-parallel training on GPUs needs NCCL, and this Freight was built without it (CMake "
      "did not find nccl.h and libnccl beside the CUDA toolkit); install NCCL and reconfigure, "
      "or train the ranks on the CPU (--device cpu)");
}

#endif

}  // namespace freight::cuda
