// Checks that only the CPU emulation of CUDA can make (they look inside the emulated
// libraries); every test skips on a real GPU and without one.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "common/test_util.h"
#include "freight/freight.h"
#include "ops/kernels/conv.h"
#include "ops/kernels/embedding.h"
#include "ops/kernels/norm.h"

#ifdef FREIGHT_CUDA_EMULATION
#include <cublas_v2.h>  // the emulated cuBLAS and runtime (tests/cuda/emulation/include)
#include <cuda_runtime.h>
#endif

namespace freight::test {
namespace {

const Device kGpu = Device::cuda(0);

// cublasSetStream resets a handle's workspace to cuBLAS's default pool, which cuBLAS then
// allocates behind the caching allocator's back (and inside a graph capture, invalidating it).
// Every GEMM of the engine must run in the workspace bound when the device was set up.
TEST(EmulatedCublas, GemmsRunInFreightsWorkspace) {
#ifndef FREIGHT_CUDA_EMULATION
  GTEST_SKIP() << "looks inside the emulated cuBLAS";
#else
  FREIGHT_SKIP_WITHOUT_CUDA();
  Generator gen(3);
  Tensor a = Tensor::normal({7, 5}, 0, 1, DType::F32, kGpu, &gen);
  Tensor b = Tensor::normal({5, 3}, 0, 1, DType::F32, kGpu, &gen);
  Tensor a64 = Tensor::normal({4, 6, 5}, 0, 1, DType::F64, kGpu, &gen);
  Tensor b64 = Tensor::normal({4, 5, 2}, 0, 1, DType::F64, kGpu, &gen);
  for (int i = 0; i < 3; ++i) {
    Tensor c = matmul(a, b);
    Tensor c64 = matmul(a64, b64);
    (void)c.to_float_vector();
    (void)c64.to_double_vector();
  }
  // Process-wide: the default pool is allocated once per handle and stream, so a GEMM of an
  // earlier test would have counted too.
  EXPECT_EQ(emu::g_cublas_default_workspaces.load(), 0)
      << "a GEMM ran without Freight's workspace: cuBLAS allocated its default pool";
#endif
}

// The embedding backward's work follows the lookups (a sort of them, then one thread per
// looked-up element), not vocabulary × dim × lookups: at a 50k vocabulary the old kernel (one
// thread per weight element, each walking every lookup) launched 800k threads here and cost
// seconds per step on a GPU. Its result stays bit-identical to the CPU's.
TEST(EmulatedWork, EmbeddingBackwardScalesWithTheLookupsNotTheVocabulary) {
#ifndef FREIGHT_CUDA_EMULATION
  GTEST_SKIP() << "counts the emulation's threads";
#else
  FREIGHT_SKIP_WITHOUT_CUDA();
  const int64_t vocab = 50000, dim = 16, lookups = 2048;
  Generator gen(11);
  Tensor idx = Tensor::randint({lookups}, 0, vocab, Device::cpu(), &gen);
  idx.data<int64_t>()[7] = idx.data<int64_t>()[100];  // at least one repeated row
  Tensor w = Tensor::normal({vocab, dim}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor g = Tensor::normal({lookups, dim}, 0, 1, DType::F32, Device::cpu(), &gen);
  Tensor gw_cpu = Tensor::empty({vocab, dim}, DType::F32, Device::cpu());
  kernels::embedding_backward(DeviceType::CPU, idx, g, gw_cpu);
  Tensor idx_gpu = idx.to(kGpu), g_gpu = g.to(kGpu);
  Tensor gw_gpu = Tensor::full({vocab, dim}, std::nan(""), DType::F32, kGpu);  // poisoned
  synchronize(kGpu);  // the fill and the uploads are queued work too: not counted
  uint64_t before = emu::g_threads_run.load();
  kernels::embedding_backward(DeviceType::CUDA, idx_gpu, g_gpu, gw_gpu);
  synchronize(kGpu);
  uint64_t threads = emu::g_threads_run.load() - before;
  // A bitonic sort of 2048 keys is 66 passes of 2048 threads; the sums take lookups × dim.
  const uint64_t budget = 2 * (66 * 2048 + lookups * dim + 2048);
  EXPECT_LE(threads, budget) << "the backward launched work in proportion to the vocabulary";
  EXPECT_EQ(gw_gpu.to_float_vector(), gw_cpu.to_float_vector());
#endif
}

// Per-channel reductions (batch norm's statistics and gradients, a convolution's bias gradient)
// split each channel over many blocks: one block per channel left a GPU of 132 SMs mostly idle
// at 64 channels. 16 channels of 16·32·32 values must use at least 8 blocks each, and give the
// CPU's results within the op table's tolerance.
TEST(EmulatedWork, ChannelReductionsSplitEachChannelOverManyBlocks) {
#ifndef FREIGHT_CUDA_EMULATION
  GTEST_SKIP() << "counts the emulation's blocks";
#else
  FREIGHT_SKIP_WITHOUT_CUDA();
  const int64_t n = 16, c = 16, s = 32 * 32;
  Generator gen(12);
  Tensor x = Tensor::normal({n, c, 32, 32}, 0.5, 2, DType::F32, kGpu, &gen);
  Tensor gy = Tensor::normal({n, c, 32, 32}, 0, 1, DType::F32, kGpu, &gen);
  auto blocks_of = [](const std::function<void()>& work) {
    synchronize(kGpu);  // work queued earlier is not counted
    uint64_t before = emu::g_blocks_run.load();
    work();
    synchronize(kGpu);
    return emu::g_blocks_run.load() - before;
  };
  auto close = [](const Tensor& gpu, const Tensor& cpu, const char* what) {
    std::vector<double> a = gpu.to_double_vector(), b = cpu.to_double_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::fabs(b[i]))) << what << " " << i;
  };
  Tensor mean = Tensor::empty({c}, DType::F32, kGpu), var = mean.clone(), invstd = mean.clone();
  uint64_t stats_blocks = blocks_of(
      [&] { kernels::batch_norm_stats(DeviceType::CUDA, x, n, c, s, 1e-5, mean, var, invstd); });
  EXPECT_GE(stats_blocks, uint64_t(8 * c)) << "batch norm statistics";
  Tensor xc = x.to(Device::cpu()), gyc = gy.to(Device::cpu());
  Tensor mc = Tensor::empty({c}, DType::F32, Device::cpu()), vc = mc.clone(), ic = mc.clone();
  kernels::batch_norm_stats(DeviceType::CPU, xc, n, c, s, 1e-5, mc, vc, ic);
  close(mean, mc, "mean");
  close(var, vc, "var");

