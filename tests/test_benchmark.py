"""Smoke test of the benchmark CLI (python -m tf_fused_int8.benchmark).

Runs the real CLI, child processes included, on tiny custom layers with no
repeats: it checks that the table comes out with every column and that our
output equals TF's int8 kernel on them. It measures nothing.
"""

import os
import subprocess
import sys

import pytest

from tf_fused_int8 import benchmark
from tf_fused_int8 import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_cli(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return subprocess.run(
      [sys.executable, "-m", "tf_fused_int8.benchmark", *args], cwd=ROOT,
      env=env, capture_output=True, text=True, timeout=600, check=False)


def test_cli_prints_the_table_on_tiny_layers():
  r = _run_cli("--layers=6x7x8:3x3x16:1,9x9x3:7x7x8:2", "--batches=1,2",
               "--threads=1,2", "--repeats=1", "--min_time=0",
               "--paths=portable")
  assert r.returncode == 0, r.stderr[-3000:]
  lines = r.stdout.splitlines()
  header = next(l for l in lines if l.startswith("layer"))
  for column in ("ours ms", "ours GOPS", "portable ms", "tf-int8 ms",
                 "tf-int8 GOPS", "fp32 ms", "fp32 GOPS", "vs tf-int8",
                 "vs fp32", "check"):
    assert column in header, (column, header)
  rows = [l for l in lines if l.startswith(("6x7x8 ", "9x9x3 "))]
  assert len(rows) == 2 * 2 * 2, r.stdout  # layers x batches x threads
  for row in rows:
    assert row.split()[-1] == "exact", row  # bit-equal to TF's int8 kernel
    assert row.count("x ") >= 2, row  # both speedup columns filled


def test_cli_depthwise_suite_and_grouped_specs():
  """--suite=mobilenet_v2_dw with tiny custom depthwise/grouped layers: TF
  has no int8 kernel for them (tf-int8 '-'), fp32 is TF's float depthwise
  conv, and the check compares with TF's float depthwise accumulators put
  through the contract epilogue ("exact"), or "n/a" for the grouped layer
  without a TF counterpart on CPU."""
  r = _run_cli("--suite=mobilenet_v2_dw",
               "--layers=9x10x32:3x3x32:1:g32,11x9x24:3x3x48:2:g24,7x7x8:3x3x8:1:g2",
               "--batches=1", "--threads=1", "--repeats=1", "--min_time=0")
  assert r.returncode == 0, r.stderr[-3000:]
  rows = [l for l in r.stdout.splitlines() if l.startswith(("9x10x32", "11x9x24", "7x7x8"))]
  assert len(rows) == 3, r.stdout
  by_name = {row.split()[0]: row for row in rows}
  for name in ("9x10x32", "11x9x24"):
    row = by_name[name]
    assert " dw " in row, row
    assert row.split()[-1] == "exact", row
    assert row.count("x ") >= 1, row  # vs fp32 filled
  assert " g2 " in by_name["7x7x8"]


def test_depthwise_suite_cases():
  cases = benchmark.layer_cases([], 2, "mobilenet_v2_dw")
  assert cases == testing.mobilenet_v2_depthwise_cases(2)
  assert all(c.groups == c.in_channels == c.out_channels for c in cases)
  assert {c.stride_h for c in cases} == {1, 2}
  (c,) = benchmark.layer_cases(["8x8x16:3x3x32:2:g16"], 1)
  assert (c.groups, c.filter_shape) == (16, (3, 3, 1, 32))
  assert benchmark.layer_name(c) == "8x8x16 3x3x32 s2 dw"


def test_bad_layer_spec_is_a_usage_error():
  r = _run_cli("--layers=56x56", "--threads=1")
  assert r.returncode != 0
  assert "HxWxCi:KhxKwxCo:stride" in r.stderr
  r = _run_cli("--layers=8x8x6:3x3x6:1:g4", "--threads=1")
  assert r.returncode != 0
  assert "groups 4 must divide" in r.stderr


def test_layer_cases():
  assert benchmark.layer_cases([], 8) == testing.resnet50_cases(8)
  assert benchmark.layer_cases(["3"], 1) == [testing.resnet50_cases(1)[3]]
  (c,) = benchmark.layer_cases(["10x12x5:3x1x7:2"], 4)
  assert (c.batch, c.height, c.width, c.in_channels) == (4, 10, 12, 5)
  assert (c.kernel_h, c.kernel_w, c.out_channels, c.strides) == (3, 1, 7, (2, 2))
  assert benchmark.layer_name(c) == "10x12x5 3x1x7 s2"


def test_format_table():
  case = testing.resnet50_cases(1)[0]
  results = [dict(layer=benchmark.layer_name(case), batch=1, threads=2,
                  macs=case.macs(), check="exact",
                  seconds={"ours": 1e-4, "path:avx2": 4e-4, "tf_int8": 8e-4,
                           "fp32": None})]
  table = benchmark.format_table(results, ["avx2"])
  row = table.splitlines()[-1]
  assert "8.00x" in row and "exact" in row
  assert f"{2 * case.macs() / 1e-4 / 1e9:.0f}" in row


if __name__ == "__main__":
  sys.exit(pytest.main([__file__, "-q"]))
