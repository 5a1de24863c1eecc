// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8WeightConstant's kernel and the registry of its values
// (weight_constant.h).
#include "cc/tf/weight_constant.h"

#include <mutex>
#include <unordered_map>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/framework/types.h"

namespace tf_fused_int8 {
namespace {

using ::tensorflow::Tensor;

// The live kernels' values, by data address (one live value per address:
// each kernel holds its own buffer, from MakeTensorFromProto).
struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, Tensor> values;
};

Registry& Values() {
  static Registry* r = new Registry;
  return *r;
}

const void* Address(const Tensor& t) { return t.tensor_data().data(); }

class WeightConstantOp : public tensorflow::OpKernel {
 public:
  explicit WeightConstantOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    const tensorflow::TensorProto* proto = nullptr;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("value", &proto));
    OP_REQUIRES_OK(ctx, ctx->device()->MakeTensorFromProto(
                            *proto, tensorflow::AllocatorAttributes(), &value_));
    OP_REQUIRES(ctx, value_.dtype() == ctx->output_type(0),
                absl::InvalidArgumentError(
                    "FusedInt8WeightConstant: value is " +
                    tensorflow::DataTypeString(value_.dtype()) + ", dtype is " +
                    tensorflow::DataTypeString(ctx->output_type(0))));
    if (value_.NumElements() > 0) {
      Registry& r = Values();
      std::lock_guard<std::mutex> lock(r.mu);
      r.values[Address(value_)] = value_;
    }
  }

  ~WeightConstantOp() override {
    Registry& r = Values();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.values.find(Address(value_));
    if (it != r.values.end() && it->second.SharesBufferWith(value_)) r.values.erase(it);
  }

  void Compute(tensorflow::OpKernelContext* ctx) override { ctx->set_output(0, value_); }
  bool IsExpensive() override { return false; }
  // As TF's ConstantOp: the executor then hands value_ itself to the
  // consumers (the same buffer, so IsWeightConstant holds and the caches
  // stay pinned) without running Compute, no OpKernelContext set up per node
  // and call. A frozen NASNetMobile has 418 of these nodes; its
  // InferenceRunner call (batch 1, two threads, Zen 4 VM, the two forms in
  // one process, 8 alternated rounds of 40 calls) took 0.99x the time
  // (median of the rounds' ratios, 0.86-1.02: about the VM's noise).
  const Tensor* const_tensor() const override { return &value_; }

 private:
  Tensor value_;
};

}  // namespace

bool IsWeightConstant(const Tensor& t) {
  if (!t.IsInitialized() || t.NumElements() == 0) return false;
  Registry& r = Values();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.values.find(Address(t));
  if (it == r.values.end()) return false;
  const Tensor& v = it->second;
  return v.SharesBufferWith(t) && v.dtype() == t.dtype() && v.TotalBytes() == t.TotalBytes();
}

REGISTER_KERNEL_BUILDER(Name("FusedInt8WeightConstant")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint("dtype", {tensorflow::DT_INT8,
                                                      tensorflow::DT_QINT8,
                                                      tensorflow::DT_FLOAT}),
                        WeightConstantOp);

}  // namespace tf_fused_int8
