// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The core's ParallelFor (cc/core/conv_params.h) over TensorFlow's intra-op
// thread pool, built for the short calls of a model at batch 1.
#ifndef TF_FUSED_INT8_CC_TF_POOL_PARALLEL_FOR_H_
#define TF_FUSED_INT8_CC_TF_POOL_PARALLEL_FOR_H_

#include "cc/core/conv_params.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tf_fused_int8 {

ParallelFor PoolParallelFor(tensorflow::thread::ThreadPool* pool);

// Starts the pool's helpers spinning now (they spin kSpinMicros waiting for
// a range), so that a parallel call soon after finds them awake instead of
// waking them then.
void WakeHelpers(tensorflow::thread::ThreadPool* pool);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_TF_POOL_PARALLEL_FOR_H_
