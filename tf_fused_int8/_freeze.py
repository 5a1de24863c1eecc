"""Freezing graphs that hold ResourceFusedInt8Conv2DBiasActivation.

TensorFlow's freezing (`convert_variables_to_constants_v2`, and the TF1
`convert_variables_to_constants` built on it) turns each variable into a
constant and rewrites the ops that read resources into their tensor forms: a
ReadVariableOp becomes an Identity, a ResourceGather a GatherV2. It only
knows its own ops, so a graph of our Keras layers would keep
ResourceFusedInt8Conv2DBiasActivation with constants wired to its resource
inputs, a graph that no longer runs. This module teaches it ours: once all
three of the op's variables (filter, bias, conv_input_scale) are constants,
the node becomes FusedInt8Conv2DBiasActivation, which has the same inputs in
the same order, the same attrs and the same output, and gives the same bits
(ResourceFusedInt8ConvSequence likewise becomes FusedInt8ConvSequence once
all its weights are). The constants that its variables become are
FusedInt8WeightConstant nodes, not Const: the same value and output, in a
buffer the tensor ops know never changes (cc/tf/weight_constant.h), so
they keep their packed weights unchecked, as the resource ops do for a
variable. With plain Consts they compared the filter bytes on every call:
ResNet50 at batch 1 on one thread took 12.2 ms frozen against 6.5 ms
(Xeon with AMX, where the 7x7 stage's 1-2 MB filters were repacked on
every call).

It hooks a private part of TensorFlow (`convert_to_constants._Node.new`, the
factory of the per-op converters, as in TF 2.21). Where that is missing the
hook is not installed and freezing behaves as TensorFlow's own.
"""

RESOURCE_OP = "ResourceFusedInt8Conv2DBiasActivation"
TENSOR_OP = "FusedInt8Conv2DBiasActivation"
# The op's resource inputs: filter, bias, conv_input_scale.
_RESOURCE_INPUTS = frozenset((1, 2, 4))
# ResourceFusedInt8ConvSequence becomes FusedInt8ConvSequence the same way
# once its two weight vectors (filters, epilogue) are constants.
SEQUENCE_RESOURCE_OP = "ResourceFusedInt8ConvSequence"
SEQUENCE_TENSOR_OP = "FusedInt8ConvSequence"
_SEQUENCE_RESOURCE_INPUTS = frozenset((1, 2))


def _resource_inputs(node):
  """The indices of a node's resource inputs, for the two resource ops."""
  return _RESOURCE_INPUTS if node.op == RESOURCE_OP else _SEQUENCE_RESOURCE_INPUTS


# What the weights' Const nodes become (cc/tf/weight_constant.h): the same
# value and output, in a buffer the tensor ops know never changes, so that
# they keep their packed weights unchecked, as for a variable.
WEIGHT_CONSTANT_OP = "FusedInt8WeightConstant"
# int8, qint8, float32 (types.proto), the dtypes the op takes.
_WEIGHT_CONSTANT_DTYPES = frozenset((6, 11, 1))


def _to_weight_constant(convertible):
  """Makes the Const that freezing left for one of our weights (a variable's
  handle, converted) a FusedInt8WeightConstant; anything else stays."""
  try:
    node = convertible.converted_self().node
  except AttributeError:
    return
  if node.op == "Const" and node.attr["dtype"].type in _WEIGHT_CONSTANT_DTYPES:
    node.op = WEIGHT_CONSTANT_OP


_installed = False


def install():
  """Installs the converter once; returns whether it is installed."""
  global _installed
  if _installed:
    return True
  try:
    from tensorflow.python.framework import convert_to_constants as c2c  # pylint: disable=g-import-not-at-top
    base = c2c._Node  # pylint: disable=protected-access
    base_new = base.new
  except (ImportError, AttributeError):
    return False

  class _ResourceFusedConv(base):
    """Becomes the tensor op once its three variables are constants."""

    def __init__(self, node, function, enclosing_graph):
      super().__init__(node, function, enclosing_graph)
      self._constant_inputs = set()
      self._resource_inputs = _resource_inputs(node)
      self._tensor_op = (TENSOR_OP if node.op == RESOURCE_OP else
                         SEQUENCE_TENSOR_OP)

    def convert_variable_to_constant(self, incoming_edge, tensor_data):
      del tensor_data
      index = incoming_edge.destination.index
      self._constant_inputs.add(index)
      if index in self._resource_inputs:
        _to_weight_constant(incoming_edge.source.convertible)
      if self._resource_inputs <= self._constant_inputs:
        self.converted_self().node.op = self._tensor_op

  def new(node, function, enclosing_graph):
    if node.op in (RESOURCE_OP, SEQUENCE_RESOURCE_OP):
      return _ResourceFusedConv(node, function, enclosing_graph)
    return base_new(node, function, enclosing_graph)

  base.new = staticmethod(new)
  _installed = True
  return True
