// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The Winograd F(2x2, 3x3) driver (baseline code; the instruction-set work
// is behind WinogradKernels): eligibility and the avx2 path's measured
// crossover, the plan (tiles per item, channel split over threads), the
// packed-weight cache with verification and recompute, thread-local scratch.
#include "cc/core/cpu/winograd/winograd.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "cc/core/cpu/gemm/packed_weights.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

constexpr int64_t kBlock = 16;      // output channels per packed block
constexpr int64_t kPositions = 16;  // 4x4 transformed positions
constexpr int64_t kMr = 6;          // tiles per micro-tile

// A 64-byte aligned buffer that only grows (as gemm_driver.cc's); zeroed
// when (re)allocated so that no byte a kernel reads is uninitialized.
struct AlignedBuffer {
  void* ptr = nullptr;
  size_t size = 0;
  ~AlignedBuffer() { std::free(ptr); }
  void* Get(size_t bytes) {
    if (bytes > size) {
      std::free(ptr);
      size = static_cast<size_t>(RoundUp(static_cast<int64_t>(bytes), 4096));
      ptr = std::aligned_alloc(64, size);
      if (ptr == nullptr) {
        size = 0;
        throw std::bad_alloc();
      }
      std::memset(ptr, 0, size);
    }
    return ptr;
  }
};

struct ThreadScratch {
  AlignedBuffer v, m, y;
};

thread_local ThreadScratch t_scratch;

std::atomic<int64_t> g_calls{0};  // WinogradCallsForTesting

// V of one item (32 bytes per tile and panel channel: 16 int16 positions)
// stays within this, so that it is L2 resident while every block's GEMMs
// stream it (measured on Zen 4: 24 vs 48 tiles at 512 channels, 1.03x).
constexpr int64_t kVBytes = 384 << 10;

struct Plan {
  int64_t tiles_h, tiles_w, tiles;  // tiles per image row / column, total
  int64_t blocks, panel, chunks, max_panels_per_chunk;
  int64_t tile_block, m_blocks;        // tiles per item, tile blocks
  int64_t blocks_per_group, n_groups;  // channel split
  int64_t items, units;
};

Plan MakePlan(const ConvGeometry& g, const WinogradKernels& k, int threads) {
  Plan p;
  p.tiles_h = CeilDiv(g.out_h, 2);
  p.tiles_w = CeilDiv(g.out_w, 2);
  p.tiles = g.batch * p.tiles_h * p.tiles_w;
  p.blocks = CeilDiv(g.out_c, kBlock);
  p.panel = k.panel_channels;
  p.chunks = CeilDiv(g.in_c, kWinogradMaxChunk);
  p.max_panels_per_chunk = CeilDiv(std::min(g.in_c, kWinogradMaxChunk), p.panel);
  const int64_t v_row = 32 * RoundUp(std::min(g.in_c, p.panel), 16);
  const int64_t max_tiles =
      std::max(kMr, std::min(k.max_tiles, kVBytes / v_row / kMr * kMr));
  int64_t m_blocks = CeilDiv(p.tiles, max_tiles);
  int64_t n_groups = 1;
  if (threads > 1) {
    if (m_blocks >= threads) {
      m_blocks = RoundUp(m_blocks, threads);  // equal shares
    } else {
      // Few tiles (small images at batch 1): split the channels, so that
      // every thread has work and streams only its share of the weights.
      n_groups = std::min(p.blocks, CeilDiv(threads, m_blocks));
    }
  }
  m_blocks = std::max<int64_t>(1, std::min(m_blocks, CeilDiv(p.tiles, kMr)));
  p.tile_block = CeilDiv(p.tiles, m_blocks);
  p.m_blocks = CeilDiv(p.tiles, p.tile_block);
  p.blocks_per_group = CeilDiv(p.blocks, n_groups);
  p.n_groups = CeilDiv(p.blocks, p.blocks_per_group);
  p.items = p.m_blocks * p.n_groups;
  // Equal units, a multiple of the thread count and at most 4 per thread
  // (as gemm_driver.cc: Eigen's parallelFor then keeps one unit per task).
  p.units = p.items;
  for (int64_t u = 4 * static_cast<int64_t>(threads); p.items > u && u >= threads;
       u -= threads) {
    if (p.items % u == 0) {
      p.units = u;
      break;
    }
  }
  return p;
}

