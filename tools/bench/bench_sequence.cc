// Copyright tf-fused-int8 authors. Apache 2.0.
//
// TF-free timing of a chain of convolutions through the compute core, each
// step reading the previous step's output, as the sequence op
// (cc/tf/conv_sequence_kernel.cc) runs a fused model's layers. For split
// and cache experiments that one layer repeated (bench_core) cannot show:
// on two threads a layer reads rows the other core wrote one step before.
// Not a benchmark of record: the peers comparison is
// python -m tf_fused_int8.benchmark --suite=models.
//
//   bazel build //:bench_sequence
//   bazel-bin/bench_sequence STEPS [path] [seconds]
//
// STEPS is a text file with one step per line, as the step profiler
// (python -m tf_fused_int8.benchmark.step_times) prints them:
//   ... 1x112x112x16 1x1x16x96 [s2] [g96] [+side]
// (input NHWC, filter HWIO with its per-group input depth, stride, groups,
// a side input of the output's shape); lines without a shape pair are
// skipped. Padding is SAME, or VALID where the filter covers the input.
// Step i reads the latest output of its input shape (step i - 1's in a
// chain), its side input the latest earlier output of its output shape
// that is not its own input (a residual block's input). Relu, per-channel
// scales, pinned random weights.
//
// BENCH_SEQ_THREADS=2: the core's ParallelFor on a spinning helper
// (tools/bench/spin_pool.h). BENCH_SEQ_REPEAT=R: each step runs R times in
// a row and only the last is timed (its inputs and output then sit where
// the same step left them, as in bench_core). BENCH_SEQ_RECYCLE=1: a
// step's output takes the smallest free buffer that holds it, and buffers
// are freed after their last reader, as TF's allocator hands tensors on
// (default: every step its own buffer).
//
// BENCH_SEQ_CHECK=1: after timing, every step's output is compared with the
// reference kernel's chain (exit 1 if any byte differs).
//
// Prints each step's microseconds per call (means), their sum, and the
// median of the whole chain per call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"
#include "tools/bench/held_pin.h"
#include "tools/bench/spin_pool.h"

