"""tf-fused-int8: fused int8 conv2d + scale + side input + bias + activation.

Importing the package loads the op library (once), so that
``import tf_fused_int8`` before ``tf.saved_model.load`` is all a SavedModel
that uses the op needs. If the library cannot be loaded, the import still
succeeds and the clear error is raised on first use (or by ``load_ops()``).
"""

from tf_fused_int8._loader import load_ops
from tf_fused_int8.layers import QuantizedConvSequence
from tf_fused_int8.layers import QuantizedDense
from tf_fused_int8.layers import QuantizedFusedConv2D
from tf_fused_int8.ops import activation_lut
from tf_fused_int8.ops import depthwise_filter_to_oihw_vect_i
from tf_fused_int8.ops import fused_conv2d_bias_activation
from tf_fused_int8.ops import hwio_to_oihw_vect_i
from tf_fused_int8.ops import avg_pool2d_int8
from tf_fused_int8.ops import concat_int8
from tf_fused_int8.ops import depth_to_space_int8
from tf_fused_int8.ops import layer_norm_int8
from tf_fused_int8.ops import max_pool2d_int8
from tf_fused_int8.ops import nchw_vect_c_to_nhwc
from tf_fused_int8.ops import nhwc_to_nchw_vect_c
from tf_fused_int8.ops import oihw_vect_i_to_hwio
from tf_fused_int8.ops import quantize_to_int8
from tf_fused_int8 import quantization
from tf_fused_int8.quantization import Dequantize
from tf_fused_int8.quantization import Quantize
from tf_fused_int8.quantization import quantize_model
from tf_fused_int8.quantized_model import QuantizedModel
from tf_fused_int8.runner import InferenceRunner

__version__ = "0.1.0"

# tensorflow/addons' name for "load every op before tf.saved_model.load".
register_all = load_ops

try:
  load_ops()
except ImportError:
  pass  # raised again, with its message, on first use

__all__ = [
    "Dequantize",
    "InferenceRunner",
    "Quantize",
    "QuantizedConvSequence",
    "QuantizedDense",
    "QuantizedFusedConv2D",
    "QuantizedModel",
    "activation_lut",
    "depthwise_filter_to_oihw_vect_i",
    "fused_conv2d_bias_activation",
    "hwio_to_oihw_vect_i",
    "load_ops",
    "avg_pool2d_int8",
    "concat_int8",
    "depth_to_space_int8",
    "layer_norm_int8",
    "max_pool2d_int8",
    "nchw_vect_c_to_nhwc",
    "nhwc_to_nchw_vect_c",
    "oihw_vect_i_to_hwio",
    "quantization",
    "quantize_model",
    "quantize_to_int8",
    "register_all",
]
