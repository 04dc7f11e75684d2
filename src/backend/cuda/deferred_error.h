// Deferred errors: how a kernel reports a bad value (a label or an index out of range) without
// the host synchronising after every launch to ask.
//
// Each device has one record. A kernel that meets a bad value claims the record with an
// atomicCAS on a flag in device memory (the first reporter wins, later ones return at once),
// then writes what it found into a small struct in mapped, pinned host memory and publishes it
// by writing `kind` last, with system-wide fences in between. Only the winner ever writes the
// host struct, so no atomics on host memory are needed.
//
// The host looks at the struct whenever it has synchronised the device's stream anyway (an
// explicit synchronize, or a copy to or from host memory, which is how item(), to(cpu) and
// to_vector() read results). At that point every kernel queued before has finished and its
// writes to mapped memory are visible, so reading the struct costs one load and no extra
// synchronisation. When a record is found, the host clears it, re-arms the device flag (a
// stream-ordered memset, so later kernels see it cleared) and throws a freight::Error that
// names the op, the value, its position and the valid range.
#pragma once
#include <cstdint>

namespace freight::cuda {

enum class DeferredKind : int32_t {
  None = 0,
  CrossEntropyLabel = 1,  // value: the label, limit: the number of classes
  EmbeddingIndex = 2,     // value: the index, limit: the number of table rows
};

// Lives in mapped pinned host memory; `kind` is written last and is None while nothing is
// recorded.
struct DeferredErrorInfo {
  int32_t kind;
  int32_t unused;
  int64_t value;     // the offending label or index
  int64_t position;  // its position in the flat list of labels or indices
  int64_t limit;     // the exclusive upper bound it should have respected
};

// The device-side addresses handed to kernels by value.
struct DeferredErrorSlot {
  int* claimed;             // device memory: 0 until a reporter claims the record
  DeferredErrorInfo* info;  // device address of the mapped host struct
};

// The record of `device` (creates the device's state on first use).
DeferredErrorSlot deferred_error_slot(int device);

// Call only right after the device's stream has been synchronised: throws freight::Error when a
// kernel has recorded an error since the last check, and clears the record.
void check_deferred_error(int device);

#if defined(__CUDACC__)
__device__ __forceinline__ void report_deferred_error(DeferredErrorSlot slot, DeferredKind kind,
                                                      int64_t value, int64_t position,
                                                      int64_t limit) {
  if (atomicCAS(slot.claimed, 0, 1) != 0) return;  // another thread reported first
  volatile DeferredErrorInfo* info = slot.info;
  info->value = value;
  info->position = position;
  info->limit = limit;
  __threadfence_system();  // the fields reach host memory before the kind that publishes them
  info->kind = int32_t(kind);
  __threadfence_system();
}
#endif

}  // namespace freight::cuda
