// Copyright tf-fused-int8 authors. Apache 2.0.
//
// A small status type for the TF-free GPU backend. The TensorFlow binding maps
// each code onto the absl::Status code of the same name; nothing here aborts.
#ifndef TF_FUSED_INT8_CC_CORE_GPU_STATUS_H_
#define TF_FUSED_INT8_CC_CORE_GPU_STATUS_H_

#include <string>
#include <utility>

namespace tf_fused_int8 {
namespace gpu {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad shapes / attributes (the caller's fault)
  kUnimplemented,      // valid, but not supported here (layout, old GPU)
  kResourceExhausted,  // scratch / workspace allocation failed
  kUnavailable,        // no driver / cuDNN library / GPU
  kNotFound,           // no cuDNN engine or algorithm runs this convolution
  kInternal,           // a CUDA or cuDNN call failed
};

const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<CODE>: <message>", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status Unimplemented(std::string m) {
  return Status(StatusCode::kUnimplemented, std::move(m));
}
inline Status ResourceExhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status Unavailable(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status NotFound(std::string m) {
  return Status(StatusCode::kNotFound, std::move(m));
}
inline Status Internal(std::string m) {
  return Status(StatusCode::kInternal, std::move(m));
}

#define TFI_GPU_RETURN_IF_ERROR(expr)             \
  do {                                            \
    ::tf_fused_int8::gpu::Status _tfi_s = (expr); \
    if (!_tfi_s.ok()) return _tfi_s;              \
  } while (0)

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_STATUS_H_
