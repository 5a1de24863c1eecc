"""The C++ shape function: static shapes when inputs are known, partial shapes
when some dims are unknown, and graph-construction errors for inconsistent
ranks and dims."""

import numpy as np
import pytest
import tensorflow as tf

import tf_fused_int8

OPS = tf_fused_int8.load_ops()


def infer(input_shape, filter_shape, bias_shape=None, side_shape=(0,),
          scale_shape=(), side_scale_shape=(), strides=(1, 1, 1, 1),
          padding="SAME", dilations=(1, 1, 1, 1), data_format="NHWC",
          filter_format="HWIO"):
  """Output static shape of the op traced with these (partial) input shapes."""
  if bias_shape is None:
    if filter_shape is None or len(filter_shape) < 4:
      bias_shape = (None,)
    else:
      bias_shape = (filter_shape[3] if filter_format == "HWIO" else filter_shape[0],)
  specs = [tf.TensorSpec(input_shape, tf.int8), tf.TensorSpec(filter_shape, tf.int8),
           tf.TensorSpec(bias_shape, tf.float32), tf.TensorSpec(side_shape, tf.int8),
           tf.TensorSpec(scale_shape, tf.float32),
           tf.TensorSpec(side_scale_shape, tf.float32)]

  @tf.function(input_signature=specs)
  def f(x, w, b, side, scale, side_scale):
    return OPS.fused_int8_conv2d_bias_activation(
        x, w, b, side, scale, side_scale, strides=list(strides), padding=padding,
        dilations=list(dilations), data_format=data_format,
        filter_format=filter_format)

  return f.get_concrete_function().structured_outputs.shape.as_list()


@pytest.mark.parametrize("shape,filt,strides,padding,want", [
    ((2, 9, 9, 3), (3, 3, 3, 8), (1, 1, 1, 1), "SAME", [2, 9, 9, 8]),
    ((2, 9, 9, 3), (3, 3, 3, 8), (1, 1, 1, 1), "VALID", [2, 7, 7, 8]),
    ((1, 10, 7, 4), (3, 2, 4, 5), (1, 2, 3, 1), "SAME", [1, 5, 3, 5]),
    ((1, 10, 7, 4), (3, 2, 4, 5), (1, 2, 3, 1), "VALID", [1, 4, 2, 5]),
    ((1, 7, 7, 1), (7, 7, 1, 2), (1, 1, 1, 1), "VALID", [1, 1, 1, 2]),
])
def test_static_shapes(shape, filt, strides, padding, want):
  assert infer(shape, filt, strides=strides, padding=padding) == want


def test_static_shape_with_dilation():
  assert infer((1, 11, 11, 2), (3, 3, 2, 4), dilations=(1, 2, 3, 1),
               padding="VALID") == [1, 7, 5, 4]


def test_unknown_batch_and_spatial_dims():
  assert infer((None, 9, 9, 3), (3, 3, 3, 8)) == [None, 9, 9, 8]
  assert infer((None, None, None, 3), (3, 3, 3, 8)) == [None, None, None, 8]
  assert infer((2, None, 9, 3), (3, 3, 3, 8), padding="VALID") == [2, None, 7, 8]
  # Unknown output depth in the filter is filled from bias.
  assert infer((2, 9, 9, 3), (3, 3, 3, None), bias_shape=(6,)) == [2, 9, 9, 6]


def test_unknown_ranks_give_unknown_dims():
  assert infer(None, (3, 3, 3, 8)) == [None, None, None, 8]


def test_side_input_shape_refines_output():
  assert infer((None, 9, 9, 3), (3, 3, 3, 8), side_shape=(4, 9, 9, 8)) == [4, 9, 9, 8]


def test_nchw_vect_c_shapes():
  assert infer((2, 2, 9, 9, 4), (16, 2, 3, 3, 4), data_format="NCHW_VECT_C",
               filter_format="OIHW_VECT_I", strides=(1, 1, 2, 2)) == [2, 4, 5, 5, 4]


@pytest.mark.parametrize("kwargs,match", [
    (dict(input_shape=(2, 9, 9), filter_shape=(3, 3, 3, 8)), "conv_input must be rank 4"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 8)), "filter must be rank 4"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 4, 8)), "conv_input depth"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), bias_shape=(7,)), "bias length"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), bias_shape=(8, 1)), "bias must be rank 1"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), scale_shape=(5,)), "conv_input_scale"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), scale_shape=(8, 1)), "conv_input_scale"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), side_scale_shape=(1,)), "side_input_scale"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), side_shape=(2, 9, 9, 7)), "side_input"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), side_shape=(5,)), "side_input"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), strides=(2, 1, 1, 1)), "strides"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), strides=(1, 1, 1)), "strides"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), dilations=(1, 0, 1, 1)), "dilations"),
    (dict(input_shape=(2, 2, 9, 3), filter_shape=(3, 3, 3, 8), padding="VALID"), "Negative dimension size"),
    (dict(input_shape=(2, 9, 9, 3), filter_shape=(3, 3, 3, 8), data_format="NCHW_VECT_C"), "requires filter_format"),
    (dict(input_shape=(2, 1, 9, 9, 4), filter_shape=(6, 1, 3, 3, 4), data_format="NCHW_VECT_C",
          filter_format="OIHW_VECT_I"), "divisible by 4"),
])
def test_inconsistent_shapes_fail_at_graph_construction(kwargs, match):
  with pytest.raises(ValueError, match=match):
    infer(**kwargs)
