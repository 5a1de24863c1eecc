// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The instruction-set paths' common driver (baseline code; the ISA kernels
// are reached through IsaKernels function pointers):
//
//  * GEMM view: C[M, Co] = A[M, K] * B[K, Co], M = output pixels, K = Kh *
//    Kw * Ci; the epilogue fused into the micro-kernel's store.
//  * tiling: output pixels are cut into M tiles, channels into groups of
//    blocks (64 or 16 channels); a work item is (M tile, channel group). K is
//    processed in panels (kc groups): per panel the item gathers its tile's
//    slice of the im2col rows (K-sliced im2col, rows x 384 B; each
//    micro-tile's rows just before their first use, so the gather overlaps
//    the multiply) and multiplies it with each block's weight panel (kc x 64
//    channels, 24 KiB, L1 resident) while 6-row micro-tiles stream past it;
//    int32 partial sums carry over between panels (on avx512vnni, cached
//    weights use panels of up to 4096 groups, in practice all of K: the
//    micro-kernel streams a block's weights from L2 with no partial sums;
//    IsaKernels::kc_groups_cached; amx's packings over 1 MiB instead keep
//    kc_groups panels, run panel-major: IsaKernels::panel_major_bytes).
//    Tiles are as tall as the
//    A-panel and partial-sum budgets allow (kAPanelBytes, kPartialBytes), so
//    weights stream from memory once or twice per call even for
//    weight-heavy layers.
//  * pointwise convolutions (1x1, stride 1, no padding) are a direct GEMM:
//    the rows are the input pixels themselves, only converted to the
//    kernel's operand form (a contiguous XOR / widening pass, no gather),
//    or on avx512vnni read in place.
//  * one or two output pixels with a large filter run the ISA's GEMV
//    (RunGemv below) instead, unless the filter is pinned and the ISA
//    prefers its packed GEMM then (IsaKernels::gemv_unpinned_only).
//  * weights: packed once per filter and cached (packed_weights.h). A
//    filter of at most kCopyCheckMaxBytes is checked against the copy of
//    its bytes the entry keeps (one memcmp before computing); a larger one
//    is verified against the filter while computing, and with a single M
//    tile (every weight panel has one consumer) it is instead packed from
//    the filter right before use (one read of the filter; no packed copy to
//    read, nothing to verify, no cache entry). A pinned filter
//    (FusedConvArgs::filter_pin: a TF variable's buffer) is neither checked
//    nor packed on the fly: its cached packing is used as it is.
//  * threads: with many M tiles each item is one tile over all channels and
//    the caller's ParallelFor balances them; with few (small images, batch
//    1) the channels are split too and each thread gets a contiguous run of
//    items, so both cores stay busy.
//
// Memory per call: no allocation but the output (and a packing on a cache
// miss); per thread, thread-local and reused across calls: one A panel
// buffer (<= kAPanelBytes + 64), one int32 partial-sum tile (<=
// kPartialBytes) and, for on-the-fly weights, one weight panel per item
// block (<= 512 channels x 384 B).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/gemm/im2col.h"
#include "cc/core/cpu/gemm/packed_weights.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