  Tensor gx = Tensor::empty(x.shape(), DType::F32, kGpu), gw = mean.clone(), gb = mean.clone();
  Tensor w = Tensor::normal({c}, 1, 0.5, DType::F32, kGpu, &gen), none;
  uint64_t bn_backward_blocks = blocks_of([&] {
    kernels::batch_norm_backward(DeviceType::CUDA, gy, x, mean, invstd, w, none, false, true, n, c,
                                 s, gx, gw, gb);
  });
  EXPECT_GE(bn_backward_blocks, uint64_t(8 * c)) << "batch norm backward";
  Tensor gxc = Tensor::empty(x.shape(), DType::F32, Device::cpu()), gwc = mc.clone(),
         gbc = mc.clone(), wc = w.to(Device::cpu());
  kernels::batch_norm_backward(DeviceType::CPU, gyc, xc, mc, ic, wc, none, false, true, n, c, s,
                               gxc, gwc, gbc);
  close(gw, gwc, "gweight");
  close(gb, gbc, "gbias");
  close(gx, gxc, "gx");

  // A 1×1 convolution from one input channel to 16: only the bias gradient is wanted.
  Conv2dGeometry g{n, 1, 32, 32, c, 1, 1, 32, 32, 1, 1, 0, 0, 1, 1};
  Tensor x1 = Tensor::normal({n, 1, 32, 32}, 0, 1, DType::F32, kGpu, &gen);
  Tensor conv_gb = Tensor::empty({c}, DType::F32, kGpu), no_gw;
  uint64_t bias_blocks = blocks_of([&] {
    kernels::conv2d_backward_weight(DeviceType::CUDA, gy, x1, g, Tensor(), no_gw, conv_gb);
  });
  EXPECT_GE(bias_blocks, uint64_t(8 * c)) << "convolution bias gradient";
  Tensor conv_gbc = Tensor::empty({c}, DType::F32, Device::cpu());
  Tensor x1c = x1.to(Device::cpu());
  kernels::conv2d_backward_weight(DeviceType::CPU, gyc, x1c, g, Tensor(), no_gw, conv_gbc);
  close(conv_gb, conv_gbc, "conv bias gradient");
#endif
}

#ifdef FREIGHT_CUDA_EMULATION
// Streams are queues that run later, in an order only events constrain. A stream that reads
// what another stream writes, without waiting for an event recorded after the write, must read
// it too early in some interleaving; with the wait, never.
int copies_that_read_too_early(bool wait, int trials) {
  cudaStream_t writer, reader;
  cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking);
  cudaEvent_t written;
  cudaEventCreateWithFlags(&written, 0);
  int *a = nullptr, *b = nullptr;
  cudaMalloc(&a, 64 * sizeof(int));
  cudaMalloc(&b, 64 * sizeof(int));
  int early = 0;
  for (int t = 0; t < trials; ++t) {
    cudaMemsetAsync(a, 0, 64 * sizeof(int), writer);
    cudaStreamSynchronize(writer);
    for (int k = 0; k < 4; ++k) cudaMemsetAsync(a, 1, 64 * sizeof(int), writer);
    cudaEventRecord(written, writer);
    if (wait) cudaStreamWaitEvent(reader, written, 0);
    cudaMemcpyAsync(b, a, 64 * sizeof(int), cudaMemcpyDeviceToDevice, reader);
    std::vector<int> host(64);
    cudaMemcpyAsync(host.data(), b, 64 * sizeof(int), cudaMemcpyDeviceToHost, reader);
    cudaStreamSynchronize(reader);
    early += host[0] != 0x01010101;
    cudaStreamSynchronize(writer);
  }
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(written);
  cudaStreamDestroy(writer);
  cudaStreamDestroy(reader);
  return early;
}
#endif

