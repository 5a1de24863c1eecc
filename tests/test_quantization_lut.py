"""Element-wise activations after a convolution (SiLU / swish, hard-swish,
sigmoid, GELU, ...) run in int8 as the op's output lookup table: the
convolution's epilogue quantizes the activation's input at its calibrated
scale, and the table (tf_fused_int8.activation_lut) maps each int8 value to
the activation's output at its own calibrated scale.

Checked: every such Activation layer is absorbed (one int8 region for an
EfficientNet-style block), each table is activation_lut of the two
calibrated scales, every int8 layer bit for bit against tests/reference.py
on its actual inputs, the float model's outputs within quantization error,
and .keras / SavedModel round trips.
"""


import keras
import numpy as np
import pytest

import layer_helpers
import tf_fused_int8
from tf_fused_int8 import quantization
import test_quantization
from test_quantization_depthwise import check_layers_against_reference
from test_quantization_depthwise import randomize

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

L = keras.layers
QFC = tf_fused_int8.QuantizedFusedConv2D

ACTIVATIONS = {"stem_act": "swish", "expand_act": "hard_swish",
               "dw_act": "gelu", "project_act": "sigmoid", "post_act": "silu"}


def images(n, seed=1):
  return test_quantization.images(n, seed, (12, 11, 3))


def activation_model(seed=0):
  """image -> stem conv + BN + swish -> [expand 1x1 + BN + hard_swish ->
  depthwise 3x3 + BN + gelu -> project 1x1 + BN -> Add(stem)] -> 1x1 conv
  + sigmoid (its own Activation layer) -> 1x1 conv + BN + silu -> GAP ->
  Dense."""
  inp = keras.Input((12, 11, 3), name="image")
  x = L.Conv2D(16, 3, padding="same", use_bias=False, name="stem")(inp)
  x = L.Activation("swish", name="stem_act")(L.BatchNormalization(name="stem_bn")(x))
  h = L.Conv2D(32, 1, use_bias=False, name="expand")(x)
  h = L.Activation("hard_swish", name="expand_act")(
      L.BatchNormalization(name="expand_bn")(h))
  h = L.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw")(h)
  h = L.Activation("gelu", name="dw_act")(L.BatchNormalization(name="dw_bn")(h))
  h = L.BatchNormalization(name="project_bn")(
      L.Conv2D(16, 1, use_bias=False, name="project")(h))
  x = L.Add(name="add")([x, h])
  x = L.Activation("sigmoid", name="project_act")(L.Conv2D(24, 1, name="mix")(x))
  x = L.Conv2D(24, 1, use_bias=False, name="top")(x)
  x = L.Activation("silu", name="post_act")(L.BatchNormalization(name="top_bn")(x))
  logits = L.Dense(5, name="head")(L.GlobalAveragePooling2D(name="gap")(x))
  model = keras.Model(inp, {"features": x, "logits": logits})
  randomize(model, np.random.default_rng(seed), weight_std=0.3)
  return model


@pytest.fixture(scope="module")
def quantized():
  model = activation_model()
  calibration = images(24)
  qmodel = layer_helpers.quantize_strict(model, calibration, verbose=0)
  scales = quantization.calibrate(model, calibration, verbose=0)
  return model, qmodel, scales


def test_every_activation_is_a_table_in_one_region(quantized):
  _, qmodel, _ = quantized
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert "Activation" not in kinds and "BatchNormalization" not in kinds, kinds
  assert kinds.count("Quantize") == 1, kinds
  tables = {l.name: l for l in qmodel.layers
            if isinstance(l, QFC) and l.output_lut is not None}
  assert set(tables) == {"stem", "expand", "dw", "mix", "top"}, tables


def test_tables_are_the_activation_between_calibrated_scales(quantized):
  """Each table is activation_lut(f, s_in, s_out): s_in the calibrated scale
  of the activation's input (the BN / conv output), s_out of its output."""
  _, qmodel, scales = quantized
  pre = {"stem_act": "stem_bn", "expand_act": "expand_bn", "dw_act": "dw_bn",
         "project_act": "mix", "post_act": "top_bn"}
  layer_of = {"stem_act": "stem", "expand_act": "expand", "dw_act": "dw",
              "project_act": "mix", "post_act": "top"}
  for act, name in ACTIVATIONS.items():
    layer = qmodel.get_layer(layer_of[act])
    want = tf_fused_int8.activation_lut(name, scales[pre[act]], scales[act])
    np.testing.assert_array_equal(np.asarray(layer.output_lut, np.int8), want,
                                  err_msg=act)
    # The epilogue quantizes at the activation's input scale.
    assert layer.output_scale is None or np.isclose(layer.output_scale,
                                                    scales[pre[act]])
    # A table that maps most values somewhere different (not the identity).
    assert np.sum(want != np.arange(-128, 128)) > 64, act