// A 64-byte aligned buffer that only grows; zeroed when (re)allocated so
// that no byte a kernel reads is ever uninitialized.
struct AlignedBuffer {
  void* ptr = nullptr;
  size_t size = 0;
  ~AlignedBuffer() { std::free(ptr); }
  void* Get(size_t bytes) {
    if (bytes > size) {
      std::free(ptr);
      size = RoundUp(static_cast<int64_t>(bytes), 4096);
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
  AlignedBuffer a, partial, panel, sums, gemv, padded;
};

thread_local ThreadScratch t_scratch;

// Test hooks (gemm_kernels.h): 0 automatic, 1 always cached, 2 always on
// the fly; the GEMV calls so far.
std::atomic<int> g_weight_mode{0};
std::atomic<int64_t> g_gemv_calls{0};
std::atomic<int64_t> g_gemv_packed_calls{0};
// Test hooks (gemm_kernels.h): 0 automatic, 1 wherever it fits, 2 never.
std::atomic<int> g_padded_mode{0};
std::atomic<int> g_in_place_rows_mode{0};

// The padded input of GemmTileArgs::padded, built by the calling thread's
// BuildPaddedInput (data null: none).
struct PaddedInput {
  const int8_t* data = nullptr;
  int64_t h = 0, w = 0, image_rows = 0;
};

// The padded input's shape for g (data still null): padded_h = pad_top +
// in_h + pad_bottom rows of padded_w = pad_left + in_w + pad_right pixels
// per image, out_h * padded_w virtual pixels rounded up to 16 per image.
PaddedInput PaddedShape(const ConvGeometry& g) {
  PaddedInput p;
  p.h = g.pad_top + g.in_h + g.pad_bottom;
  p.w = g.pad_left + g.in_w + g.pad_right;
  p.image_rows = RoundUp(g.out_h * p.w, 16);
  return p;
}

// Whether a convolution that fits a padded input (PaddedInputFits) runs on
// one: its virtual pixels (gemm_kernels.h) compute padded_w - out_w extra
// columns per output row and pad each image to a multiple of 16 rows,
// while gathered rows cost a gather but pack every image's pixels densely
// (in micro-tiles of isa.mr rows). So the padded input is used where its
// rows are at most kMaxPaddedRowShare times the gathered ones. One Sapphire
// Rapids-class thread (bench_core, amx, pinned weights), gathered ->
// padded: ResNet-50's 56x56x64 3x3 -> 64 118 -> 92 us (rows 1.04x),
// 28x28x128 3x3 111 -> 92 (1.06x), 14x14x256 3x3 100 -> 87 (1.0x), all at
// batch 1; 14x14x256 at batch 8 (1.14x) 735-885 -> 688-697; 7x7x512 3x3
// at batch 1 (1.0x) 156 -> 148, at batch 8 (1.23x) 1077 -> 1236.
constexpr double kMaxPaddedRowShare = 1.18;

bool UsePaddedInput(const IsaKernels& isa, const ConvGeometry& g) {
  if (!isa.padded_input || !PaddedInputFits(g)) return false;
  const int mode = g_padded_mode.load(std::memory_order_relaxed);
  if (mode != 0) return mode == 1;
  const int64_t padded_rows = g.batch * PaddedShape(g).image_rows;
  const int64_t gathered_rows = RoundUp(g.batch * g.out_h * g.out_w, isa.mr);
  return static_cast<double>(padded_rows) <=
         kMaxPaddedRowShare * static_cast<double>(gathered_rows);
}

constexpr int64_t kAPanelBytes = 192 << 10;   // rows x one K panel of A
constexpr int64_t kPartialBytes = 512 << 10;  // rows x item channels int32
constexpr int64_t kMaxRows = 512;
constexpr int64_t kMaxOnTheFlyChannels = 512;
constexpr int64_t kMinWideTileRows = 64;  // see RunGemmConv

struct Plan {
  int64_t pixels, k, groups, kc, panels, lda, blocks;
  int64_t tile_rows, m_tiles, n_groups, blocks_per_group, items, units;
  bool on_the_fly;
  bool per_block_items;  // one block an item, claimed one at a time
  bool panel_major = false;  // GemmTileArgs::panel_major
};

// Whether out_c channels split into `groups` groups of at most
// `group_channels` each leave the widest group over 1.125x the mean group
// (see per_block_items in MakePlan).
bool Lopsided(int64_t group_channels, int64_t groups, int64_t out_c) {
  return 8 * std::min(group_channels, out_c) * groups > 9 * out_c;
}

// kc: the K panel size in groups (isa.kc_groups, or up to
// isa.kc_groups_cached for weights from the cache: RunGemmConv). The GEMM's
// rows are the output pixels, or the virtual pixels of a padded input.
Plan MakePlan(const ConvGeometry& g, const IsaKernels& isa, int threads,
              int64_t kc, const PaddedInput& padded) {
  Plan p;
  p.pixels = padded.data != nullptr ? g.batch * padded.image_rows
                                    : g.batch * g.out_h * g.out_w;
  p.k = g.filter_h * g.filter_w * g.in_c;
  p.groups = PackedGroups(isa, p.k);
  p.kc = kc;
  p.panels = CeilDiv(p.groups, p.kc);
  p.lda = RoundUp(std::min(p.groups, p.kc) * isa.lane_bytes, 64);
  p.blocks = CeilDiv(g.out_c, isa.block);
  // Weight-heavy layers (more output channels than pixels: the weights
  // outweigh the gathered rows) split channels across threads first, so
  // each thread streams only its share of the weights; the others split
  // pixels first, so each thread gathers only its share of the rows.
  // Channels are split in runs of isa.split_blocks blocks. An ISA with
  // isa.rows_first splits rows first wherever each thread gets at least two
  // micro-tile rows, and weight-heavy layers too while out_c <= 2 x pixels;
  // one with isa.rows_first_small_filter while the filter is no larger than
  // the rows in and out (see IsaKernels).
  const int64_t split = std::max<int64_t>(1, isa.split_blocks);
  const int64_t runs = CeilDiv(p.blocks, split);
  const bool small_filter = p.k * g.out_c <= p.pixels * (p.k + g.out_c);
  const bool rows_first =
      threads > 1 && CeilDiv(p.pixels, isa.mr) >= 2 * threads &&
      ((isa.rows_first && g.out_c <= 2 * p.pixels) ||
       (isa.rows_first_small_filter && small_filter));
  int64_t n_groups = 1;
  if (threads > 1 && g.out_c >= p.pixels && !rows_first) {
    n_groups = std::min<int64_t>(runs, threads);
  }
  // An ISA with rows_first (amx) also splits rows, wherever each thread
  // gets a micro-tile row, in place of a channel split that would be
  // lopsided (and so become per-block items, below): MobileNetV2's 7x7x576
  // -> 160 and 7x7x960 -> 160 (160 channels: 5 block pairs, 3 : 2), where
  // the per-block items (32 rows x 32 channels) ran slower on two threads
  // than one thread's whole layer. bench_core, amx, batch 1, two threads
  // (Xeon with AMX, KVM): 7x7x576 -> 160 6.0-6.7 -> 4.6-5.2 us, 7x7x960 ->
  // 160 10.2-10.8 -> 6.4-6.7 (one thread 5.1 and 8.0). In MobileNetV2's
  // chain (bench_sequence, batch 1, two threads, four alternations) the
  // three such steps 38-43 -> 29-34 us; the steps after them (160 -> 960,
  // a channel split reading rows both threads wrote either way) 41-46
  // against 41-47; in TF (step profiler, InferenceRunner, the two .so
  // alternated three times) 42-54 -> 33-37 us, the next steps 44-49 ->
  // 45-46, the steps' sum 0.99x in each pair. Even splits stay channel
  // splits: split by rows, 7x7x160 -> 960 ran 1.03-1.05x slower alone and
  // 1.04-1.14x in the chain (each thread then reads all 154 KB of weights),
  // 7x7x320 -> 1280 1.08x alone and the same in the chain, 7x7x960 -> 320
  // 1.01-1.08x slower alone and 0.89x in one chain run (not enough to
  // change it on).
  const bool rows_over_lopsided =
      isa.rows_first && n_groups > 1 && CeilDiv(p.pixels, isa.mr) >= threads &&
      Lopsided(CeilDiv(runs, n_groups) * split * isa.block, n_groups, g.out_c);
  if (rows_over_lopsided) n_groups = 1;
  const bool split_rows = rows_first || rows_over_lopsided;
  const int64_t group_channels = CeilDiv(runs, n_groups) * split * isa.block;
  int64_t max_rows = std::min(kMaxRows, kAPanelBytes / p.lda);
  if (p.panels > 1) {
    max_rows = std::min(max_rows, kPartialBytes / (group_channels * 4));
  }
  max_rows = std::max<int64_t>(isa.mr, max_rows / isa.mr * isa.mr);
  int64_t m_tiles = CeilDiv(p.pixels, max_rows);
  if (threads > 1 && n_groups == 1) {
    if (m_tiles >= 4 * threads) {
      // Equal units, 4 per thread (see `units` below).
      m_tiles = RoundUp(m_tiles, 4 * threads);
    } else if (m_tiles >= threads) {
      m_tiles = RoundUp(m_tiles, threads);
    } else if (split_rows) {
      m_tiles = threads;
    } else {
      n_groups = std::min(runs, CeilDiv(2 * threads, m_tiles));
      if (m_tiles * n_groups < threads) {
        m_tiles = std::min(CeilDiv(p.pixels, isa.mr), CeilDiv(threads, n_groups));
      }
    }
  } else if (threads > 1 && m_tiles * n_groups < threads) {
    m_tiles = std::min(CeilDiv(p.pixels, isa.mr), CeilDiv(threads, n_groups));
  }
  m_tiles = std::max<int64_t>(1, std::min(m_tiles, p.pixels));
  // Even tile heights, multiples of isa.tile_row_granule (the micro-tile
  // height unless the ISA names a finer one) where possible.
  const int64_t granule = isa.tile_row_granule > 0 ? isa.tile_row_granule : isa.mr;
  p.tile_rows = RoundUp(CeilDiv(p.pixels, m_tiles), granule);
  p.m_tiles = CeilDiv(p.pixels, p.tile_rows);
  p.blocks_per_group = CeilDiv(runs, n_groups) * split;
  p.n_groups = CeilDiv(p.blocks, p.blocks_per_group);
  // A channel split into groups of whole blocks can be lopsided (160
  // channels on 2 threads: 128 : 32; 96: 64 : 32). When the widest group
  // has over 1.125x the mean group's channels, every block is an item
  // instead, with at least `threads` M tiles, and the items are claimed
  // one at a time (units = items below). Measured (bench_core, a spinning
  // helper thread, Zen 4, batch 1, 2 threads): 7x7x960 -> 160 34 -> 25 us,
  // 7x7x576 -> 160 24 -> 19, 14x14x576 -> 96 38 -> 32, 14x14x384 -> 96
  // 25-27 -> 20-21. The bound was 1.25x until 3 : 2 and 4 : 3 splits were
  // measured on Zen 5 (bench_core, avx512vnni, 2 threads, old and new
  // alternated, median time ratio): 7x7x960 -> 320 (MobileNetV2) 21.4 ->
  // 18.7 us (0.83), 7x7x512 -> 448 0.91; on Zen 4 the 3 : 2 split had
  // measured the same either way. Splits within 1.125x stay as they are
  // (7x7x160 -> 960, 8 : 7 blocks, took 25 -> 38 us as 30 small items on
  // Zen 4; 7x7x960 -> 160 and 7x7x160 -> 960 unchanged on Zen 5). The ymm
  // paths (avx2, avxvnni: 7x7x960 -> 320 0.97-1.01) are unchanged; amx
  // splits rows instead wherever it can (rows_over_lopsided above).
  p.per_block_items = false;
  if (threads > 1 && p.n_groups > 1 &&
      Lopsided(p.blocks_per_group * isa.block, p.n_groups, g.out_c)) {
    p.per_block_items = true;
    p.blocks_per_group = split;
    p.n_groups = runs;
    if (p.m_tiles < threads) {
      p.tile_rows = RoundUp(CeilDiv(p.pixels, threads), isa.mr);
      p.m_tiles = CeilDiv(p.pixels, p.tile_rows);
    }
  }
  p.items = p.m_tiles * p.n_groups;
  // Channel split: contiguous runs of items per thread (one item at a time
  // for per-block items). Otherwise equal
  // units of whole tiles, a multiple of the thread count and at most 4 per
  // thread: Eigen's parallelFor (TF's pool) keeps one unit per task then,
  // instead of coarsening to a block count that does not divide evenly.
  if (p.per_block_items) {
    p.units = p.items;
  } else if (p.n_groups > 1) {
    p.units = std::min<int64_t>(threads, p.items);
  } else {
    p.units = p.items;
    for (int64_t u = 4 * static_cast<int64_t>(threads);
         p.items > u && u >= threads; u -= threads) {
      if (p.items % u == 0) {
        p.units = u;
        break;
      }
    }
  }
  // On-the-fly packing needs a panel per item block (kc groups x lane_bytes
  // per channel): only for items of at most kMaxOnTheFlyChannels.
  const int mode = g_weight_mode.load(std::memory_order_relaxed);
  p.on_the_fly =
      mode == 2 || (mode == 0 && p.m_tiles == 1 &&
                    p.blocks_per_group * isa.block <= kMaxOnTheFlyChannels);
  return p;
}

EpilogueArgs MakeEpilogueArgs(const FusedConvArgs& a) {
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
  return ep;
}

// Few output pixels and a large filter (isa.gemv, gemm_kernels.h): the rows
// are the input pixels (pointwise) or gathered by the portable im2col into
// the caller's scratch (read by the helpers while the caller waits for
// them); units of kGemvUnitBlocks channel blocks split across threads.
// Measured (bench_core, Zen 4, 16 filters cycled, as in a model), GEMM ->
// GEMV: 1x1x1280 -> 1000 (MobileNetV2's head) batch 1 279 -> 60 us on one
// thread, batch 2 298 -> 95 (two threads 99 -> 45); 1x1x2048 -> 1000
// (ResNet50's) 809 -> 220 us. Where it lost, it is not used: 3 or 4 rows
// of a 3x3x512 -> 512 filter (the GEMV issues 4x the VPDPBUSDs of the
// packed GEMM: 9% slower at 3 rows), and filters under the copy check
// (1152 -> 48: 2.8 -> 6.5 us, the four accumulator chains of one block are
// latency-bound).
constexpr int64_t kGemvUnitBlocks = 4;

// packed: a pinned filter's packing for isa.gemv_packed, which runs in
// place of isa.gemv then.
void RunGemv(const FusedConvArgs& a, const IsaKernels& isa,
             const ParallelFor& parallel_for, const PackedView* packed = nullptr) {
  g_gemv_calls.fetch_add(1, std::memory_order_relaxed);
  if (packed != nullptr) g_gemv_packed_calls.fetch_add(1, std::memory_order_relaxed);
  const ConvGeometry& g = a.geo;
  const EpilogueArgs ep = MakeEpilogueArgs(a);
  GemvArgs t;
  t.rows = g.batch * g.out_h * g.out_w;
  t.k = g.ReductionDepth();
  if (IsPointwise(g)) {
    t.a = a.input;
    t.lda = g.in_c;
  } else {
    int8_t* rows = static_cast<int8_t*>(
        t_scratch.gemv.Get(static_cast<size_t>(t.rows * t.k)));
    Im2ColRows(a.input, g, 0, t.rows, rows, t.k);
    t.a = rows;
    t.lda = t.k;
  }
  t.filter = a.filter;
  t.out_c = g.out_c;
  t.ep = &ep;
  t.output = a.output;
  t.packed = packed;
  void (*const gemv)(const GemvArgs&) = packed != nullptr ? isa.gemv_packed : isa.gemv;
  const int64_t blocks = CeilDiv(g.out_c, kGemvBlock);
  const int64_t units = CeilDiv(blocks, kGemvUnitBlocks);
  // Cost in cycles: about one VPDPBUSD per row, filter row and 16 channels.
  const int64_t cost = t.k * t.rows * kGemvUnitBlocks * kGemvBlock / 16;
  parallel_for(units, cost, [&](int64_t begin, int64_t end) {
    GemvArgs u = t;
    u.block_begin = begin * kGemvUnitBlocks;
    u.block_end = std::min(blocks, end * kGemvUnitBlocks);
    gemv(u);
  });
}

// The input zero-padded for GemmTileArgs::padded (gemm_kernels.h) to
// PaddedShape, in the calling thread's scratch, rows copied over
// parallel_for, then zeros for the last image's virtual pixels past its
// rows (their windows read up to one window past the image's end).
PaddedInput BuildPaddedInput(const int8_t* input, const ConvGeometry& g,
                             const ParallelFor& parallel_for) {
  PaddedInput p = PaddedShape(g);
  const int64_t ci = g.in_c;
  const int64_t image_bytes = p.h * p.w * ci;
  const int64_t slack =
      (p.image_rows + (g.filter_h - 1) * g.dilation_h * p.w +
       (g.filter_w - 1) * g.dilation_w + 1) * ci - image_bytes + 64;
  const int64_t total = g.batch * image_bytes + std::max<int64_t>(slack, 64);
  int8_t* buf = static_cast<int8_t*>(t_scratch.padded.Get(static_cast<size_t>(total)));
  const int64_t rows = g.batch * p.h;
  const int64_t row_bytes = p.w * ci;
  auto copy_rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = r / p.h, y = r % p.h - g.pad_top;
      int8_t* dst = buf + r * row_bytes;
      if (y < 0 || y >= g.in_h) {
        std::memset(dst, 0, static_cast<size_t>(row_bytes));
        continue;
      }
      const int64_t left = g.pad_left * ci, mid = g.in_w * ci;
      std::memset(dst, 0, static_cast<size_t>(left));
      std::memcpy(dst + left, input + (n * g.in_h + y) * mid, static_cast<size_t>(mid));
      std::memset(dst + left + mid, 0, static_cast<size_t>(row_bytes - left - mid));
    }
  };
  parallel_for(rows, row_bytes, copy_rows);
  std::memset(buf + g.batch * image_bytes, 0, static_cast<size_t>(total - g.batch * image_bytes));
  p.data = buf;
  return p;
}

