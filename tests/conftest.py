"""Test set-up: import paths, quiet TF logs, and shared fixtures."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_TESTS = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_TESTS)
for p in (_TESTS, _ROOT):
  if p not in sys.path:
    sys.path.insert(0, p)


import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(autouse=True)
def _same_random_state_every_run():
  """Every test starts from the same random state: models built with Keras's
  default initializers (and anything drawing from numpy's or Python's global
  generators) get the same weights in every run, so a tolerance a test
  checks is checked on the same model each time, not on a new random one
  (test_unsupported_layers_warn_and_stay_float failed 1 run in 60 that way:
  its int8-vs-float error is a property of the weights it happened to draw).
  """
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(20261201)
  yield


@pytest.fixture
def keras_calls(monkeypatch):
  """The layers and models whose calls went through Keras's Layer.__call__
  (type names, in call order): the eager fast paths (layers._EagerCall,
  QuantizedModel) leave it empty."""
  import keras  # pylint: disable=g-import-not-at-top
  seen = []
  keras_call = keras.layers.Layer.__call__

  def counting(self, *args, **kwargs):
    seen.append(type(self).__name__)
    return keras_call(self, *args, **kwargs)
  monkeypatch.setattr(keras.layers.Layer, "__call__", counting)
  return seen
