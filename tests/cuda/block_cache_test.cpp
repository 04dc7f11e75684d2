// The CUDA backend's cache logic on the host (block_cache.h), without a GPU: the shared device
// cache, the private pools of CUDA graphs ("capture mode": blocks allocated or freed during a
// capture stay reserved for the graph), their retirement, and the pinned host cache that keeps
// a block whose copy is still queued out of reuse. Fake system allocators hand out addresses
// from an arena and record what was freed.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "backend/cuda/block_cache.h"

namespace freight::cuda {
namespace {

// Distinct fake addresses, never dereferenced; `limit` bytes in all (nullptr beyond: "full").
struct FakeSystem {
  size_t limit = size_t(1) << 40;
  size_t used = 0;
  uintptr_t next = 0x100000;
  std::map<void*, size_t> live;
  std::vector<void*> freed;
  std::function<void*(size_t)> alloc() {
    return [this](size_t n) -> void* {
      if (used + n > limit) return nullptr;
      used += n;
      void* p = reinterpret_cast<void*>(next);
      next += n + 4096;
      live[p] = n;
      return p;
    };
  }
  std::function<void(void*, size_t)> free_fn() {
    return [this](void* p, size_t size) {
      auto it = live.find(p);
      ASSERT_NE(it, live.end()) << "freed twice or never allocated";
      EXPECT_EQ(size, it->second) << "freed with another size than it was allocated with";
      used -= it->second;
      live.erase(it);
      freed.push_back(p);
    };
  }
};

constexpr size_t kSize = 4096;

TEST(BlockCache, RoundsSmallAndLargeRequests) {
  EXPECT_EQ(size_class(1), 512u);
  EXPECT_EQ(size_class(512), 512u);
  EXPECT_EQ(size_class(513), 1024u);
  EXPECT_EQ(size_class((size_t(1) << 20) + 1), size_t(2) << 20);
}

TEST(BlockCache, SharedCacheReusesFreedBlocksOfTheSameSize) {
  FakeSystem sys;
  BlockCache c;
  bool fresh = false;
  void* a = c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh);
  EXPECT_TRUE(fresh);
  EXPECT_EQ(c.stats().in_use, kSize);
  c.give_back(a, kSize);
  EXPECT_EQ(c.stats().in_use, 0u);
  EXPECT_EQ(c.stats().cached, kSize);
  void* b = c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh);
  EXPECT_FALSE(fresh);
  EXPECT_EQ(a, b);
  EXPECT_EQ(c.stats().cached, 0u);
  EXPECT_EQ(c.stats().fresh, 1u);
  EXPECT_EQ(c.stats().allocs, 2u);
  void* d = c.take(2 * kSize, BlockCache::kShared, sys.alloc(), &fresh);
  EXPECT_TRUE(fresh) << "another size is a fresh block";
  EXPECT_NE(d, b);
}

TEST(BlockCache, ACaptureNeverTakesBlocksOfTheSharedCache) {
  FakeSystem sys;
  BlockCache c;
  bool fresh = false;
  void* shared = c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh);
  c.give_back(shared, kSize);  // a free shared block of the right size...
  BlockCache::PoolId pool = c.create_pool();
  void* p = c.take(kSize, pool, sys.alloc(), &fresh);
  EXPECT_TRUE(fresh) << "...is not handed to the graph";
  EXPECT_NE(p, shared);
  EXPECT_TRUE(c.pool_owns(pool, p));
  EXPECT_FALSE(c.pool_owns(pool, shared));
  EXPECT_EQ(c.pool_bytes(pool), kSize);
}

TEST(BlockCache, BlocksFreedDuringACaptureAreReusedByThatCaptureOnly) {
  FakeSystem sys;
  BlockCache c;
  bool fresh = false;
  BlockCache::PoolId pool = c.create_pool();
  void* t1 = c.take(kSize, pool, sys.alloc(), &fresh);
  c.give_back(t1, kSize);  // a temporary of the captured step dies...
  void* t2 = c.take(kSize, pool, sys.alloc(), &fresh);
  EXPECT_FALSE(fresh);
  EXPECT_EQ(t1, t2) << "...and a later allocation of the same capture reuses it (stream order)";
  c.give_back(t2, kSize);
  // Capture over: shared allocations never see the pool's free block.
  void* s = c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh);
  EXPECT_TRUE(fresh);
  EXPECT_NE(s, t1);
}

TEST(BlockCache, PoolBlocksStayReservedAndCountAsInUseUntilRetired) {
  FakeSystem sys;
  BlockCache c;
  bool fresh = false;
  BlockCache::PoolId pool = c.create_pool();
  void* held = c.take(kSize, pool, sys.alloc(), &fresh);      // e.g. a parameter's gradient
  void* temp = c.take(2 * kSize, pool, sys.alloc(), &fresh);  // an activation
  c.give_back(temp, 2 * kSize);
  EXPECT_EQ(c.stats().in_use, 3 * kSize) << "the graph writes its free blocks on every replay";
  EXPECT_EQ(c.stats().peak, 3 * kSize);
  EXPECT_EQ(c.stats().cached, 0u);
  // After the capture the host drops the gradient (zero_grad before an eager step): it stays
  // the graph's.
  c.give_back(held, kSize);
  EXPECT_EQ(c.stats().in_use, 3 * kSize);
  void* s1 = c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh);
  void* s2 = c.take(2 * kSize, BlockCache::kShared, sys.alloc(), &fresh);
  EXPECT_TRUE(fresh);
  EXPECT_NE(s1, held);
  EXPECT_NE(s2, temp);
  // The shared cache is released (an out-of-memory retry): the pool keeps its blocks.
  c.give_back(s1, kSize);
  c.give_back(s2, 2 * kSize);
  c.release_shared(sys.free_fn());
  EXPECT_EQ(sys.freed.size(), 2u);
  EXPECT_TRUE(sys.live.count(held) && sys.live.count(temp));
  // The graph is destroyed: its free blocks join the shared cache.
  c.retire_pool(pool);
  EXPECT_EQ(c.stats().in_use, 0u);
  EXPECT_EQ(c.stats().cached, 3 * kSize);
  EXPECT_EQ(c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh), held);
  EXPECT_FALSE(fresh);
}