// Runs the items of one pass. `view` is null for on-the-fly weights.
// Returns true if verification found the packed weights stale.
bool RunPass(const FusedConvArgs& a, const IsaKernels& isa, const Plan& plan,
             const PackedView* view, bool verify,
             const ParallelFor& parallel_for, LutBody lut,
             const PaddedInput& padded) {
  const ConvGeometry& g = a.geo;
  const EpilogueArgs ep = MakeEpilogueArgs(a);
  std::atomic<bool> stale{false};
  const int64_t item_channels = plan.blocks_per_group * isa.block;

  auto run_items = [&](int64_t item_begin, int64_t item_end) {
    ThreadScratch& s = t_scratch;
    GemmTileArgs t;
    t.input = a.input;
    t.geo = &g;
    t.a = static_cast<uint8_t*>(s.a.Get(
        static_cast<size_t>(plan.tile_rows * plan.lda + kIm2ColSlack)));
    t.lda = plan.lda;
    t.k = plan.k;
    t.k_groups = plan.groups;
    t.kc_groups = plan.kc;
    t.w = view;
    t.filter = a.filter;
    t.verify = verify;
    t.verify_stride = plan.m_tiles;
    t.panel_major = plan.panel_major;
    t.non_negative = a.input_non_negative;
    t.panel_buffer = nullptr;
    t.col_sums = nullptr;
    if (view == nullptr) {
      t.panel_buffer = static_cast<int8_t*>(s.panel.Get(
          static_cast<size_t>(plan.kc * item_channels * isa.lane_bytes)));
      t.col_sums = static_cast<int32_t*>(
          s.sums.Get(static_cast<size_t>(item_channels * 4)));
    }
    t.partial = nullptr;
    if (plan.panels > 1) {
      t.partial = static_cast<int32_t*>(s.partial.Get(
          static_cast<size_t>(plan.tile_rows * item_channels * 4)));
    }
    t.ep = &ep;
    t.output = a.output;
    t.out_c = g.out_c;
    t.padded = padded.data;
    t.padded_h = padded.h;
    t.padded_w = padded.w;
    t.image_rows = padded.image_rows;
    for (int64_t item = item_begin; item < item_end; ++item) {
      const int64_t tile = item / plan.n_groups;
      const int64_t ngroup = item % plan.n_groups;
      t.p0 = tile * plan.tile_rows;
      t.rows = std::min(plan.tile_rows, plan.pixels - t.p0);
      t.block_begin = ngroup * plan.blocks_per_group;
      t.block_end = std::min(plan.blocks, t.block_begin + plan.blocks_per_group);
      // Panel q of channel group ngroup is verified by tile
      // (q + ngroup) % m_tiles: exactly once per call, spread over tiles
      // (and so over threads).
      t.verify_phase =
          ((tile - ngroup) % plan.m_tiles + plan.m_tiles) % plan.m_tiles;
      if (isa.gemm_tile(t)) stale.store(true, std::memory_order_relaxed);
      if (lut != nullptr) {
        // The item's outputs, just written: rows p0 .. p0 + rows of its
        // channels (contiguous when it has all of them). One Zen 5 thread,
        // bench_core with and without BENCH_CORE_LUT=1 (a noisy VM): the
        // table costs 112x112x16 -> 96 +9-12 us (1.2 MB of output) and
        // 28x28x32 -> 192 +1-3 us this way; a pass over the whole output
        // after the kernel (with a masked store per vector) cost +17-39 us
        // and +2-6 us.
        const int64_t c0 = t.block_begin * isa.block;
        const int64_t c1 = std::min(g.out_c, t.block_end * isa.block);
        int8_t* out = a.output + t.p0 * g.out_c;
        if (c0 == 0 && c1 == g.out_c) {
          lut(a.output_lut, out, t.rows * g.out_c);
        } else {
          for (int64_t r = 0; r < t.rows; ++r) {
            lut(a.output_lut, out + r * g.out_c + c0, c1 - c0);
          }
        }
      }
    }
  };

  const int64_t items_per_unit = CeilDiv(plan.items, plan.units);
  const int64_t cost = plan.tile_rows * plan.groups * isa.lane_bytes * item_channels / 32 *
                       items_per_unit;
  parallel_for(plan.units, cost, [&](int64_t begin, int64_t end) {
    run_items(begin * items_per_unit,
              std::min(plan.items, end * items_per_unit));
  });
  return stale.load();
}

}  // namespace