namespace {

using tf_fused_int8::ConvGeometry;

struct Step {
  std::string text;
  ConvGeometry g;
  bool side = false;
  int input_from = -1;  // step whose output is the input; -1: the chain's input
  int side_from = -1;
};

bool ParseShape(const std::string& s, int64_t v[4]) {
  int64_t a, b, c, d;
  char x1, x2, x3;
  std::istringstream in(s);
  if (!(in >> a >> x1 >> b >> x2 >> c >> x3 >> d) || x1 != 'x' || x2 != 'x' ||
      x3 != 'x' || in.peek() != EOF) {
    return false;
  }
  v[0] = a, v[1] = b, v[2] = c, v[3] = d;
  return true;
}

// The step in a profiler line: the first token pair that parses as an
// input shape and a filter shape, then its flags.
bool ParseStep(const std::string& line, Step* step) {
  std::istringstream in(line);
  std::vector<std::string> tok;
  for (std::string t; in >> t;) tok.push_back(t);
  for (size_t i = 0; i + 1 < tok.size(); ++i) {
    int64_t x[4], f[4];
    if (!ParseShape(tok[i], x) || !ParseShape(tok[i + 1], f)) continue;
    ConvGeometry& g = step->g;
    g.batch = x[0], g.in_h = x[1], g.in_w = x[2], g.in_c = x[3];
    g.filter_h = f[0], g.filter_w = f[1], g.out_c = f[3];
    g.groups = 1;
    for (size_t j = i + 2; j < tok.size(); ++j) {
      if (tok[j][0] == 's') g.stride_h = g.stride_w = std::atol(tok[j].c_str() + 1);
      if (tok[j][0] == 'g') g.groups = std::atol(tok[j].c_str() + 1);
      if (tok[j] == "+side") step->side = true;
    }
    if (g.groups <= 0 || f[2] * g.groups != g.in_c) return false;
    const bool valid = g.filter_h == g.in_h && g.filter_w == g.in_w;
    if (!tf_fused_int8::ComputeGeometry(valid ? tf_fused_int8::Padding::kValid
                                              : tf_fused_int8::Padding::kSame,
                                        &g)
             .empty()) {
      return false;
    }
    step->text = tok[i] + " " + tok[i + 1];
    for (size_t j = i + 2; j < tok.size(); ++j) step->text += " " + tok[j];
    return true;
  }
  return false;
}

bool SameShape(const ConvGeometry& out, const ConvGeometry& in) {
  return out.batch == in.batch && out.out_h == in.in_h && out.out_w == in.in_w &&
         out.out_c == in.in_c;
}

bool OutputShapesEqual(const ConvGeometry& a, const ConvGeometry& b) {
  return a.batch == b.batch && a.out_h == b.out_h && a.out_w == b.out_w &&
         a.out_c == b.out_c;
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

// Buffers handed on as TF's allocator does (BENCH_SEQ_RECYCLE=1): the
// smallest free one that holds the request.
class Buffers {
 public:
  explicit Buffers(bool recycle) : recycle_(recycle) {}
  int8_t* Get(size_t bytes, int owner) {
    if (recycle_) {
      int best = -1;
      for (size_t i = 0; i < store_.size(); ++i) {
        if (free_[i] && store_[i].size() >= bytes &&
            (best < 0 || store_[i].size() < store_[best].size())) {
          best = static_cast<int>(i);
        }
      }
      if (best >= 0) {
        free_[best] = false;
        return store_[best].data();
      }
    } else if (owner < static_cast<int>(owned_.size()) && owned_[owner] >= 0) {
      return store_[owned_[owner]].data();
    }
    store_.emplace_back(bytes, 0);
    free_.push_back(false);
    if (!recycle_) {
      if (owner >= static_cast<int>(owned_.size())) owned_.resize(owner + 1, -1);
      owned_[owner] = static_cast<int>(store_.size()) - 1;
    }
    return store_.back().data();
  }
  void Release(const int8_t* p) {
    if (!recycle_) return;
    for (size_t i = 0; i < store_.size(); ++i) {
      if (store_[i].data() == p) free_[i] = true;
    }
  }

 private:
  bool recycle_;
  std::vector<std::vector<int8_t>> store_;
  std::vector<bool> free_;
  std::vector<int> owned_;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace tf_fused_int8;  // NOLINT
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s STEPS [path] [seconds]\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1]);
  if (!file) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  std::vector<Step> steps;
  for (std::string line; std::getline(file, line);) {
    Step s;
    if (ParseStep(line, &s)) steps.push_back(s);
  }
  if (steps.empty()) {
    std::fprintf(stderr, "no steps in %s\n", argv[1]);
    return 2;
  }
  KernelPath path = KernelPath::kAuto;
  if (argc > 2 && !ParseKernelPath(argv[2], &path)) {
    std::fprintf(stderr, "unknown path %s\n", argv[2]);
    return 2;
  }
  const double seconds = argc > 3 ? std::atof(argv[3]) : 2.0;
  const int repeat = std::max(1, EnvInt("BENCH_SEQ_REPEAT", 1));
  const bool recycle = EnvInt("BENCH_SEQ_RECYCLE", 0) == 1;
  const int n = static_cast<int>(steps.size());
  for (int i = 0; i < n; ++i) {
    for (int j = i - 1; j >= 0 && steps[i].input_from < 0; --j) {
      if (SameShape(steps[j].g, steps[i].g)) steps[i].input_from = j;
    }
    for (int j = i - 1; j >= 0 && steps[i].side && steps[i].side_from < 0; --j) {
      if (j != steps[i].input_from && OutputShapesEqual(steps[j].g, steps[i].g)) {
        steps[i].side_from = j;
      }
    }
  }
  // The last reader of each step's output (as input or side input).
  std::vector<int> last_reader(n, -1);
  for (int i = 0; i < n; ++i) {
    if (steps[i].input_from >= 0) last_reader[steps[i].input_from] = i;
    if (steps[i].side_from >= 0) {
      last_reader[steps[i].side_from] = std::max(last_reader[steps[i].side_from], i);
    }
  }

  std::mt19937 rng(1);
  std::uniform_int_distribution<int> u8(-128, 127);
  std::vector<std::vector<int8_t>> inputs(n), filters(n), sides(n);
  std::vector<std::vector<float>> biases(n), scales(n);
  for (int i = 0; i < n; ++i) {
    const ConvGeometry& g = steps[i].g;
    if (steps[i].input_from < 0) inputs[i].resize(g.InputElements());
    filters[i].resize(g.FilterElements());
    if (steps[i].side && steps[i].side_from < 0) sides[i].resize(g.OutputElements());
    for (auto* v : {&inputs[i], &filters[i], &sides[i]}) {
      for (auto& b : *v) b = static_cast<int8_t>(u8(rng));
    }
    biases[i].assign(g.out_c, 1.0f);
    scales[i].assign(g.out_c, 40.0f / (std::sqrt(float(g.ReductionDepth())) * 74 * 74));
  }
  const std::shared_ptr<const WeightPin> pin = bench::MakeHeldPin();

