// NCCL for the CPU emulation of CUDA: the calls Freight makes (src/backend/cuda/nccl_sums.cpp),
// with NCCL's names and values, run over MPI between the processes of an emulated job (mpirun
// -np N, each process one rank with its own emulated device, EMU_DEVICES).
//
// A collective is queued on its stream like a kernel, then forced to run at once
// (emu::run_until): the lazy device moves only inside host calls, and a collective left queued
// could block rank A inside MPI while rank B's host waits in a later host collective. Forcing
// keeps the collectives in program order, which NCCL requires anyway, while run_until still runs
// the other streams' queued work in a random order first or not: a comm stream that does not
// wait for the compute stream's event sums a bucket before backward has written it in some
// interleavings, as a GPU would. That is the bug the data-parallel GPU tests must catch.
//
// What NCCL itself checks at init is checked here too, with the mistakes' own messages: every
// rank must pass rank 0's ncclUniqueId (broadcast), and no two ranks may use one GPU of a host.
// A world of one needs no MPI: its sums are the identity.
#pragma once
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "emu_streams.h"

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;
typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD; none in a world of one
  int rank = 0, size = 1, device = 0;
};
typedef ncclComm* ncclComm_t;

namespace emu::nccl {
inline MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    default:
      return MPI_DATATYPE_NULL;  // 16-bit floats: MPI has no sum for them
  }
}
inline size_t type_size(ncclDataType_t t) {
  return t == ncclFloat64 || t == ncclInt64 || t == ncclUint64 ? 8
         : t == ncclFloat16 || t == ncclBfloat16               ? 2
         : t <= ncclUint8                                      ? 1
                                                               : 4;
}
inline bool fail(const std::string& why) {
  std::fprintf(stderr, "NCCL emulation: %s\n", why.c_str());
  return false;
}
// Whether [p, p + bytes) lies inside one emulated device allocation, as NCCL's buffers must.
inline bool device_range(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  Range r;
  return block_of(g_device_blocks, p, &r) &&
         static_cast<const char*>(p) + bytes <= static_cast<const char*>(r.p) + r.n;
}
}  // namespace emu::nccl

inline const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage:
      return "invalid usage (emulated NCCL)";
    default:
      return "error (emulated NCCL)";
  }
}

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  // Random bytes, so ranks that did not receive rank 0's id hold different ones (init refuses).
  std::random_device rd;
  for (char& c : id->internal) c = char(rd());
  return ncclSuccess;
}

inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  using emu::nccl::fail;
  auto* c = new ncclComm;
  c->rank = rank;
  c->size = nranks;
  cudaGetDevice(&c->device);
  int inited = 0;
  MPI_Initialized(&inited);
  if (nranks == 1 && rank == 0 && !inited) {
    *comm = c;
    return ncclSuccess;
  }
  int size = 0, me = 0;
  if (!inited) {
    delete c;
    fail("ncclCommInitRank over several ranks needs MPI (run under mpirun)");
    return ncclInvalidUsage;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (size != nranks || me != rank) {
    delete c;
    fail("ncclCommInitRank(nranks " + std::to_string(nranks) + ", rank " + std::to_string(rank) +
         ") in an MPI world of " + std::to_string(size) + " where this is rank " +
         std::to_string(me));
    return ncclInvalidArgument;
  }
  // Every rank must hold rank 0's id: the broadcast the caller makes.
  std::vector<char> ids(size_t(size) * NCCL_UNIQUE_ID_BYTES);
  MPI_Allgather(id.internal, NCCL_UNIQUE_ID_BYTES, MPI_CHAR, ids.data(), NCCL_UNIQUE_ID_BYTES,
                MPI_CHAR, MPI_COMM_WORLD);
  // No two ranks on one GPU of a host (NCCL's "Duplicate GPU detected").
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::string mine = std::string(host) + "/" + std::to_string(c->device);
  mine.resize(80, '\0');
  std::vector<char> places(size_t(size) * 80);
  MPI_Allgather(mine.data(), 80, MPI_CHAR, places.data(), 80, MPI_CHAR, MPI_COMM_WORLD);
  bool ok = true;
  for (int r = 1; r < size && ok; ++r)
    if (std::memcmp(ids.data(), ids.data() + size_t(r) * NCCL_UNIQUE_ID_BYTES,
                    NCCL_UNIQUE_ID_BYTES) != 0)
      ok = fail(
          "ranks passed different ncclUniqueIds to ncclCommInitRank: rank 0's id must be "
          "broadcast to the others (rank " +
          std::to_string(r) + "'s differs)");
  for (int r = 0; r < size && ok; ++r)
    if (r != me && std::memcmp(places.data() + size_t(r) * 80, mine.data(), 80) == 0)
      ok = fail("ranks " + std::to_string(std::min(r, me)) + " and " +
                std::to_string(std::max(r, me)) + " both use device " + std::to_string(c->device) +
                " of host " + host + ": cudaSetDevice(local rank) before ncclCommInitRank");
  if (!ok) {
    delete c;
    return ncclInvalidUsage;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
  *comm = c;
  return ncclSuccess;
}

inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  using emu::nccl::fail;
  if (emu::capturing(stream)) {
    fail("ncclAllReduce inside a CUDA graph capture is not emulated");
    return ncclInvalidUsage;
  }
  const size_t bytes = count * emu::nccl::type_size(type);
  MPI_Datatype t = emu::nccl::mpi_type(type);
  if (t == MPI_DATATYPE_NULL || op != ncclSum) {
    fail("only sums of 32- and 64-bit numbers are emulated");
    return ncclInvalidArgument;
  }
  if (!emu::nccl::device_range(send, bytes) || !emu::nccl::device_range(recv, bytes)) {
    fail("ncclAllReduce of " + std::to_string(bytes) + " bytes: a buffer is not device memory");
    return ncclInvalidArgument;
  }
  int device = 0;
  cudaGetDevice(&device);
  if (device != comm->device) {
    fail("ncclAllReduce on device " + std::to_string(device) + " with a communicator of device " +
         std::to_string(comm->device));
    return ncclInvalidUsage;
  }
  auto done = std::make_shared<bool>(false);
  emu::enqueue(
      stream,
      [=] {
        if (send != recv) std::memcpy(recv, send, bytes);
        if (comm->comm != MPI_COMM_NULL)
          MPI_Allreduce(MPI_IN_PLACE, recv, int(count), t, MPI_SUM, comm->comm);
        *done = true;
      },
      "ncclAllReduce");
  emu::run_until([done] { return *done; }, "ncclAllReduce");
  return ncclSuccess;
}

inline ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* err) {
  *err = ncclSuccess;  // the emulated sums finish inside their calls
  return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm->comm != MPI_COMM_NULL) MPI_Comm_free(&comm->comm);
  delete comm;
  return ncclSuccess;
}
inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return ncclCommDestroy(comm);
}