// The weight sources and passes of RunGemmConv (after the GEMV and the
// padded input were decided): on the fly, or cached (checked by a memcmp or
// while computing, recomputed if stale). run_pass(plan, view, verify) runs
// one pass and returns whether the packed weights were found stale.
template <class RunPassFn>
void RunPasses(const FusedConvArgs& a, const IsaKernels& isa,
               const ConvGeometry& g, int mode, bool copy_check,
               size_t filter_bytes, int threads, const int8_t* cache_key,
               const PaddedInput& padded, const RunPassFn& run_pass) {
  // A pinned filter uses its cached packing unchecked, which beats packing
  // it again on the fly.
  auto packs_on_the_fly = [&](const Plan& p) {
    return p.on_the_fly && (mode == 2 || (!copy_check && a.filter_pin == nullptr));
  };
  // On the fly each panel is packed just before use (L1-sized panels,
  // kc_groups); cached weights may use larger panels (kc_groups_cached).
  Plan plan = MakePlan(g, isa, threads, isa.kc_groups, padded);
  if (packs_on_the_fly(plan)) {
    run_pass(plan, nullptr, false);
    return;
  }
  // Item packings over isa.panel_major_bytes: kc_groups panels, panel-major.
  const int64_t item_bytes =
      plan.blocks_per_group * isa.block * plan.groups * isa.lane_bytes;
  if (isa.panel_major_bytes > 0 && plan.panels > 1 &&
      item_bytes > isa.panel_major_bytes) {
    plan.panel_major = true;
  } else if (isa.kc_groups_cached > isa.kc_groups && plan.panels > 1) {
    // Balanced panels of at most kc_groups_cached groups, unless their
    // longer A rows cut the pixels into more M tiles of fewer than
    // kMinWideTileRows rows (each tile streams the item's weights again:
    // 7x7x512 3x3 -> 512 at batch 1 on 2 threads took 176 -> 195 us with
    // tiles of 36 and 13 rows instead of one; 14x14x256 3x3 -> 256 at
    // batch 8, 19 tiles of 84 rows instead of 4, ran 4% faster).
    const int64_t kc = RoundUp(
        CeilDiv(plan.groups, CeilDiv(plan.groups, isa.kc_groups_cached)),
        isa.group_multiple);
    const Plan wide = MakePlan(g, isa, threads, kc, padded);
    if (wide.m_tiles <= plan.m_tiles || wide.tile_rows >= kMinWideTileRows) {
      plan = wide;
    }
  }
  PackedWeightsCache& cache = PackedWeightsCache::Global();
  bool fresh = false;
  std::shared_ptr<const PackedWeights> w =
      cache.Get(a.filter, cache_key, g, isa, a.filter_pin, &fresh);
  if (w->view().filter_copy != nullptr) {
    // A small filter: one memcmp against the bytes it was packed from
    // (packed_weights.h); repacked first if it changed.
    if (!fresh &&
        std::memcmp(a.filter, w->view().filter_copy, filter_bytes) != 0) {
      w = cache.Replace(a.filter, cache_key, g, isa, a.filter_pin);
    }
    run_pass(plan, &w->view(), false);
    return;
  }
  if (run_pass(plan, &w->view(), !fresh)) {
    // The filter changed since it was packed: repack, recompute.
    w = cache.Replace(a.filter, cache_key, g, isa, a.filter_pin);
    run_pass(plan, &w->view(), false);
  }
}

