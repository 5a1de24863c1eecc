// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel: validates every input in the kernel (conv_validation.h), then
// hands plain pointers to the TF-free compute core, with TF's intra-op thread
// pool as its parallel-for. NHWC/HWIO runs in place; NCHW_VECT_C/OIHW_VECT_I
// (a graph exported for the GPU) is converted to NHWC/HWIO in temporary
// buffers and back, so it gives the same bits as on the GPU.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"
#include "cc/core/layout.h"
#include "cc/tf/conv_validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tf_fused_int8 {
namespace {

// The core's ParallelFor over TF's intra-op pool, self-scheduling: the range
// is cut into units claimed one at a time from an atomic counter by the
// calling thread and by up to NumThreads() - 1 helper tasks; the caller
// returns as soon as every unit is done, whether or not the helpers ever
// started (a helper that starts late finds no unit left and only touches the
// shared, reference-counted state). So a pool thread that the OS cannot run
// right now (the other core busy) costs nothing: the caller does its share
// of the work instead of waiting for it, which the static split of the
// pool's own ParallelFor cannot do (measured on a 2-vCPU VM with the other
// vCPU loaded: MobileNetV2 at batch 1 ran slower on 2 threads than on 1).
// Calls whose whole cost is below kInlineCycles run inline: waking a helper
// (~5-10 us) would cost more than it saves.
struct SharedRange {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  int64_t total = 0, grain = 1;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  std::mutex mu;
  std::condition_variable cv;

  // Claims and runs units until none is left.
  void Work() {
    for (;;) {
      const int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
      if (b >= total) return;
      const int64_t e = std::min(total, b + grain);
      (*fn)(b, e);
      if (done.fetch_add(e - b, std::memory_order_acq_rel) + (e - b) == total) {
        std::lock_guard<std::mutex> lock(mu);
        cv.notify_all();
      }
    }
  }
};

constexpr int64_t kInlineCycles = 60000;

ParallelFor PoolParallelFor(tensorflow::thread::ThreadPool* pool) {
  ParallelFor pf;
  pf.num_threads = pool->NumThreads();
  pf.run = [pool](int64_t total, int64_t cost_per_unit,
                  const std::function<void(int64_t, int64_t)>& fn) {
    const int threads = pool->NumThreads();
    if (threads <= 1 || total <= 1 ||
        static_cast<double>(total) * cost_per_unit < kInlineCycles) {
      fn(0, total);
      return;
    }
    auto range = std::make_shared<SharedRange>();
    range->total = total;
    // Units as the caller cut them, or about 8 a thread when there are many.
    range->grain = std::max<int64_t>(1, total / (8 * int64_t{threads}));
    range->fn = &fn;
    const int64_t units = (total + range->grain - 1) / range->grain;
    const int helpers = static_cast<int>(std::min<int64_t>(threads - 1, units - 1));
    for (int i = 0; i < helpers; ++i) {
      pool->Schedule([range] { range->Work(); });
    }
    range->Work();
    if (range->done.load(std::memory_order_acquire) != total) {
      std::unique_lock<std::mutex> lock(range->mu);
      range->cv.wait(lock, [&] {
        return range->done.load(std::memory_order_acquire) == total;
      });
    }
    // From here on no unit runs: fn (the caller's) is never called again.
  };
  return pf;
}

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

const int8_t* Int8Data(const Tensor& t) {
  return reinterpret_cast<const int8_t*>(t.tensor_data().data());
}
int8_t* MutableInt8Data(Tensor* t) {
  return reinterpret_cast<int8_t*>(const_cast<char*>(t->tensor_data().data()));
}

class FusedInt8ConvCpuOp : public OpKernel {
 public:
  explicit FusedInt8ConvCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    ValidatedConv v;
    OP_REQUIRES_OK(ctx, ValidateConvInputs(ctx, attrs_, &v));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, v.output_shape, &output));
    if (v.output_shape.num_elements() == 0) return;
    const ConvGeometry& g = v.geo;

    FusedConvArgs args;
    args.geo = g;
    args.bias = ctx->input(2).flat<float>().data();
    args.conv_input_scale = ctx->input(4).flat<float>().data();
    args.per_channel_scale = v.per_channel_scale;
    args.side_input_scale = v.side_input_scale;
    args.activation = attrs_.activation;
    args.output_min = attrs_.output_min;
    args.output_max = attrs_.output_max;

    Tensor input_nhwc, filter_hwio, side_nhwc, output_nhwc;
    if (!attrs_.vect) {
      args.input = Int8Data(ctx->input(0));
      args.filter = Int8Data(ctx->input(1));
      args.side_input = v.has_side_input ? Int8Data(ctx->input(3)) : nullptr;
      args.output = MutableInt8Data(output);
    } else {
      auto temp = [ctx](TensorShape shape, Tensor* t) {
        return ctx->allocate_temp(tensorflow::DT_INT8, shape, t);
      };
      OP_REQUIRES_OK(ctx, temp(TensorShape({g.batch, g.in_h, g.in_w, g.in_c}), &input_nhwc));
      // The filter's input depth is the group's (in_c / groups, a multiple
      // of 4 here because both depths are).
      const int64_t filter_in_c = g.GroupInC();
      OP_REQUIRES_OK(ctx, temp(TensorShape({g.filter_h, g.filter_w, filter_in_c, g.out_c}),
                               &filter_hwio));
      OP_REQUIRES_OK(ctx, temp(TensorShape({g.batch, g.out_h, g.out_w, g.out_c}),
                               &output_nhwc));
      NchwVectCToNhwc(Int8Data(ctx->input(0)), g.batch, g.in_c, g.in_h, g.in_w, 4,
                      g.in_c, MutableInt8Data(&input_nhwc));
      OihwVectIToHwio(Int8Data(ctx->input(1)), g.out_c, filter_in_c, g.filter_h,
                      g.filter_w, 4, filter_in_c, MutableInt8Data(&filter_hwio));
      args.input = Int8Data(input_nhwc);
      args.filter = Int8Data(filter_hwio);
      if (v.has_side_input) {
        OP_REQUIRES_OK(ctx, temp(TensorShape({g.batch, g.out_h, g.out_w, g.out_c}),
                                 &side_nhwc));
        NchwVectCToNhwc(Int8Data(ctx->input(3)), g.batch, g.out_c, g.out_h, g.out_w, 4,
                        g.out_c, MutableInt8Data(&side_nhwc));
        args.side_input = Int8Data(side_nhwc);
      }
      args.output = MutableInt8Data(&output_nhwc);
    }

    const ParallelFor parallel_for =
        PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers);
    const std::string err = RunFusedConv(args, KernelPath::kAuto, parallel_for);
    OP_REQUIRES(ctx, err.empty(), absl::InvalidArgumentError(err));

    if (attrs_.vect) {
      NhwcToNchwVectC(Int8Data(output_nhwc), g.batch, g.out_h, g.out_w, g.out_c, 4,
                      MutableInt8Data(output));
    }
  }

 private:
  ConvAttrs attrs_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint<int8_t>("T"),
                        FusedInt8ConvCpuOp);
REGISTER_KERNEL_BUILDER(Name("FusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint<tensorflow::qint8>("T"),
                        FusedInt8ConvCpuOp);

}  // namespace tf_fused_int8