TEST(EmulatedStreams, AMissingEventWaitReadsTooEarlyInSomeInterleaving) {
#ifndef FREIGHT_CUDA_EMULATION
  GTEST_SKIP() << "tests the emulation's stream model";
#else
  FREIGHT_SKIP_WITHOUT_CUDA();
  if (emu::eager_streams()) GTEST_SKIP() << "EMU_STREAMS=eager runs every operation at once";
  EXPECT_EQ(copies_that_read_too_early(/*wait=*/true, 40), 0);
  EXPECT_GT(copies_that_read_too_early(/*wait=*/false, 40), 0)
      << "the reader's stream never got ahead of the writer's";
#endif
}

TEST(EmulatedStreams, AnEventIsCompleteOnlyOnceItsStreamGetsThere) {
#ifndef FREIGHT_CUDA_EMULATION
  GTEST_SKIP() << "tests the emulation's stream model";
#else
  FREIGHT_SKIP_WITHOUT_CUDA();
  if (emu::eager_streams()) GTEST_SKIP() << "EMU_STREAMS=eager runs every operation at once";
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, 0);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess) << "an event never recorded is complete";
  int* a = nullptr;
  cudaMalloc(&a, 1 << 16);
  int not_ready = 0;
  for (int t = 0; t < 20; ++t) {
    for (int k = 0; k < 16; ++k) cudaMemsetAsync(a, k, 1 << 16, s);
    cudaEventRecord(e, s);
    not_ready += cudaEventQuery(e) == cudaErrorNotReady;
    EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  }
  EXPECT_GT(not_ready, 0) << "16 queued memsets were always done by the time of the query";
  cudaFree(a);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
#endif
}

// A graph's own memory (allocated during its capture) that its nodes write is not for anyone
// else while the graph lives: a memset outside the graph into it stops the run, naming both.
TEST(EmulatedGraphsDeathTest, AnOutsideWriteIntoAGraphsWriteSetIsReported) {
#ifndef FREIGHT_CUDA_EMULATION
  GTEST_SKIP() << "tests the emulation's graph write sets";
#else
  FREIGHT_SKIP_WITHOUT_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto run = [](bool outside_write) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    char* temp = nullptr;
    cudaMalloc(&temp, 256);  // the graph's own block, as Freight's graph pools get them
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaMemsetAsync(temp, 7, 128, s);
    cudaGraph_t graph;
    cudaStreamEndCapture(s, &graph);
    cudaGraphExec_t exec;
    cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphLaunch(exec, s);
    cudaStreamSynchronize(s);
    cudaMemsetAsync(temp + 128, 1, 128, s);  // outside the write set: allowed
    if (outside_write) cudaMemsetAsync(temp + 64, 1, 8, s);
    cudaStreamSynchronize(s);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(temp);
    cudaStreamDestroy(s);
  };
  run(false);
  EXPECT_DEATH(run(true), "graph #[0-9]+ writes 128 bytes .* and cudaMemsetAsync on stream");
#endif
}

// Two blocks that add into one address without an atomic: a write-write race the race check
// reports, though every block order gives the same sum here.
TEST(EmulatedRacesDeathTest, BlocksWritingOneAddressWithoutAtomicsAreReported) {
#ifndef FREIGHT_CUDA_EMULATION
  GTEST_SKIP() << "tests the emulation's race check";
#else
  FREIGHT_SKIP_WITHOUT_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto run = [](bool atomic) {
    emu::g_racecheck_override = 1;
    double* sum = nullptr;
    cudaMalloc(&sum, sizeof(double));
    cudaMemsetAsync(sum, 0, sizeof(double), nullptr);
    emu::launch(
        emu::Config(dim3(4), dim3(32)), "add_kernel",
        [atomic](double* p) {
          if (threadIdx.x != 0) return;
          if (atomic)
            atomicAdd(p, 1.0);
          else
            *p += 1.0;
        },
        sum);
    double host = 0;
    cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, nullptr);
    cudaFree(sum);
    emu::g_racecheck_override = -1;
    return host;
  };
  EXPECT_EQ(run(true), 4.0);
  EXPECT_DEATH(run(false), "race in kernel add_kernel: blocks 0 and 1 both wrote");
#endif
}

}  // namespace
}  // namespace freight::test