bool PaddedInputFits(const ConvGeometry& g) {
  if (g.stride_h != 1 || g.stride_w != 1 || IsPointwise(g)) return false;
  const int64_t chunk = g.dilation_w == 1 ? g.filter_w * g.in_c : g.in_c;
  return chunk % 64 == 0;
}

void SetPaddedInputForTesting(int mode) { g_padded_mode.store(mode); }

void SetWeightModeForTesting(int mode) { g_weight_mode.store(mode); }
void SetInPlaceRowsForTesting(int mode) { g_in_place_rows_mode.store(mode); }
int InPlaceRowsModeForTesting() {
  return g_in_place_rows_mode.load(std::memory_order_relaxed);
}
int64_t GemvCallsForTesting() { return g_gemv_calls.load(); }
int64_t GemvPackedCallsForTesting() { return g_gemv_packed_calls.load(); }

void RunGemmConv(const FusedConvArgs& a, const IsaKernels& isa,
                 const ParallelFor& parallel_for, const int8_t* cache_key,
                 LutBody lut_body) {
  if (cache_key == nullptr) cache_key = a.filter;
  const ConvGeometry& g = a.geo;
  const LutBody lut = a.output_lut != nullptr ? lut_body : nullptr;
  // The paths below that do not go through RunPass: the table over the
  // whole output after them.
  auto lut_after = [&] {
    if (lut != nullptr) lut(a.output_lut, a.output, g.OutputElements());
  };
  if (g.ReductionDepth() == 0) {
    RunPortable(a, parallel_for);  // no products: bias-only epilogue
    lut_after();
    return;
  }
  const int mode = g_weight_mode.load(std::memory_order_relaxed);
  const size_t filter_bytes = static_cast<size_t>(g.ReductionDepth() * g.out_c);
  const bool copy_check =
      static_cast<int64_t>(filter_bytes) <= PackedWeights::kCopyCheckMaxBytes;
  const bool gemv_rows = g.batch * g.out_h * g.out_w <= kGemvMaxRows;
  if (isa.gemv_packed != nullptr && a.filter_pin != nullptr && mode == 0 &&
      !copy_check && gemv_rows) {
    // A pinned filter's packing, unchecked (a pinned call's Get returns
    // fresh entries only; any other is left to the GEMV below).
    bool fresh = false;
    const std::shared_ptr<const PackedWeights> w = PackedWeightsCache::Global().Get(
        a.filter, cache_key, g, *isa.gemv_packing, a.filter_pin, &fresh);
    if (fresh && !(isa.gemv_packed_no_int8_min && w->view().any_int8_min)) {
      RunGemv(a, isa, parallel_for, &w->view());
      lut_after();
      return;
    }
  }
  if (isa.gemv != nullptr && mode == 0 && !copy_check && gemv_rows &&
      !(isa.gemv_unpinned_only && a.filter_pin != nullptr)) {
    RunGemv(a, isa, parallel_for);
    lut_after();
    return;
  }
  const int threads =
      parallel_for.run ? std::max(1, parallel_for.num_threads) : 1;
  PaddedInput padded;
  if (UsePaddedInput(isa, g)) {
    padded = BuildPaddedInput(a.input, g, parallel_for);
  }
  // With a padded input the items' rows are virtual pixels: the table goes
  // over the whole output after them.
  const LutBody item_lut = padded.data != nullptr ? nullptr : lut;
  auto run_pass = [&](const Plan& plan, const PackedView* view, bool verify) {
    return RunPass(a, isa, plan, view, verify, parallel_for, item_lut, padded);
  };
  RunPasses(a, isa, g, mode, copy_check, filter_bytes, threads, cache_key,
            padded, run_pass);
  if (padded.data != nullptr) lut_after();
}

}  // namespace cpu
}  // namespace tf_fused_int8
