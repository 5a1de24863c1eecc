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
all its weights are).

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


# Tensor op -> (its resource op, the inputs that are variables there): what
# runner.py turns back into variables.
TENSOR_TO_RESOURCE = {
    TENSOR_OP: (RESOURCE_OP, tuple(sorted(_RESOURCE_INPUTS))),
    SEQUENCE_TENSOR_OP: (SEQUENCE_RESOURCE_OP,
                         tuple(sorted(_SEQUENCE_RESOURCE_INPUTS))),
}


def _resource_inputs(node):
  """The indices of a node's resource inputs, for the two resource ops."""
  return _RESOURCE_INPUTS if node.op == RESOURCE_OP else _SEQUENCE_RESOURCE_INPUTS

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
      self._constant_inputs.add(incoming_edge.destination.index)
      if self._resource_inputs <= self._constant_inputs:
        self.converted_self().node.op = self._tensor_op

  def new(node, function, enclosing_graph):
    if node.op in (RESOURCE_OP, SEQUENCE_RESOURCE_OP):
      return _ResourceFusedConv(node, function, enclosing_graph)
    return base_new(node, function, enclosing_graph)

  base.new = staticmethod(new)
  _installed = True
  return True
