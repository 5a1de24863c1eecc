"""Benchmark: our fused int8 conv beside what users would pick instead.

    python -m tf_fused_int8.benchmark                         # ResNet-50 layers
    python -m tf_fused_int8.benchmark --peers=all --peak      # + every peer
    python -m tf_fused_int8.benchmark --suite=models --peers=all
    python -m tf_fused_int8.benchmark --suite=mobilenet_v2_dw # depthwise 3x3
    python -m tf_fused_int8.benchmark --paths=avx2,avx512vnni --layers=0,3

What runs (each row: one layer or model, one batch size, one thread count):
  ours          this package's op inside a tf.function (--graph_ops ops per
                call, and again twice as many: the difference per op, what
                one more op costs in a model), on the kernel path
                auto-selected for this CPU, and each --paths path forced with
                TF_FUSED_INT8_CPU_KERNEL (in the models suite: one row per
                path, the same fused model forced during each call);
  ours concrete (models suite) the same tf.function's concrete function
                for the input's signature, called directly, as a SavedModel's
                serving signature is called (auto path only);
  ours runner   (models suite) the same fused model through
                tf_fused_int8.InferenceRunner: frozen, run in the calling
                thread, numpy in and out (also with each --paths path
                forced);
  ours eager    one eager call (TF's per-call dispatch included);
  tf_int8       TensorFlow's built-in int8 _FusedConv2D CPU kernel (eager);
  tf_fp32       tf.nn.conv2d + bias_add + relu in float32 (graph, like ours);
  litert        TF's full-integer TFLite conversion run by tf.lite.Interpreter
                (XNNPACK), in the project's venv;
  onnxruntime_u8 / onnxruntime_s8   ONNX Runtime com.microsoft QLinearConv,
                NHWC, uint8 / int8 activations, per-channel int8 weights;
  torch_x86 / torch_onednn          PyTorch quantized Conv2d, channels_last,
                quint8 activations, per-channel qint8 weights;
  openvino_fp32 / openvino_int8     (models suite) OpenVINO on the float
                SavedModel, and its NNCF int8 quantization.
The peers but litert run in the venv tools/setup_bench_peers.sh makes
(.venv-peers); a peer that is not installed is skipped with one line saying
so, and one that fails is reported with its error while the rest run.

Every implementation runs in its own worker process (workers/worker.py) with
the same thread count (TF intra-op threads, ONNX Runtime intra_op_num_threads,
torch.set_num_threads, TFLite num_threads, OpenVINO INFERENCE_NUM_THREADS,
and OMP/MKL variables), on the same int8 data (tf_fused_int8.testing's
inputs). The workers stay alive, so that the timed repeats of all of them are
interleaved: load from other processes on a shared machine hits all alike.
Each time is the best of --repeats repeats of at least --min_time seconds.

The exactness column (workers/exactness.py) is decided in the same run on
this CPU: every int8 implementation computes two probes of each layer, one
with activations at their maximum and weights -128 (which breaks the
saturating u8 x s8 VPMADDUBSW sums some peers use) and one random, compared
with the exact integer result at an output scale that makes one accumulator
error visible as output levels.

--peak measures this CPU's instruction limits with register-only loops in the
C++ core (cc/core/cpu/peak/), on 1 and N threads, and every ours row then
shows its % of the limit of the path that ran. --json writes every row (keys
suite, layer, batch, threads, impl, ms, gops, exact, cpu_kernel, peak_pct,
...); --plot draws ours / best peer per row.

Report ratios, not times, and name the CPU: the machines are shared and noisy.
"""

from tf_fused_int8.benchmark.cases import layer_cases
from tf_fused_int8.benchmark.cases import layer_name
from tf_fused_int8.benchmark.cases import same_pads

__all__ = ["layer_cases", "layer_name", "same_pads"]
