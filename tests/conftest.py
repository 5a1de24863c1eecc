"""Test set-up: import paths, quiet TF logs, and shared fixtures."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_TESTS = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_TESTS)
for p in (_TESTS, _ROOT):
  if p not in sys.path:
    sys.path.insert(0, p)