  ParallelFor pf;
  std::unique_ptr<bench::SpinPool> pool;
  if (EnvInt("BENCH_SEQ_THREADS", 1) == 2) {
    pool.reset(new bench::SpinPool());
    pf.num_threads = 2;
    bench::SpinPool* p = pool.get();
    // Calls below cc/tf/pool_parallel_for.cc's kHotInlineCycles run inline
    // there too (its helper is alive while a model runs).
    pf.run = [p](int64_t total, int64_t cost,
                 const std::function<void(int64_t, int64_t)>& fn) {
      if (total * cost < 15000) {
        fn(0, total);
      } else {
        p->Run(total, fn);
      }
    };
  }

  Buffers buffers(recycle);
  std::vector<int8_t*> outs(n, nullptr);
  std::vector<double> step_ns(n, 0.0);
  // keep: each step's output copied right after the step (later steps may
  // reuse its buffer).
  auto run_chain = [&](bool timed, KernelPath run_path, const ParallelFor& run_pf,
                       Buffers& bufs,
                       std::vector<std::vector<int8_t>>* keep = nullptr) -> std::string {
    for (int i = 0; i < n; ++i) {
      const Step& s = steps[i];
      FusedConvArgs a;
      a.geo = s.g;
      a.input = s.input_from >= 0 ? outs[s.input_from] : inputs[i].data();
      a.filter = filters[i].data();
      a.bias = biases[i].data();
      a.conv_input_scale = scales[i].data();
      a.per_channel_scale = true;
      a.activation = Activation::kRelu;
      a.filter_pin = pin;
      a.epilogue_pin = pin;
      if (s.side) {
        a.side_input = s.side_from >= 0 ? outs[s.side_from] : sides[i].data();
        a.side_input_scale = 0.5f;
      }
      outs[i] = bufs.Get(s.g.OutputElements(), i);
      a.output = outs[i];
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::string err = RunFusedConv(a, run_path, run_pf);
        if (!err.empty()) return "step " + std::to_string(i) + ": " + err;
        if (timed && r == repeat - 1) {
          step_ns[i] += std::chrono::duration<double, std::nano>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
        }
      }
      if (keep != nullptr) (*keep)[i].assign(outs[i], outs[i] + s.g.OutputElements());
      for (int j = 0; j <= i; ++j) {
        if (last_reader[j] == i) bufs.Release(outs[j]);
      }
    }
    for (int j = 0; j < n; ++j) {
      if (last_reader[j] < 0) bufs.Release(outs[j]);
    }
    return "";
  };
  for (int w = 0; w < 20; ++w) {
    const std::string err = run_chain(false, path, pf, buffers);
    if (!err.empty()) {
      std::fprintf(stderr, "%s\n", err.c_str());
      return 1;
    }
  }
  std::vector<double> calls;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    const auto t0 = std::chrono::steady_clock::now();
    run_chain(true, path, pf, buffers);
    const auto t1 = std::chrono::steady_clock::now();
    calls.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    elapsed = std::chrono::duration<double>(t1 - start).count();
  } while (elapsed < seconds);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double us = step_ns[i] / calls.size() / 1e3;
    sum += us;
    std::printf("%3d %8.2f  %s\n", i, us, steps[i].text.c_str());
  }
  std::sort(calls.begin(), calls.end());
  std::printf("steps: %d, their sum %.1f us per call; chain median %.1f us (%zu calls)\n", n,
              sum, calls[calls.size() / 2], calls.size());
  // BENCH_SEQ_CHECK=1: the chain once more, every step's output against
  // the reference kernel's chain (a unit the parallel-for skipped or ran
  // twice, or a step that read the wrong buffer, shows here).
  if (EnvInt("BENCH_SEQ_CHECK", 0) == 1) {
    std::vector<std::vector<int8_t>> got(n), want(n);
    Buffers mine(recycle), theirs(false);
    std::string err = run_chain(false, path, pf, mine, &got);
    if (err.empty()) {
      err = run_chain(false, KernelPath::kReference, ParallelFor(), theirs, &want);
    }
    if (!err.empty()) {
      std::fprintf(stderr, "check: %s\n", err.c_str());
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      int64_t bad = 0;
      for (size_t j = 0; j < got[i].size(); ++j) bad += got[i][j] != want[i][j];
      if (bad != 0) {
        std::printf("check: step %d: %lld of %zu outputs differ from the reference kernel\n", i,
                    static_cast<long long>(bad), got[i].size());
        return 1;
      }
    }
    std::printf("check: every step equal to the reference kernel\n");
  }
  return 0;
}
