"""Property-based fuzzing of the raw op with malformed and valid calls.

Hypothesis generates batches of calls with every argument's rank, dims, dtype,
length and attr values varied (empty and huge dims included; plain, grouped
and depthwise convolutions). Each batch runs
in a child process, so a crash or an abort fails the test instead of killing
the test run. Invalid calls must raise a Python exception; valid ones must
equal the numpy reference bit for bit. CI runs a few hundred cases; set
TF_FUSED_INT8_FUZZ_BATCHES=100 (50 cases a batch) for thousands.
"""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fuzz_cases
import reference

HERE = os.path.dirname(os.path.abspath(__file__))
BATCHES = int(os.environ.get("TF_FUSED_INT8_FUZZ_BATCHES", "4"))
BATCH_SIZE = 50
PATHS = ["auto", "reference", "portable"]

MUTATIONS = (
    "input_rank", "filter_rank", "depth", "huge_dim", "empty_dim", "bias",
    "scale", "side_scale", "side", "strides", "dilations", "padding",
    "activation", "dtype", "nonfinite", "zero_filter",
)


@st.composite
def case(draw):
  """A consistent call, then none, one or two mutations of one argument."""
  n, h, w, ci = (draw(st.integers(0, 3)), draw(st.integers(0, 9)),
                 draw(st.integers(0, 9)), draw(st.integers(0, 6)))
  kh, kw, co = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(0, 6))
  # Grouped (groups = ci / filter depth, as tf.nn.conv2d): depthwise with a
  # channel multiplier, or 2-3 groups of 1-9 channels each way.
  groups = 1
  kind = draw(st.sampled_from(["plain", "plain", "depthwise", "grouped"]))
  if kind == "depthwise":
    ci = draw(st.integers(1, 20))
    groups, co = ci, ci * draw(st.integers(1, 3))
  elif kind == "grouped":
    groups = draw(st.integers(2, 3))
    ci, co = groups * draw(st.integers(1, 9)), groups * draw(st.integers(0, 9))
  c = dict(
      seed=draw(st.integers(0, 2**31)), dtype=draw(st.sampled_from(["int8", "qint8"])),
      input_shape=[n, h, w, ci], filter_shape=[kh, kw, ci // groups, co],
      bias_shape=[co],
      scale_shape=draw(st.sampled_from([[], [1], [co]] if co else [[], [1]])),
      side_scale_shape=[],
      strides=[1, draw(st.integers(1, 3)), draw(st.integers(1, 3)), 1],
      dilations=[1, draw(st.integers(1, 2)), draw(st.integers(1, 2)), 1],
      padding=draw(st.sampled_from(["SAME", "VALID"])),
      activation=draw(st.sampled_from(["Relu", "None"])), float_scale=1.0,
      side_shape=[0])
  out = fuzz_cases.expected_output_shape(c)
  if out is not None and draw(st.booleans()):
    c["side_shape"] = list(out)
  for m in draw(st.lists(st.sampled_from(MUTATIONS), max_size=2)):
    if m == "input_rank":
      c["input_shape"] = c["input_shape"][:draw(st.integers(0, 3))] + (
          [2] if draw(st.booleans()) else [])
      if len(c["input_shape"]) == 4:
        c["input_shape"].append(1)
    elif m == "filter_rank":
      c["filter_shape"] = c["filter_shape"] + [1] if draw(st.booleans()) else c["filter_shape"][:3]
    elif m == "depth":
      c["filter_shape"][2] += draw(st.sampled_from([-1, 1, 2]))
      c["filter_shape"][2] = abs(c["filter_shape"][2])
    elif m in ("huge_dim", "empty_dim"):
      key = draw(st.sampled_from(["input_shape", "filter_shape", "side_shape"]))
      dims = c[key]
      if dims:
        dims[draw(st.integers(0, len(dims) - 1))] = (
            draw(st.sampled_from([2**31 - 1, 2**31, 2**40, 2**62])) if m == "huge_dim" else 0)
        if m == "huge_dim":
          dims[draw(st.integers(0, len(dims) - 1))] = 0  # keep the tensor empty
    elif m == "bias":
      c["bias_shape"] = draw(st.sampled_from([[co + 1], [], [co, 1], [0], [co + 7]]))
    elif m == "scale":
      c["scale_shape"] = draw(st.sampled_from([[0], [2], [co + 1], [co, 1], [1, 1]]))
    elif m == "side_scale":
      c["side_scale_shape"] = draw(st.sampled_from([[1], [0], [2]]))
    elif m == "side":
      o = out or [1, 1, 1, 1]
      c["side_shape"] = draw(st.sampled_from([[1], [o[0] + 1] + list(o[1:]),
                                              list(o[:3]) + [o[3] + 1], list(o[:3]), [0, 0, 0, 0]]))
    elif m in ("strides", "dilations"):
      c[m] = draw(st.sampled_from([[1, 1, 1], [2, 1, 1, 1], [1, 1, 1, 2], [1, 0, 1, 1],
                                   [1, -1, 1, 1], [1, 2**31 - 1, 1, 1], [1, 1, 1, 1, 1], []]))
    elif m == "padding":
      c["padding"] = draw(st.sampled_from(["EXPLICIT", "FULL", "same", ""]))
    elif m == "activation":
      c["activation"] = draw(st.sampled_from(["Relu6", "relu", "Elu", ""]))
    elif m == "dtype":
      c["dtype"] = "uint8"
    elif m == "nonfinite":
      c["float_scale"] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e30]))
    elif m == "zero_filter":
      c["filter_shape"][draw(st.integers(0, 1))] = 0
  return c