// Runs the items; returns true if verification found the packed weights
// stale.
bool RunPass(const FusedConvArgs& a, const WinogradKernels& k, const Plan& plan,
             const PackedView& view, bool verify,
             const ParallelFor& parallel_for) {
  const ConvGeometry& g = a.geo;
  EpilogueArgs ep;
  ep.scale = a.conv_input_scale;
  ep.per_channel_scale = a.per_channel_scale;
  ep.bias = a.bias;
  ep.side = a.HasSideInput() ? a.side_input : nullptr;
  ep.side_scale = a.side_input_scale;
  int32_t lo, hi;
  OutputBounds(a, &lo, &hi);
  ep.lo = static_cast<int8_t>(lo);
  ep.hi = static_cast<int8_t>(hi);
  std::atomic<bool> stale{false};

  // V: 16 matrices [tile_block, v_ld]; one extra cache line between
  // matrices so that the 16 stores of one transformed channel group do not
  // all fall into one L1 set (matrices of 4 KiB multiples would).
  const int64_t v_ld = RoundUp(std::min(g.in_c, plan.panel), 16);
  const int64_t v_mat = RoundUp(plan.tile_block * v_ld, 32) + 32;
  const int64_t m_tile = kPositions * kBlock;  // int32 per tile and block
  const int64_t m_block =
      plan.max_panels_per_chunk > 1 ? plan.tile_block * m_tile : 0;
  const int64_t m_size =
      (m_block > 0 ? plan.blocks_per_group : 1) * plan.tile_block * m_tile;
  const int64_t y_size =
      plan.chunks > 1 ? plan.blocks_per_group * plan.tile_block * 4 * kBlock : 0;

  auto run_items = [&](int64_t item_begin, int64_t item_end) {
    ThreadScratch& s = t_scratch;
    WinogradItemArgs t;
    t.input = a.input;
    t.geo = &g;
    t.tiles_h = plan.tiles_h;
    t.tiles_w = plan.tiles_w;
    t.panel_channels = plan.panel;
    t.w = &view;
    t.filter = a.filter;
    t.verify = verify;
    const int64_t filter_bytes = g.FilterElements();
    t.v = static_cast<int16_t*>(
        s.v.Get(static_cast<size_t>(kPositions * v_mat * 2 + 64)));
    t.v_ld = v_ld;
    t.v_mat = v_mat;
    t.m = static_cast<int32_t*>(s.m.Get(static_cast<size_t>(m_size * 4)));
    t.m_block = m_block;
    t.y = y_size > 0 ? static_cast<int32_t*>(s.y.Get(static_cast<size_t>(y_size * 4)))
                     : nullptr;
    t.ep = &ep;
    t.output = a.output;
    for (int64_t item = item_begin; item < item_end; ++item) {
      const int64_t tb = item / plan.n_groups;
      const int64_t ngroup = item % plan.n_groups;
      t.t0 = tb * plan.tile_block;
      t.tiles = std::min(plan.tile_block, plan.tiles - t.t0);
      t.block_begin = ngroup * plan.blocks_per_group;
      t.block_end = std::min(plan.blocks, t.block_begin + plan.blocks_per_group);
      // Item i compares filter bytes [F * i / items, F * (i + 1) / items).
      t.verify_begin = filter_bytes * item / plan.items;
      t.verify_end = filter_bytes * (item + 1) / plan.items;
      if (k.item(t)) stale.store(true, std::memory_order_relaxed);
    }
  };

  const int64_t items_per_unit = CeilDiv(plan.items, plan.units);
  // Cycles: 16 positions x pairs x 2 ymm VPMADDWD per tile and block, at
  // about 2 per cycle, plus the transforms.
  const int64_t cost = plan.tile_block * plan.blocks_per_group *
                       (kPositions * CeilDiv(g.in_c, 2) + 64) * items_per_unit;
  parallel_for(plan.units, cost, [&](int64_t begin, int64_t end) {
    run_items(begin * items_per_unit, std::min(plan.items, end * items_per_unit));
  });
  return stale.load();
}

}  // namespace

