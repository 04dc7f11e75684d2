// Host-side bookkeeping of the CUDA backend's two caches, with no CUDA call in it (the backend
// passes the system allocation, free and event-query functions in), so the logic is unit-tested
// without a GPU (tests/cuda/block_cache_test.cpp).
//
// BlockCache: device memory. cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, so freed blocks are kept per rounded size and reused. All of Freight's device
// work runs on one stream per device, so a block freed by the host (after its last use was
// queued) can be handed to any work queued later without waiting: stream order does the rest.
//
// Graph pools ("capture mode"). While a CUDA graph is captured, every allocation of the
// capturing thread comes from a pool private to that graph: never from the shared cache, and
// blocks of the pool freed during the capture are reused only by later allocations of the same
// capture (the graph replays them in capture order, so that reuse is stream-ordered too). Once
// the capture ends the pool's blocks stay reserved for the graph, which writes them on every
// replay whatever the host thinks of them: a block of the pool that the host frees goes back
// to the pool, never to the shared cache, and every block of the pool counts as in use. When
// the graph is destroyed (after the device has finished with it) the pool is retired: its free
// blocks join the shared cache, and blocks still held by tensors join it when freed.
//
// PinnedCache: page-locked host memory (cudaHostAlloc is slower still). A block may be the
// source of an asynchronous copy that is still queued when its tensor is freed, so each block
// carries an event recorded after its last copy, and a freed block is reused only once that
// event has completed. Blocks are found by any address inside them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "freight/runtime.h"

#ifdef FREIGHT_CUDA_EMULATION
#include "emu_allocator.h"  // tests/cuda/emulation/include
#endif

namespace freight::cuda {

// The sizes the caches keep: 512-byte granularity below 1 MiB, 2 MiB above (fewer distinct
// sizes for big activations). The CPU emulation of the backend runs in two modes
// (EMU_ALLOCATOR, tests/cuda/emulation/include/emu_allocator.h): these sizes, or exact ones so
// that AddressSanitizer sees any access past a tensor's end.
inline size_t size_class(size_t bytes) {
  size_t unit = bytes < (size_t(1) << 20) ? 512 : (size_t(2) << 20);
  return (bytes + unit - 1) / unit * unit;
}
inline size_t round_block_size(size_t bytes) {
#ifdef FREIGHT_CUDA_EMULATION
  if (emu::exact_block_sizes()) return bytes;
#endif
  return size_class(bytes);
}

class BlockCache {
 public:
  using PoolId = uint64_t;
  static constexpr PoolId kShared = 0;  // the shared cache, not a graph pool

  // A block of `size` bytes (a rounded size) for `pool`: a free block of that size from the
  // pool's free list (from the shared cache's for kShared), else a new one from `system_alloc`,
  // which returns nullptr when the device is full (then so does take). *fresh tells which.
  void* take(size_t size, PoolId pool, const std::function<void*(size_t)>& system_alloc,
             bool* fresh) {
    stats_.allocs++;
    auto& lists = pool == kShared ? shared_free_ : pool_at(pool).free;
    auto it = lists.find(size);
    if (it != lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      if (pool == kShared) {  // a pool's free blocks already count as in use
        stats_.cached -= size;
        add_in_use(size);
      }
      *fresh = false;
      return p;
    }
    void* p = system_alloc(size);
    if (!p) return nullptr;
    stats_.fresh++;
    add_in_use(size);
    if (pool != kShared) {
      owner_[p] = pool;
      pool_at(pool).bytes += size;
    }
    *fresh = true;
    return p;
  }

  // A new block from `system_alloc` reserved for `pool` (a graph's constant: never taken from
  // and never put on a free list while the pool lives), or nullptr when the device is full.
  void* take_fresh(size_t size, PoolId pool, const std::function<void*(size_t)>& system_alloc) {
    Pool& owner = pool_at(pool);
    void* p = system_alloc(size);
    if (!p) return nullptr;
    stats_.allocs++;
    stats_.fresh++;
    add_in_use(size);
    owner_[p] = pool;
    owner.bytes += size;
    return p;
  }

  // Takes back a block that take() handed out, `size` being the size it was taken with.
  void give_back(void* p, size_t size) {
    auto it = owner_.find(p);
    if (it != owner_.end()) {  // reserved for a live graph: back to its pool, still in use
      pools_.at(it->second).free[size].push_back(p);
      return;
    }
    stats_.in_use -= size;
    stats_.cached += size;
    shared_free_[size].push_back(p);
  }

  // Gives the shared cache's free blocks to `system_free(ptr, size)`; graph pools keep theirs.
  void release_shared(const std::function<void(void*, size_t)>& system_free) {
    for (auto& [size, blocks] : shared_free_) {
      for (void* p : blocks) {
        system_free(p, size);
        stats_.cached -= size;
      }
    }
    shared_free_.clear();
  }

  PoolId create_pool() {
    PoolId id = next_pool_++;
    pools_[id];
    return id;
  }