def reference_digest(c, out_shape):
  a = fuzz_cases.make_arrays(c)
  y = reference.fused_conv2d_reference(
      a["conv_input"], a["filter"], a["bias"], side_input=a["side_input"],
      conv_input_scale=a["conv_input_scale"].reshape(-1) if a["conv_input_scale"].ndim else a["conv_input_scale"],
      side_input_scale=a["side_input_scale"], strides=c["strides"],
      padding=c["padding"], activation=c["activation"], dilations=c["dilations"])
  assert y.shape == tuple(out_shape)
  return hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest()


def run_batch(cases, path, tmp_path):
  f = tmp_path / "cases.json"
  f.write_text(json.dumps(cases))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  if path != "auto":
    env["TF_FUSED_INT8_CPU_KERNEL"] = path
  r = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_child.py"), str(f)],
                     capture_output=True, text=True, timeout=600, env=env)
  lines = r.stdout.splitlines()
  if r.returncode != 0 or not lines or lines[-1] != "done":
    started = [l for l in lines if l.startswith("start ")]
    last = int(started[-1].split()[1]) if started else None
    pytest.fail(f"child exited with {r.returncode} ({path}); last case started: "
                f"{json.dumps(cases[last]) if last is not None else None}\n"
                f"{r.stderr[-2000:]}")
  return [json.loads(l) for l in lines if l.startswith("{")]


@pytest.mark.parametrize("path", PATHS)
def test_fuzz_malformed_and_valid_calls(path, tmp_path_factory):
  batches = []

  @settings(max_examples=BATCHES, deadline=None, database=None, derandomize=True,
            suppress_health_check=list(HealthCheck))
  @given(st.lists(case(), min_size=BATCH_SIZE, max_size=BATCH_SIZE))
  def collect(cases):
    batches.append(cases)

  collect()
  valid = invalid = grouped = 0
  for cases in batches:
    results = run_batch(cases, path, tmp_path_factory.mktemp("fuzz"))
    for c, r in zip(cases, results):
      want = fuzz_cases.expected_output_shape(c)
      if want is None:
        invalid += 1
        assert not r["ok"], f"invalid call was accepted: {json.dumps(c)}"
      else:
        valid += 1
        grouped += c["input_shape"][3] != c["filter_shape"][2]
        assert r["ok"], f"valid call failed: {json.dumps(c)} -> {r}"
        assert tuple(r["shape"]) == want, (c, r)
        assert r["sha"] == reference_digest(c, want), f"wrong result: {json.dumps(c)}"
  # The generator must exercise both sides.
  assert valid >= len(batches) * 5 and invalid >= len(batches) * 5, (valid, invalid)
  assert grouped >= len(batches) * 3, grouped  # grouped / depthwise calls ran