TEST(BlockCache, BlocksHeldWhenAPoolRetiresReturnToTheSharedCache) {
  FakeSystem sys;
  BlockCache c;
  bool fresh = false;
  BlockCache::PoolId pool = c.create_pool();
  void* held = c.take(kSize, pool, sys.alloc(), &fresh);
  c.retire_pool(pool);
  EXPECT_FALSE(c.pool_owns(pool, held));
  EXPECT_EQ(c.stats().in_use, kSize);
  c.give_back(held, kSize);
  EXPECT_EQ(c.stats().in_use, 0u);
  EXPECT_EQ(c.stats().cached, kSize);
  EXPECT_EQ(c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh), held);
}

TEST(BlockCache, TwoPoolsNeverShareBlocks) {
  FakeSystem sys;
  BlockCache c;
  bool fresh = false;
  BlockCache::PoolId a = c.create_pool(), b = c.create_pool();
  void* pa = c.take(kSize, a, sys.alloc(), &fresh);
  c.give_back(pa, kSize);
  void* pb = c.take(kSize, b, sys.alloc(), &fresh);
  EXPECT_TRUE(fresh);
  EXPECT_NE(pa, pb);
}

TEST(BlockCache, AFullSystemReturnsNullAndChangesNothing) {
  FakeSystem sys;
  sys.limit = kSize;
  BlockCache c;
  bool fresh = false;
  void* a = c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh), nullptr);
  EXPECT_EQ(c.stats().in_use, kSize);
  c.give_back(a, kSize);
  c.release_shared(sys.free_fn());
  EXPECT_NE(c.take(kSize, BlockCache::kShared, sys.alloc(), &fresh), nullptr)
      << "released memory can be taken again";
}

// ---------------------------------------------------------------- pinned host cache
TEST(PinnedCache, ABlockIsReusedOnlyOnceItsLastCopyHasRun) {
  PinnedCache c;
  std::set<PinnedCache::Event> done;
  auto is_done = [&](PinnedCache::Event e) { return done.count(e) > 0; };
  char arena[2][kSize];
  auto* ev0 = reinterpret_cast<PinnedCache::Event>(0x10);
  auto* ev1 = reinterpret_cast<PinnedCache::Event>(0x20);
  c.add_fresh(arena[0], kSize, ev0, 0);
  c.add_fresh(arena[1], kSize, ev1, 0);
  EXPECT_EQ(c.mark_use(arena[0] + 100).event, ev0) << "interior addresses find their block";
  EXPECT_EQ(c.mark_use(arena[0] + 100).device, 0);
  c.give_back(arena[0]);  // freed while its copy may still be queued
  c.give_back(arena[1]);  // never copied from
  EXPECT_EQ(c.cached_bytes(), 2 * kSize);
  void* first = c.take(kSize, is_done);
  EXPECT_EQ(first, arena[1]) << "the unused block is ready at once";
  EXPECT_EQ(c.take(kSize, is_done), nullptr) << "the other one's copy has not run";
  done.insert(ev0);
  EXPECT_EQ(c.take(kSize, is_done), arena[0]);
  EXPECT_EQ(c.cached_bytes(), 0u);
}

TEST(PinnedCache, PageableMemoryIsNotTracked) {
  PinnedCache c;
  char pinned[kSize], pageable[kSize];
  c.add_fresh(pinned, kSize, reinterpret_cast<PinnedCache::Event>(0x10), 1);
  EXPECT_EQ(c.mark_use(pageable).event, nullptr);
  EXPECT_FALSE(c.contains(pageable));
  EXPECT_TRUE(c.contains(pinned + kSize - 1));
  EXPECT_FALSE(c.contains(pinned + kSize));
  EXPECT_EQ(c.mark_use(pinned).device, 1);
}

TEST(PinnedCache, ReleaseFreesOnlyBlocksWhoseCopiesRan) {
  PinnedCache c;
  char arena[2][kSize];
  auto* ev0 = reinterpret_cast<PinnedCache::Event>(0x10);
  auto* ev1 = reinterpret_cast<PinnedCache::Event>(0x20);
  c.add_fresh(arena[0], kSize, ev0, 0);
  c.add_fresh(arena[1], kSize, ev1, 0);
  c.mark_use(arena[0]);
  c.mark_use(arena[1]);
  c.give_back(arena[0]);
  c.give_back(arena[1]);
  std::vector<void*> freed;
  c.release([&](PinnedCache::Event e) { return e == ev1; },
            [&](void* p, size_t size, PinnedCache::Event) {
              EXPECT_EQ(size, kSize);
              freed.push_back(p);
            });
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0], arena[1]);
  EXPECT_EQ(c.cached_bytes(), kSize);
}

}  // namespace
}  // namespace freight::cuda