  // The pool's graph is gone and no queued work uses the pool any more: its free blocks join
  // the shared cache now, the blocks still held join it when they are given back.
  void retire_pool(PoolId pool) {
    auto pit = pools_.find(pool);
    if (pit == pools_.end()) return;
    for (auto& [size, blocks] : pit->second.free) {
      for (void* p : blocks) {
        stats_.in_use -= size;
        stats_.cached += size;
        shared_free_[size].push_back(p);
      }
    }
    for (auto it = owner_.begin(); it != owner_.end();)
      it = it->second == pool ? owner_.erase(it) : std::next(it);
    pools_.erase(pit);
  }

  // Bytes that `pool` has taken from the system (its reservation), 0 for an unknown pool.
  size_t pool_bytes(PoolId pool) const {
    auto it = pools_.find(pool);
    return it == pools_.end() ? 0 : it->second.bytes;
  }
  bool owned_by_a_pool(void* p) const { return owner_.count(p) > 0; }
  bool pool_owns(PoolId pool, void* p) const {
    auto it = owner_.find(p);
    return it != owner_.end() && it->second == pool;
  }

  MemoryStats stats() const { return stats_; }
  void reset_peak() { stats_.peak = stats_.in_use; }

 private:
  struct Pool {
    std::unordered_map<size_t, std::vector<void*>> free;
    size_t bytes = 0;
  };
  Pool& pool_at(PoolId id) { return pools_.at(id); }
  void add_in_use(size_t size) {
    stats_.in_use += size;
    if (stats_.in_use > stats_.peak) stats_.peak = stats_.in_use;
  }

  std::unordered_map<size_t, std::vector<void*>> shared_free_;
  std::unordered_map<PoolId, Pool> pools_;
  std::unordered_map<void*, PoolId> owner_;  // every block of a live pool, held or free
  PoolId next_pool_ = 1;
  MemoryStats stats_;
};

class PinnedCache {
 public:
  using Event = void*;  // a cudaEvent_t, opaque here

  // A free block of `size` bytes (rounded) whose last copy has run (`done(event)`), else
  // nullptr. Blocks never used by a copy are always ready.
  void* take(size_t size, const std::function<bool(Event)>& done) {
    auto it = free_.find(size);
    if (it == free_.end()) return nullptr;
    std::vector<Block>& blocks = it->second;
    for (size_t i = 0; i < blocks.size(); ++i) {
      Block& b = blocks[i];
      if (b.used && !done(b.event)) continue;
      b.used = false;
      Block taken = b;
      blocks.erase(blocks.begin() + std::ptrdiff_t(i));
      live_[address(taken.ptr)] = taken;
      cached_ -= size;
      return taken.ptr;
    }
    return nullptr;
  }

  // Registers a block just obtained from the system, with its own event (created on GPU
  // `device`, so recordable only on that device's streams).
  void add_fresh(void* p, size_t size, Event event, int device) {
    live_[address(p)] = Block{p, size, event, device, false};
  }

  // Takes back a block handed out by take() or add_fresh(), whatever its pending copies.
  void give_back(void* p) {
    auto it = live_.find(address(p));
    if (it == live_.end()) return;
    cached_ += it->second.size;
    free_[it->second.size].push_back(it->second);
    live_.erase(it);
  }

  // A copy from `p` is about to be queued: the event of the live block containing `p` (and
  // the GPU it belongs to), which the caller records right after queueing the copy; a null
  // event when `p` is not pinned memory of this cache (pageable memory needs no tracking).
  struct Use {
    Event event = nullptr;
    int device = -1;
  };
  Use mark_use(const void* p) {
    Block* b = containing(p);
    if (!b) return {};
    b->used = true;
    return {b->event, b->device};
  }

  bool contains(const void* p) const { return const_cast<PinnedCache*>(this)->containing(p); }

  // Gives the free blocks whose copies have run to `system_free(ptr, size, event)`.
  void release(const std::function<bool(Event)>& done,
               const std::function<void(void*, size_t, Event)>& system_free) {
    for (auto& [size, blocks] : free_) {
      for (size_t i = 0; i < blocks.size();) {
        if (blocks[i].used && !done(blocks[i].event)) {
          ++i;
          continue;
        }
        system_free(blocks[i].ptr, size, blocks[i].event);
        cached_ -= size;
        blocks.erase(blocks.begin() + std::ptrdiff_t(i));
      }
    }
  }

  size_t cached_bytes() const { return cached_; }

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    Event event = nullptr;
    int device = -1;
    bool used = false;  // a copy was queued from it since it was last handed out
  };
  static uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  Block* containing(const void* p) {
    auto it = live_.upper_bound(address(p));
    if (it == live_.begin()) return nullptr;
    --it;
    Block& b = it->second;
    return address(p) < it->first + (b.size ? b.size : 1) ? &b : nullptr;
  }

  std::map<uintptr_t, Block> live_;  // by start address, for lookups of interior pointers
  std::unordered_map<size_t, std::vector<Block>> free_;
  size_t cached_ = 0;
};

}  // namespace freight::cuda