int64_t WinogradCallsForTesting() { return g_calls.load(); }

int64_t WinogradPackedGroups(int64_t in_c) {
  return kPositions * CeilDiv(in_c, 2);
}

bool WinogradEligible(const ConvGeometry& g) {
  return g.groups == 1 && g.filter_h == 3 && g.filter_w == 3 &&
         g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 &&
         g.dilation_w == 1 && g.in_c >= 1 && g.out_c >= 1;
}

bool WinogradPreferredAvx2(const ConvGeometry& g) {
  // Measured on an AMD EPYC Zen 4 restricted to the avx2 path (1 thread,
  // best of interleaved runs, direct time / Winograd time):
  //  * input channels: 8 -> 0.93-1.0x, 12-14 -> 1.1-1.2x, 16 -> 1.3-1.4x,
  //    64 and more -> 1.5-2.1x (output channels matter little: 64 -> 4
  //    output channels still 1.85x, 8 -> 64 1.0x);
  //  * output size: 2x2 tiles cost 16 multiplications per 4 outputs where
  //    the direct kernel needs 36, but partial tiles waste some: 1x1 output
  //    (9 vs 16) 0.6-0.75x, 3x3 (81 vs 64) 1.0-1.15x, 4x4, 5x5, 7x7 and up
  //    1.4-2.1x; a single tile at batch 1 (2x2 output) ties, the packed U'
  //    (3.5x the filter's bytes) being read for one tile.
  // So: at least 16 input channels, at least 4 tiles, and 9 * outputs >=
  // 1.5 * 16 * tiles (direct multiplications at least 1.5x Winograd's).
  // Cold weights do not change that in a model. bench_core with 16 filters
  // cycled (134 MiB of U' at 7x7x512 -> 512, every call from DRAM) made
  // Winograd lose there (direct / Winograd 0.73 at batch 1, 0.78 at batch
  // 8, one Zen 5 thread), but sending such layers (at most 16 tiles per
  // image, U' over 2 MiB) to the direct kernel made ResNet50 slower: its
  // three 7x7x512 3x3 steps 1.08-1.21 -> 1.24-1.34 ms at batch 1 (step
  // profiler, forced avx2, old and new builds alternated twice), the whole
  // model at batch 8 1.036x (1 thread) and 1.048x (2 threads) the time
  // (medians of 5 alternated rounds), batch 1 unchanged (0.99x); probably a model's
  // U' stays partly in the 32 MiB L3 between calls (not measured).
  if (!WinogradEligible(g) || g.in_c < 16) return false;
  const int64_t tiles_h = CeilDiv(g.out_h, 2), tiles_w = CeilDiv(g.out_w, 2);
  if (g.batch * tiles_h * tiles_w < 4) return false;
  return 3 * g.out_h * g.out_w >= 8 * tiles_h * tiles_w;
}

void RunWinograd(const FusedConvArgs& a, const WinogradKernels& k,
                 const ParallelFor& parallel_for, const int8_t* cache_key) {
  if (cache_key == nullptr) cache_key = a.filter;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const ConvGeometry& g = a.geo;
  const int threads =
      parallel_for.run ? std::max(1, parallel_for.num_threads) : 1;
  const Plan plan = MakePlan(g, k, threads);
  PackedWeightsCache& cache = PackedWeightsCache::Global();
  bool fresh = false;
  std::shared_ptr<const PackedWeights> w =
      cache.Get(a.filter, cache_key, g, *k.packing, a.filter_pin, &fresh);
  if (RunPass(a, k, plan, w->view(), !fresh, parallel_for)) {
    // The filter changed since it was packed: repack, recompute.
    w = cache.Replace(a.filter, cache_key, g, *k.packing, a.filter_pin);
    RunPass(a, k, plan, w->view(), false, parallel_for);
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
