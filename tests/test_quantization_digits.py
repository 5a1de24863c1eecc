"""Post-training quantization on real data (scikit-learn's digits) of the
two mobile families whose activations are int8 lookup tables: a small
EfficientNet-style model (SiLU, squeeze-excite with a sigmoid gate, Dropout
before the residual Add) and a MobileNetV3-style one (hard-swish,
squeeze-excite with a hard-sigmoid gate), built as keras.applications
builds those blocks (examples/ptq_digits.py), trained briefly and
quantized with quantize_model: each is one int8 region, its activations
tables and its gates Int8ChannelMultiply, and its int8 top-1 accuracy on
the held-out images is within one point of the float model's (issue #14).
"""

import warnings

import keras
import numpy as np
import pytest

import layer_helpers
import tf_fused_int8
from tf_fused_int8 import quantization

QFC = tf_fused_int8.QuantizedFusedConv2D


@pytest.fixture(scope="module")
def example():
  import sklearn  # pylint: disable=g-import-not-at-top,unused-import  # requirements.txt
  return layer_helpers.load_example("ptq_digits")


# The layers each model's lookup tables replace (an Activation after a conv
# stack, or a conv's own activation= split off by quantize_model).
TABLES = {
    "efficientnet": ["stem", "block1_expand", "block1_dw", "block1_se_reduce",
                     "block1_se_expand", "block2_expand", "block2_dw",
                     "block2_se_reduce", "block2_se_expand", "top"],
    "mobilenetv3": ["stem", "block1_expand", "block1_dw", "block1_se_conv_1",
                    "block2_expand", "block2_dw", "block2_se_conv_1", "top"],
}


@pytest.mark.parametrize("style", ["efficientnet", "mobilenetv3"])
def test_mobile_family_on_digits_within_one_point_of_float(example, style):
  x_train, y_train, x_test, y_test = example.load_digits_split()
  float_model = example.train_float_model(keras, x_train, y_train, epochs=6,
                                          model=style)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", quantization.QuantizationWarning)
    int8_model = quantization.quantize_model(float_model, x_train[:256],
                                             verbose=0)
  messages = [str(w.message) for w in caught
              if issubclass(w.category, quantization.QuantizationWarning)]
  # Nothing stays float: EfficientNet's squeeze-excite convs' own silu /
  # sigmoid are tables, and so is MobileNetV3's hard sigmoid gate
  # (`ReLU(6)(x + 3) * (1 / 6)` after its conv: the table of Keras's
  # hard_sigmoid).
  assert not messages, messages
  kinds = [type(l).__name__ for l in int8_model.layers]
  # One int8 region from the image to the logits; every activation of the
  # main path is a table (no Activation layer left), each gate Multiply an
  # Int8ChannelMultiply.
  assert kinds.count("Quantize") == 1, kinds
  assert "Activation" not in kinds and "Conv2D" not in kinds, kinds
  assert kinds.count("Int8ChannelMultiply") == 2, kinds
  tables = [l.name for l in int8_model.layers
            if isinstance(l, QFC) and l.output_lut is not None]
  assert sorted(tables) == sorted(TABLES[style]), tables
  assert isinstance(int8_model.get_layer("logits"), tf_fused_int8.QuantizedDense)
  r = example.compare(float_model, int8_model, x_test, y_test)
  assert r["float"] > 0.9, r  # the float model did learn
  assert r["int8"] >= r["float"] - 0.01, r
  assert r["agreement"] >= 0.97, r