def test_every_int8_layer_matches_the_reference(quantized):
  _, qmodel, _ = quantized
  assert check_layers_against_reference(qmodel, images(3, seed=9)) >= 7


def test_float_outputs_within_quantization_error(quantized):
  model, qmodel, _ = quantized
  layer_helpers.assert_outputs_close(model, qmodel, images(8, seed=5))


def test_round_trips(quantized, tmp_path):
  _, qmodel, _ = quantized
  layer_helpers.assert_keras_and_saved_model_round_trip(
      qmodel, images(2, seed=4), tmp_path)


def test_activation_before_a_residual_add_stays_apart():
  """A table is applied after the side input: a conv + BN + swish whose
  output feeds an Add keeps the Add separate (the swish is inside the
  stack, the Add is its own int8 layer), and a conv + BN whose Add comes
  before the swish takes the side input and then the table."""
  inp = keras.Input((8, 8, 8), name="image")
  a = L.Activation("swish", name="a_act")(L.BatchNormalization(name="a_bn")(
      L.Conv2D(8, 3, padding="same", name="a")(inp)))
  b = L.BatchNormalization(name="b_bn")(L.Conv2D(8, 1, name="b")(a))
  s = L.Activation("swish", name="s_act")(L.Add(name="add")([a, b]))
  model = keras.Model(inp, s)
  randomize(model, np.random.default_rng(3))
  x = test_quantization.images(16, 2, (8, 8, 8))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  b_layer = qmodel.get_layer("b")
  assert b_layer.use_side_input and b_layer.output_lut is not None
  assert qmodel.get_layer("a").output_lut is not None
  check_layers_against_reference(qmodel, x[:2])


def test_leaky_relu_elu_and_transposed_tanh_are_tables(tmp_path):
  """A GAN generator's activations: LeakyReLU layers (Keras's layer default
  slope 0.3, and 0.2), an ELU layer (alpha 0.5), a ReLU with a negative
  slope (a leaky ReLU) and a Conv2DTranspose's own tanh run as output
  tables of the convolutions before them: one int8 region with no warning,
  each table activation_lut of the function (written out here) between the
  calibrated scales, every int8 layer bit for bit against the reference,
  close to float, the same bits fused into sequences and after a .keras
  round trip."""
  inp = keras.Input((6, 5, 4), name="image")
  x = L.LeakyReLU(name="lr")(L.BatchNormalization(name="bn1")(
      L.Conv2D(16, 3, padding="same", name="c1")(inp)))
  x = L.LeakyReLU(0.2, name="lr2")(
      L.Conv2DTranspose(12, 3, strides=2, padding="same", name="t1")(x))
  x = L.ELU(0.5, name="elu")(L.Conv2D(12, 3, padding="same", name="c2")(x))
  x = L.ReLU(negative_slope=0.1, name="leaky")(L.Conv2D(8, 1, name="c3")(x))
  out = L.Conv2DTranspose(3, 5, strides=2, padding="same", activation="tanh",
                          name="t2")(x)
  model = keras.Model(inp, out)
  randomize(model, np.random.default_rng(8), weight_std=0.3)
  x = test_quantization.images(24, 3, (6, 5, 4))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  scales = quantization.calibrate(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 1, kinds
  for kind in ("LeakyReLU", "ELU", "ReLU", "Activation", "BatchNormalization"):
    assert kind not in kinds, kinds
  leaky = lambda a: lambda v: np.where(v >= 0, v, a * v)  # pylint: disable=unnecessary-lambda-assignment
  tables = {  # layer: (function, its input's key, its output's key)
      "c1": (leaky(0.3), "bn1", "lr"), "t1": (leaky(0.2), "t1", "lr2"),
      "c2": (lambda v: np.where(v > 0, v, 0.5 * np.expm1(np.minimum(v, 0))),
             "c2", "elu"),
      "c3": (leaky(0.1), "c3", "leaky"), "t2": (np.tanh, "t2", "t2_activation")}
  for name, (fn, pre, post) in tables.items():
    want = tf_fused_int8.activation_lut(fn, scales[pre], scales[post])
    np.testing.assert_array_equal(
        np.asarray(qmodel.get_layer(name).output_lut, np.int8), want, err_msg=name)
    assert np.sum(want != np.arange(-128, 128)) > 32, name
  assert check_layers_against_reference(qmodel, x[:3]) == 5
  got, want_float = qmodel(x).numpy(), model(x).numpy()
  for g, f in zip(got, want_float):
    assert g.ravel() @ f.ravel() > 0.99 * np.linalg.norm(g) * np.linalg.norm(f)
  fused = quantization.fuse_conv_sequences(qmodel)
  assert [type(l).__name__ for l in fused.layers].count("QuantizedConvSequence") == 1
  np.testing.assert_array_equal(fused(x).numpy(), got)
  layer_helpers.assert_keras_round_trip_exact(fused, x, str(tmp_path / "g.keras"))
