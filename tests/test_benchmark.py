"""The benchmark (python -m tf_fused_int8.benchmark): its harness, not speed.

Runs the real CLI, worker processes included, on tiny layers with one short
repeat: every column comes out, our rows are bit-exact with TF's int8 kernel,
the JSON rows have their schema, --peak measures the instructions this CPU
has, and peers that are not installed are skipped with a line saying how to
set them up. The exactness probe is checked against a deliberately
saturating numpy model (it must say "off by N") and an exact one. It
measures nothing.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tf_fused_int8 import benchmark
from tf_fused_int8 import testing
from tf_fused_int8.benchmark import cases
from tf_fused_int8.benchmark import cli
from tf_fused_int8.benchmark import tables
from tf_fused_int8.benchmark.workers import exactness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_PYTHON = os.path.join(ROOT, ".venv-peers", "bin", "python")
ROW_KEYS = {"suite", "layer", "batch", "threads", "impl", "ms", "gops",
            "exact", "cpu_kernel", "peak_pct"}
QUICK = ("--batches=1", "--threads=1", "--repeats=1", "--min_time=0",
         "--graph_ops=2")


def _run_cli(*args, env=None):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return subprocess.run(
      [sys.executable, "-m", "tf_fused_int8.benchmark", *args], cwd=ROOT,
      env=env, capture_output=True, text=True, timeout=900, check=False)


def _cpu_flags():
  with open("/proc/cpuinfo") as f:
    return set(next((l.split(":", 1)[1].split() for l in f
                     if l.startswith("flags")), []))


def _table_rows(stdout, prefix):
  return [l for l in stdout.splitlines() if l.startswith(prefix)]


# ------------------------------------------------------------ the CLI


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
  """One quick run: two tiny layers, litert, peers forced absent, --peak."""
  out = tmp_path_factory.mktemp("bench") / "rows.json"
  r = _run_cli("--layers=6x7x8:3x3x16:1,9x9x3:7x7x8:2", *QUICK,
               "--paths=portable", "--peers=all", "--peak",
               "--peers_python=/nonexistent/python", f"--json={out}")
  assert r.returncode == 0, r.stderr[-4000:]
  with open(out) as f:
    rows = json.load(f)
  return r.stdout, rows


def test_cli_prints_every_column_and_exact_rows(quick_run):
  stdout, _ = quick_run
  header = next(l for l in stdout.splitlines() if l.startswith("layer "))
  for column in ("kernel", "ours ms", "ours GOPS", "%peak", "eager ms",
                 "portable GOPS", "tf-int8 GOPS", "tf-fp32 GOPS",
                 "litert GOPS", "best peer", "vs best", "best exact",
                 "vs exact", "check"):
    assert column in header, (column, header)
  rows = _table_rows(stdout, ("6x7x8 ", "9x9x3 "))
  # One speed row and one exactness row per layer.
  assert len(rows) == 4, stdout
  for row in rows[:2]:
    assert row.split()[-1] == "exact", row  # ours == TF's int8, bit for bit
    assert row.count("x ") >= 2, row  # both ratio columns filled
  exact_header = next(l for l in stdout.splitlines()
                      if l.startswith("layer ") and "litert" in l
                      and "GOPS" not in l)
  assert "ours" in exact_header and "tf-int8" in exact_header
  for row in rows[2:]:
    cells = row.split()
    # ours, ours eager, ours@portable, tf-int8, tf-fp32, litert
    assert cells[3:9] == ["exact", "exact", "exact", "exact", "float",
                          "exact"], row


def test_cli_skips_missing_peers_with_the_setup_command(quick_run):
  stdout, rows = quick_run
  for family in ("onnxruntime", "torch"):
    line = next(l for l in stdout.splitlines() if l.startswith(f"note: {family}"))
    assert "tools/setup_bench_peers.sh" in line, line
  assert not any(r["impl"].startswith(("onnxruntime", "torch")) for r in rows)


def test_json_rows_schema(quick_run):
  _, rows = quick_run
  layer_rows = [r for r in rows if r["suite"] == "resnet50"]
  impls = {(r["impl"], r["mode"], r["forced"]) for r in layer_rows}
  assert {("ours", "graph", None), ("ours", "eager", None),
          ("ours", "graph", "portable"), ("tf_int8", None, None),
          ("tf_fp32", None, None), ("litert", None, None)} <= impls, impls
  for r in rows:
    assert ROW_KEYS <= set(r), r
    assert isinstance(r["threads"], int)
  for r in layer_rows:
    assert r["layer"] in ("6x7x8 3x3x16 s1", "9x9x3 7x7x8 s2"), r
    assert r["batch"] == 1 and r["threads"] == 1
    assert r["error"] is None, r
    assert r["ms"] > 0 and r["gops"] > 0
    np.testing.assert_allclose(r["gops"], 2 * r["macs"] / (r["ms"] / 1e3) / 1e9)
    if r["impl"] == "ours":
      assert r["exact"] is True and r["cpu_kernel"], r
      assert r["peak_pct"] is None or r["peak_pct"] > 0
    elif r["impl"] == "tf_fp32":
      assert r["exact"] is None and r["exact_text"] == "float"
    else:
      assert r["exact"] is True, r
  forced = [r for r in layer_rows if r["forced"] == "portable"]
  assert forced and all(r["cpu_kernel"] == "portable" for r in forced)


def test_peak_measures_this_cpus_instructions(quick_run):
  _, rows = quick_run
  peak = {r["layer"]: r for r in rows if r["suite"] == "peak"}
  assert all(r["impl"] == "peak_" + name for name, r in peak.items())
  cpu = _cpu_flags()
  want = {"vpmaddwd_ymm": {"avx2"}, "vpmaddubsw_ymm": {"avx2"},
          "fma_ymm": {"avx2", "fma"},
          "vpdpbusd_ymm": {"avx_vnni"},
          "vpdpbusd_zmm": {"avx512f", "avx512bw", "avx512vl", "avx512dq",
                           "avx512_vnni"},
          # Run where the amx path is usable (op_harness.expected_paths).
          "tdpbssd": {"amx_tile", "amx_int8"},
          "tdpbssd_loads": {"amx_tile", "amx_int8"},
          "epilogue_ymm": {"avx2"},
          "epilogue_zmm": {"avx512f", "avx512bw", "avx512vl", "avx512dq",
                           "avx512_vnni"}}
  if "avx2" in cpu:
    assert set(want) <= set(peak), sorted(peak)
  for name, needs in want.items():
    if name not in peak:
      continue
    # A loop runs exactly where the CPU has every flag it needs (dispatch
    # checks each of them).
    if needs <= cpu:
      assert peak[name]["gops"] > 1, peak[name]
    else:
      assert peak[name]["gops"] is None and peak[name]["error"], peak[name]
  # The amx micro-tile's K step with its four tile loads cannot beat
  # TDPBSSD alone (noise aside).
  if want["tdpbssd"] <= cpu and "tdpbssd" in peak:
    assert peak["tdpbssd_loads"]["gops"] <= 1.2 * peak["tdpbssd"]["gops"], peak
  # The epilogue loops count outputs: each zmm one does 16 of them in about
  # five vector instructions, far fewer per second than VPDPBUSD's MACs.
  for name, mac_loop in (("epilogue_ymm", "vpmaddwd_ymm"),
                         ("epilogue_zmm", "vpdpbusd_zmm")):
    if peak.get(name, {}).get("gops") and peak.get(mac_loop, {}).get("gops"):
      assert peak[name]["gops"] < peak[mac_loop]["gops"] / 4, peak
  ours = [r for r in rows if r["impl"] == "ours" and r["forced"] is None
          and r["cpu_kernel"] in ("avx2", "avx512vnni", "avxvnni")]
  assert all(r["peak_pct"] is not None for r in ours), ours
  # %lim: the MACs at the peak plus the outputs at the epilogue limit, over
  # the time, so at least %peak (noise can put either above 100).
  assert all(r["limit_pct"] is not None and r["limit_pct"] >= r["peak_pct"]
             for r in ours), ours


@pytest.mark.skipif(not os.path.exists(PEERS_PYTHON),
                    reason="no .venv-peers (tools/setup_bench_peers.sh)")
def test_cli_with_the_peers_venv(tmp_path):
  out = tmp_path / "rows.json"
  r = _run_cli("--layers=8x8x16:3x3x16:1", *QUICK, "--tf_int8=false",
               "--fp32=false", "--peers=onnxruntime,torch", f"--json={out}")
  assert r.returncode == 0, r.stderr[-4000:]
  with open(out) as f:
    rows = json.load(f)
  impls = {r["impl"] for r in rows}
  assert {"onnxruntime_u8", "onnxruntime_s8", "torch_x86",
          "torch_onednn"} <= impls, r.stdout
  for row in rows:
    assert row["error"] is None, row
    assert row["exact"] in (True, False), row  # decided by the probes
    if not row["exact"]:
      assert row["exact_text"].startswith("off by "), row


def test_cli_depthwise_suite_and_grouped_specs(tmp_path):
  """--suite=mobilenet_v2_dw with tiny custom depthwise/grouped layers: TF
  has no int8 kernel for them (tf-int8 "-"), fp32 is TF's float depthwise
  conv, and the check compares with TF's float depthwise accumulators put
  through the contract epilogue ("exact"), or "n/a" for the grouped layer.
  Under --peak the depthwise rows are also set against the memory limit
  (%mem) and a copy of their own bytes (%copy); the grouped row is not."""
  out = tmp_path / "rows.json"
  r = _run_cli("--suite=mobilenet_v2_dw",
               "--layers=9x10x32:3x3x32:1:g32,11x9x24:3x3x48:2:g24,7x7x8:3x3x8:1:g2",
               *QUICK, "--probes=false", "--peak", "--peak_time=0.02",
               f"--json={out}")
  assert r.returncode == 0, r.stderr[-3000:]
  rows = _table_rows(r.stdout, ("9x10x32", "11x9x24", "7x7x8"))
  assert len(rows) == 3, r.stdout
  by_name = {row.split()[0]: row for row in rows}
  for name in ("9x10x32", "11x9x24"):
    row = by_name[name]
    assert " dw " in row, row
    assert row.split()[-1] == "exact", row
  assert " g2 " in by_name["7x7x8"]
  assert by_name["7x7x8"].split()[-1] == "n/a"  # no counterpart to check

  with open(out) as f:
    json_rows = json.load(f)
  memory = [x for x in json_rows if x["layer"] == "copy_memory"]
  assert [x["threads"] for x in memory] == [1], memory
  ours = {x["layer"].split()[0]: x for x in json_rows
          if x["impl"] == "ours" and x["mode"] == "graph"}
  assert set(ours) == {"9x10x32", "11x9x24", "7x7x8"}, sorted(ours)
  assert all(ours["7x7x8"][k] is None for k in ("gbps", "mem_pct", "copy_pct"))
  if "avx2" not in _cpu_flags():
    assert memory[0]["gbps"] is None and memory[0]["error"], memory
    return
  assert memory[0]["gbps"] > 0.1, memory
  header = next(l for l in r.stdout.splitlines() if l.startswith("layer "))
  assert "%mem" in header and "%copy" in header, header
  moved = {"9x10x32": 9 * 10 * 32 * 2, "11x9x24": 11 * 9 * 24 + 6 * 5 * 48}
  for name, nbytes in moved.items():
    row = ours[name]
    np.testing.assert_allclose(row["gbps"], nbytes / (row["ms"] / 1e3) / 1e9,
                               rtol=1e-6)
    np.testing.assert_allclose(row["mem_pct"],
                               100 * row["gbps"] / memory[0]["gbps"], rtol=1e-6)
    assert row["copy_pct"] > 0, row


def test_fp32_max_isa_limits_tfs_onednn_in_our_worker():
  """--fp32_max_isa=AVX2: our worker (which times tf_fp32) starts with
  ONEDNN_MAX_CPU_ISA=AVX2, and the output says so."""
  r = _run_cli("--layers=6x7x8:3x3x16:1", *QUICK, "--peers=", "--notf_int8",
               "--fp32_max_isa=AVX2", "--noprobes")
  assert r.returncode == 0, r.stderr[-4000:]
  assert ("note: tf-fp32 / tf-int8: TF's oneDNN limited to AVX2 "
          "(ONEDNN_MAX_CPU_ISA, --fp32_max_isa)") in r.stdout, r.stdout
  (row,) = _table_rows(r.stdout, "6x7x8 ")
  assert "tf-fp32" in r.stdout and row.split()[-1] == "exact", row


def test_bad_arguments_are_usage_errors():
  r = _run_cli("--layers=56x56", "--threads=1")
  assert r.returncode != 0
  assert "HxWxCi:KhxKwxCo:stride" in r.stderr
  r = _run_cli("--layers=8x8x6:3x3x6:1:g4", "--threads=1")
  assert r.returncode != 0
  assert "groups 4 must divide" in r.stderr
  r = _run_cli("--peers=tensorrt", "--threads=1")
  assert r.returncode != 0
  assert "unknown peer 'tensorrt'" in r.stderr


# -------------------------------------------------------- the exactness probe


def _saturating_u8s8(x_u8, w, spec):
  """What a u8 x s8 kernel built on VPMADDUBSW computes: each pair of
  products along K (HWC order) summed with int16 saturation, minus the
  zero-point correction 128 * sum(w), in int32."""
  pt, pb, pl, pr = spec["pads"]
  x = np.pad(x_u8.astype(np.int64), ((0, 0), (pt, pb), (pl, pr), (0, 0)),
             constant_values=128)
  kh, kw, ci, co = w.shape
  s = spec["stride_h"]
  ho = (x.shape[1] - kh) // s + 1
  wo = (x.shape[2] - kw) // s + 1
  wk = w.reshape(-1, co).astype(np.int64)
  if wk.shape[0] % 2:
    wk = np.vstack([wk, np.zeros((1, co), np.int64)])
  acc = np.zeros((1, ho, wo, co), np.int64)
  for i in range(ho):
    for j in range(wo):
      col = x[0, i * s:i * s + kh, j * s:j * s + kw, :].reshape(-1)
      if col.size % 2:
        col = np.append(col, 0)
      prods = col[:, None] * wk
      pairs = np.clip(prods[0::2] + prods[1::2], -32768, 32767)
      acc[0, i, j] = pairs.sum(axis=0) - 128 * wk.sum(axis=0)
  return acc


def _spec(**kw):
  case = testing.ConvCase(batch=1, height=7, width=6, in_channels=8,
                          kernel_h=3, kernel_w=3, out_channels=5, **kw)
  return cases.layer_spec(case)


@pytest.mark.parametrize("stride", [1, 2])
def test_probe_says_off_by_n_for_a_saturating_model(stride):
  spec = _spec(stride_h=stride, stride_w=stride)
  errors = []
  for kind in exactness.PROBE_KINDS:
    x, w, zp = exactness.probe_inputs(spec, kind, "uint8")
    m = exactness.output_multiplier(
        exactness.exact_accumulators(x.astype(np.int64) - zp, w, spec))
    acc = _saturating_u8s8(x, w, spec)
    out = np.clip(np.rint(acc * m) + 128, 0, 255).astype(np.uint8)
    errors.append(exactness.evaluate(
        spec, kind, "uint8",
        dict(out=out, x_zero_point=zp, multiplier=m, out_zero_point=128,
             out_min=0, out_max=255)))
  exact, text = exactness.verdict(errors)
  assert not exact
  n = int(text.split()[-1])
  # 72 products of 255 * -128 summed in pairs, each pair -65280 -> -32768:
  # the exact sum is twice the saturated one; at ~100 levels, ~50 off.
  assert text == f"off by {n}" and 30 <= n <= 100, text
  assert errors[0] >= 30  # the extreme probe is what catches it


def test_probe_says_exact_for_an_exact_model_whatever_its_rounding():
  spec = _spec(stride_h=2, stride_w=1)
  for act in ("uint8", "int8"):
    for rounding in (np.rint, lambda v: np.floor(v + 0.5)):  # even / up
      errors = []
      for kind in exactness.PROBE_KINDS:
        x, w, zp = exactness.probe_inputs(spec, kind, act)
        acc = exactness.exact_accumulators(x.astype(np.int64) - zp, w, spec)
        m = exactness.output_multiplier(acc)
        lo, hi = (0, 255) if act == "uint8" else (-128, 127)
        out = np.clip(rounding(acc * m) + zp, lo, hi)
        errors.append(exactness.evaluate(
            spec, kind, act, dict(out=out, x_zero_point=zp, multiplier=m,
                                  out_zero_point=zp, out_min=lo, out_max=hi)))
      assert exactness.verdict(errors) == (True, "exact"), (act, errors)
  # One level off anywhere is not exact.
  x, w, zp = exactness.probe_inputs(spec, "random", "int8")
  acc = exactness.exact_accumulators(x, w, spec)
  m = exactness.output_multiplier(acc)
  out = np.clip(np.rint(acc * m), -128, 127)
  out[0, 1, 0, 2] += 1
  err = exactness.level_error(out, acc, m, 0, -128, 127)
  assert exactness.verdict([err])[0] is False


def test_exact_accumulators_match_a_brute_force_loop():
  rng = np.random.default_rng(3)
  for case in (testing.ConvCase(batch=2, height=5, width=6, in_channels=4,
                                kernel_h=3, kernel_w=2, out_channels=3,
                                stride_h=2, stride_w=1),
               testing.ConvCase(batch=1, height=6, width=6, in_channels=6,
                                kernel_h=3, kernel_w=3, out_channels=6,
                                groups=3, padding="VALID")):
    spec = cases.layer_spec(case)
    x = rng.integers(-128, 128, case.input_shape)
    w = rng.integers(-128, 128, case.filter_shape)
    got = exactness.exact_accumulators(x, w, spec)
    assert got.shape == case.output_shape
    pt, pb, pl, pr = spec["pads"]
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    cig, cog = w.shape[2], w.shape[3] // case.groups
    want = np.zeros(case.output_shape, np.int64)
    for n, i, j, c in np.ndindex(*case.output_shape):
      g = c // cog
      win = xp[n, i * case.stride_h:i * case.stride_h + case.kernel_h,
               j * case.stride_w:j * case.stride_w + case.kernel_w,
               g * cig:(g + 1) * cig]
      want[n, i, j, c] = int((win * w[..., c]).sum())
    np.testing.assert_array_equal(got, want)


def test_same_pads_are_tfs():
  case = testing.resnet50_cases(1)[-1]  # 224x224 7x7 stride 2
  assert cases.same_pads(case) == (2, 3, 2, 3)
  assert cases.same_pads(testing.resnet50_cases(1)[1]) == (1, 1, 1, 1)
  valid = testing.ConvCase(batch=1, height=9, width=9, in_channels=1,
                           kernel_h=3, kernel_w=3, out_channels=1,
                           padding="VALID")
  assert cases.same_pads(valid) == (0, 0, 0, 0)


# ------------------------------------------------------------ cases, tables


def test_layer_cases_and_names():
  assert benchmark.layer_cases([], 8) == testing.resnet50_cases(8)
  assert benchmark.layer_cases(["3"], 1) == [testing.resnet50_cases(1)[3]]
  (c,) = benchmark.layer_cases(["10x12x5:3x1x7:2"], 4)
  assert (c.batch, c.height, c.width, c.in_channels) == (4, 10, 12, 5)
  assert (c.kernel_h, c.kernel_w, c.out_channels, c.strides) == (3, 1, 7, (2, 2))
  assert benchmark.layer_name(c) == "10x12x5 3x1x7 s2"
  dw = benchmark.layer_cases([], 2, "mobilenet_v2_dw")
  assert dw == testing.mobilenet_v2_depthwise_cases(2)
  (c,) = benchmark.layer_cases(["8x8x16:3x3x32:2:g16"], 1)
  assert (c.groups, c.filter_shape) == (16, (3, 3, 1, 32))
  assert benchmark.layer_name(c) == "8x8x16 3x3x32 s2 dw"
  with pytest.raises(cases.SpecError, match="layers 0-6"):
    benchmark.layer_cases(["7"], 1)


def test_layer_inputs_are_as_in_the_model(tmp_path):
  """--layer_inputs=model (the default): a layer that reads a ReLU's output
  in its model gets max(x, 0) (our avx2 path is faster on such inputs);
  stems, MobileNetV2's expansions and custom specs keep uniform int8."""
  def relu(suite, custom=False):
    return [cases.reads_relu_output(suite, c, custom)
            for c in cases.suite_cases(suite, 1)]
  assert relu("resnet50") == [True] * 6 + [False]  # the stem is last
  assert not any(relu("resnet50", custom=True))
  assert all(relu("mobilenet_v2_dw"))
  mnv2 = {benchmark.layer_name(c): r for c, r in
          zip(cases.suite_cases("mobilenet_v2", 1), relu("mobilenet_v2"))}
  assert not mnv2["224x224x3 3x3x32 s2"]          # stem
  assert mnv2["112x112x32 3x3x32 s1 dw"]          # depthwise
  assert mnv2["112x112x32 1x1x16 s1"]             # projection
  assert not mnv2["112x112x16 1x1x96 s1"]         # expansion
  assert not mnv2["7x7x320 1x1x1280 s1"]          # reads a projection
  for layer_inputs, lowest in (("model", 0), ("uniform", -128)):
    r = _run_cli("--suite=mobilenet_v2_dw", "--layers=9", *QUICK,
                 "--probes=false", "--tf_int8=false", "--fp32=false",
                 f"--layer_inputs={layer_inputs}", f"--work_dir={tmp_path}")
    assert r.returncode == 0, r.stderr[-3000:]
    x = np.load(tmp_path / "layer.npz")["x"]
    assert x.shape == (1, 7, 7, 960) and x.min() == lowest and x.max() == 127
    assert ("layer inputs: as in the model" in r.stdout) == (lowest == 0)


def test_rows_are_set_against_the_instructions_that_ran():
  """%peak: the avx2 GEMM on a non-negative input against the VPMADDUBSW
  loop, its Winograd and signed inputs against VPMADDWD."""
  from tf_fused_int8.benchmark import cli  # pylint: disable=import-outside-toplevel
  peaks = {"vpmaddwd_ymm": 1.0, "vpmaddubsw_ymm": 2.0, "vpdpbusd_zmm": 3.0}
  def spec(k, stride=1, **kw):
    return dict(kernel_h=k, kernel_w=k, stride_h=stride, stride_w=stride,
                dilation_h=1, dilation_w=1, groups=1, **kw)
  relu = dict(non_negative_input=True)
  assert cli.peak_for("avx2", spec(1, **relu), peaks) == 2.0
  assert cli.peak_for("avx2_direct", spec(3, **relu), peaks) == 2.0
  assert cli.peak_for("avx2", spec(3, **relu), peaks) == 1.0  # Winograd
  assert cli.peak_for("avx2", spec(3, stride=2, **relu), peaks) == 2.0
  assert cli.peak_for("avx2", spec(1), peaks) == 1.0
  assert cli.peak_for("avx512vnni", spec(1, **relu), peaks) == 3.0


def test_limit_adds_the_epilogue_to_the_macs():
  """%lim: a layer of 1e9 MACs and 1e8 outputs on a path of 1000 GOPS (2
  ops a MAC) and 50 G outputs/s has a 4 ms limit (2 + 2)."""
  from tf_fused_int8.benchmark import cli  # pylint: disable=import-outside-toplevel
  assert cli.limit_pct(8e-3, 1e9, 1e8, 1000.0, 50.0) == pytest.approx(50.0)
  assert cli.limit_pct(4e-3, 1e9, 0, 1000.0, 50.0) == pytest.approx(50.0)
  for missing in ((None, 1e9, 1e8, 1000.0, 50.0), (8e-3, 1e9, 1e8, None, 50.0),
                  (8e-3, 1e9, 1e8, 1000.0, None)):
    assert cli.limit_pct(*missing) is None
  assert set(cli.PATH_EPILOGUE) == set(cli.PATH_PEAK)
  rows = [_row("ours", 200.0, mode="graph", cpu_kernel="avx512vnni",
               peak_pct=40.0, limit_pct=71.5, check="exact"),
          _row("litert", 160.0)]
  header, _, line = tables.layer_table(rows, []).splitlines()[:3]
  cells = dict(zip(re.split(r"\s{2,}", header.strip()),
                   re.split(r"\s{2,}", line.strip())))
  assert cells["%peak"] == "40%" and cells["%lim"] == "72%", cells
  assert "%lim" not in tables.layer_table([_row("ours", 200.0, mode="graph")], [])
  text = tables.peak_table([
      dict(suite="peak", layer="vpdpbusd_zmm", threads=1, gops=850.0),
      dict(suite="peak", layer="epilogue_zmm", threads=1, gops=16.54)])
  assert "epilogue limit" in text and "16.5" in text and "850" in text, text


def _row(impl, gops, exact=True, **kw):
  r = dict(suite="resnet50", layer="L", batch=1, threads=2, impl=impl,
           mode=None, forced=None, ms=1.0, gops=gops, exact=exact,
           exact_text="exact" if exact else "off by 30", cpu_kernel=None,
           peak_pct=None, check=None, macs=1, error=None)
  r.update(kw)
  return r


def test_layer_table_ratios_against_best_and_best_exact_peer():
  rows = [_row("ours", 200.0, mode="graph", cpu_kernel="avx2", peak_pct=64.5,
               check="exact"),
          _row("ours", 100.0, mode="eager", cpu_kernel="avx2"),
          _row("onnxruntime_u8", 250.0, exact=False),
          _row("litert", 160.0), _row("tf_fp32", 50.0, exact=None)]
  text = tables.layer_table(rows, [])
  line = next(l for l in text.splitlines() if l.startswith("L "))
  cells = line.split()
  assert "250*" in cells  # not exact: marked
  assert cells[-5:] == ["ort-u8", "0.80x", "litert", "1.25x", "exact"], line
  assert "64%" in cells and "avx2" in cells


def test_layer_table_ratios_of_each_forced_path():
  rows = [_row("ours", 400.0, mode="graph", cpu_kernel="amx", check="exact"),
          _row("ours", 150.0, mode="graph", forced="avx2"),
          _row("ours", 300.0, mode="graph", forced="avx512vnni"),
          _row("onnxruntime_u8", 200.0, exact=False),
          _row("litert", 120.0)]
  text = tables.layer_table(rows, ["avx2", "avx512vnni"])
  header, _, line = text.splitlines()[:3]
  cells = dict(zip(re.split(r"\s{2,}", header.strip()),
                   re.split(r"\s{2,}", line.strip())))
  assert cells["vs best"] == "2.00x" and cells["vs exact"] == "3.33x"
  assert cells["avx2 vs best"] == "0.75x"
  assert cells["avx2 vs exact"] == "1.25x"
  assert cells["avx512vnni vs best"] == "1.50x"
  assert cells["avx512vnni vs exact"] == "2.50x"
  assert cells["check"] == "exact"


def _run_worker_script(script, tmp_path, **env_vars):
  """Runs `script` (argv: the repository, tmp_path) in a fresh Python with
  no path forced; returns the JSON of its last line."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env_vars)
  env.pop("TF_FUSED_INT8_CPU_KERNEL", None)
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  r = subprocess.run([sys.executable, "-c", script, ROOT, str(tmp_path)],
                     cwd=ROOT, env=env, capture_output=True, text=True,
                     timeout=600, check=False)
  assert r.returncode == 0, r.stderr[-4000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


def test_models_table_has_a_row_per_forced_path():
  rows = [_row("ours", 10.0, suite="models", layer="M", mode="graph",
               cpu_kernel="avx512vnni", ms=2.0, exact=None),
          _row("ours", 5.0, suite="models", layer="M", mode="graph",
               cpu_kernel="avx2", forced="avx2", ms=4.0, exact=None),
          _row("ours", None, suite="models", layer="M", mode="graph",
               cpu_kernel="amx", forced="amx", ms=None, exact=None,
               error="CPU kernel 'amx' is not supported"),
          _row("litert", 8.0, suite="models", layer="M", ms=3.0, exact=None),
          _row("ours", 12.0, suite="models", layer="M", mode="runner",
               cpu_kernel="avx512vnni", ms=1.5, exact=None),
          _row("ours", 11.0, suite="models", layer="M", mode="concrete",
               cpu_kernel="avx512vnni", ms=1.6, exact=None),
          _row("ours", 6.0, suite="models", layer="M", mode="runner",
               cpu_kernel="avx2", forced="avx2", ms=3.0, exact=None),
          _row("ours", 4.0, suite="models", layer="M", mode="eager",
               cpu_kernel="avx512vnni", ms=2.4, exact=None),
          _row("tf_fp32", 1.0, suite="models", layer="M", mode="graph",
               ms=12.0, exact=None)]
  text = tables.models_table(rows, {})
  lines = [l.split() for l in text.splitlines() if l.startswith("M ")]
  assert len(lines) == 7, text
  # tf.function, its concrete function, the runner, the eager call, then
  # the forced paths.
  auto, concrete, runner, eager, avx2, amx, runner_avx2 = lines
  # model batch thr kernel ours tf-fp32 litert vs-tf-fp32 vs-litert
  assert auto[3:] == ["avx512vnni", "2.000", "12.000", "3.000", "6.00x",
                      "1.50x"], text
  assert concrete[3:] == ["concrete", "avx512vnni", "1.600", "12.000",
                          "3.000", "7.50x", "1.88x"], text
  assert runner[3:] == ["runner", "avx512vnni", "1.500", "12.000", "3.000",
                        "8.00x", "2.00x"], text
  assert eager[3:] == ["eager", "avx512vnni", "2.400", "12.000", "3.000",
                       "5.00x", "1.25x"], text
  assert avx2[3:] == ["forced", "avx2", "4.000", "12.000", "3.000", "3.00x",
                      "0.75x"], text
  assert amx[3:] == ["forced", "amx", "err", "12.000", "3.000", "-", "-"], text
  assert runner_avx2[3:] == ["runner", "forced", "avx2", "3.000", "12.000",
                             "3.000", "4.00x", "1.00x"], text


_OURS_MODEL_SCRIPT = r"""
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(sys.argv[1], "tf_fused_int8", "benchmark",
                                "workers"))
import impl_ours
fam = impl_ours.Family(1)
import keras
from tf_fused_int8 import quantization
inp = keras.Input((9, 9, 3))
y = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
y = keras.layers.Conv2D(8, 1)(y)
model = keras.Model(inp, y)
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (2, 9, 9, 3)).astype(np.float32)
q = quantization.fuse_conv_sequences(quantization.quantize_model(model, x))
paths = dict(int8_keras=os.path.join(sys.argv[2], "q.keras"),
             float_keras=os.path.join(sys.argv[2], "f.keras"),
             input=os.path.join(sys.argv[2], "x.npy"),
             paths=["portable", "no_such_path"])
q.save(paths["int8_keras"]); model.save(paths["float_keras"])
np.save(paths["input"], x)
st = fam.setup_model("k", paths, 2)
runs = fam.runs["k"]
# Setup ran each once: later calls only hit the weight caches.
from tf_fused_int8.benchmark import cli
before = impl_ours._cache_stats(fam, {})
for fn in runs.values():
  fn(); fn()
repacked = cli.repacked_while_timing(before, impl_ours._cache_stats(fam, {}))
print(json.dumps(dict(
    status=st["impls"], keys=sorted(runs), repacked=repacked,
    hits=impl_ours._cache_stats(fam, {})["gemm"]["pinned_hits"] -
         before["gemm"]["pinned_hits"],
    same=bool(np.array_equal(runs["ours"]().numpy(),
                             runs["ours@portable"]().numpy())),
    concrete_same=bool(np.array_equal(runs["ours"]().numpy(),
                                      runs["ours_concrete"]().numpy())),
    eager_same=bool(np.array_equal(runs["ours"]().numpy(),
                                   runs["ours_eager"]().numpy())),
    runner_same=bool(np.array_equal(runs["ours"]().numpy(),
                                    runs["ours_runner"]()) and
                     np.array_equal(runs["ours"]().numpy(),
                                    runs["ours_runner@portable"]())),
    env_after=os.environ.get(impl_ours.KERNEL_ENV))))
"""


def test_models_suite_forces_each_path_per_call(tmp_path):
  """--paths in the models suite: "ours@P" is the same fused model run with
  TF_FUSED_INT8_CPU_KERNEL=P during each call (an unknown P fails in the
  op, so the variable is really read), with the same bits; the variable is
  restored after the call."""
  out = _run_worker_script(_OURS_MODEL_SCRIPT, tmp_path)
  assert out["status"]["ours"] is None and out["status"]["tf_fp32"] is None
  assert out["status"]["ours@portable"] is None
  assert re.match(r"InvalidArgumentError: FusedInt8ConvSequence step 0: "
                  r"TF_FUSED_INT8_CPU_KERNEL=no_such_path is not one of ",
                  out["status"]["ours@no_such_path"]), out["status"]
  assert out["status"]["ours_concrete"] is None
  assert out["status"]["ours_eager"] is None
  assert out["status"]["ours_runner"] is None
  assert out["status"]["ours_runner@portable"] is None
  assert out["status"]["ours_runner@no_such_path"] is not None
  assert out["keys"] == ["ours", "ours@portable", "ours_concrete",
                         "ours_eager", "ours_runner", "ours_runner@portable",
                         "tf_fp32"]
  assert out["same"]
  assert out["concrete_same"]  # the concrete function: the same bits
  assert out["eager_same"]  # the eager call: the same bits
  assert out["runner_same"]  # InferenceRunner: the same bits
  assert out["env_after"] is None
  # What the models suite checks around its timing (cli.run_one_model):
  # after setup's warm-up no row packs weights again.
  assert out["repacked"] == 0, out
  assert out["hits"] > 0, out


def test_repacked_while_timing_counts_misses_and_stale_entries():
  def stats(misses, stale, hits):
    return {"misses": misses, "stale": stale, "hits": hits}
  before = {"gemm": stats(10, 1, 5), "depthwise": stats(3, 0, 2)}
  same = {"gemm": stats(10, 1, 50), "depthwise": stats(3, 0, 20)}
  assert cli.repacked_while_timing(before, same) == 0
  more = {"gemm": stats(14, 2, 50), "depthwise": stats(5, 0, 20)}
  assert cli.repacked_while_timing(before, more) == 7


_OURS_LAYER_SCRIPT = r"""
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(sys.argv[1], "tf_fused_int8", "benchmark",
                                "workers"))
sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
import impl_ours
from tf_fused_int8 import testing
from tf_fused_int8.benchmark import cases
fam = impl_ours.Family(1)
tf, tfi = fam.tf, fam.tfi
case = testing.ConvCase(batch=2, height=9, width=7, in_channels=24,
                        kernel_h=3, kernel_w=3, out_channels=40, stride_h=2,
                        stride_w=1, padding="SAME", groups=1)
spec = cases.layer_spec(case)
spec["paths"] = []
inp = testing.make_inputs(case, seed=5)
data = os.path.join(sys.argv[2], "layer.npz")
np.savez(data, x=inp["conv_input"], w=inp["filter"], bias=inp["bias"],
         scale=inp["conv_input_scale"])
reply = fam.setup_layer("k", spec, data)
import op_harness  # after Family(1) has set TF's threads
pinned0 = op_harness.pinned_hits()
got = [float(v) for v in fam.runs["k"]["ours"]()]
pinned = op_harness.pinned_hits() - pinned0
got2 = [float(v) for v in fam.runs["k"][impl_ours.DOUBLED + "ours"]()]
fp32 = len(fam.runs["k"]["tf_fp32"]())
fp32_2 = len(fam.runs["k"][impl_ours.DOUBLED + "tf_fp32"]())
x = tf.constant(inp["conv_input"])
want = []
for j in range(2 * impl_ours.GRAPH_OPS):
  y = tfi.fused_conv2d_bias_activation(
      x, tf.constant(inp["filter"]),
      tf.constant(inp["bias"] + np.float32(j * 2.0 ** -12)),
      conv_input_scale=tf.constant(inp["conv_input_scale"]),
      **fam._op_kwargs(spec))
  want.append(float(y[0, 0, 0, 0]))
print(json.dumps(dict(got=got, got2=got2, want=want, pinned=pinned,
                      fp32=fp32, fp32_2=fp32_2, doubled=reply["doubled"],
                      caches=op_harness.uses_packed_weights())))
"""


def test_ours_layer_row_runs_as_a_keras_layer(tmp_path):
  """The per-layer "ours" row measures what a model layer costs: the
  variables' resource op (the filter pinned: pinned cache hits on paths
  that cache packings) and every output consumed (one element each, the
  op's real result), not GRAPH_OPS outputs kept alive together."""
  out = _run_worker_script(_OURS_LAYER_SCRIPT, tmp_path,
                           TF_FUSED_INT8_BENCH_GRAPH_OPS="3")
  assert len(out["got"]) == 3
  assert out["got"] == out["want"][:3]
  assert out["want"][0] != 0  # seed 5: a real value, not a clipped zero
  assert out["pinned"] >= 3 or not out["caches"]
  # Each in-graph impl again with twice the ops (the row is the difference):
  # the same op on the same variables.
  assert out["doubled"] == {"ours": "_x2:ours", "tf_fp32": "_x2:tf_fp32"}
  assert out["got2"] == out["want"]
  assert (out["fp32"], out["fp32_2"]) == (3, 6)


@pytest.mark.parametrize("once, twice, n, want", [
    (1.0, 1.8, 4, (0.2, 0.2)),    # 0.2 s a call, 0.2 s an op
    (1.0, 2.0, 4, (0.25, 0.0)),   # no per-call cost
    (1.0, 1.01, 4, (0.025, 0.9)),  # noise: a tenth of the raw share
    (1.0, None, 4, (0.25, None)),  # not timed twice: the raw share
])
def test_in_graph_rows_are_the_cost_of_more_ops(once, twice, n, want):
  per_op, per_call = cli.per_op_seconds(once, twice, n)
  assert per_op == pytest.approx(want[0])
  if want[1] is None:
    assert per_call is None
  else:
    assert per_call == pytest.approx(want[1])


if __name__ == "__main__":
  sys.exit(pytest.main([__file__, "-q"]))


def test_models_suite_1d_builders_and_macs():
  """The models suite's 1-D models: their input shapes and the MAC count
  of their Conv1D / Dense layers (the table's GMACs), checked by hand; a
  DepthwiseConv1D and a SeparableConv1D counted as their 2-D forms are."""
  import keras  # pylint: disable=g-import-not-at-top
  from tf_fused_int8.benchmark import models  # pylint: disable=g-import-not-at-top
  m5 = models.build_float_model("M5Audio", 0)
  assert tuple(m5.input.shape) == (None, 16000, 1)
  assert tuple(m5.output.shape) == (None, 35)
  # 4000 x 128 x 80, 1000 x 128 x 3 x 128, 250 x 256 x 3 x 128,
  # 62 x 512 x 3 x 256, 512 x 35.
  want = (4000 * 128 * 80 + 1000 * 128 * 384 + 250 * 256 * 384 +
          62 * 512 * 768 + 512 * 35)
  assert models.conv_macs(m5) == want
  tcn = models.build_float_model("TCN", 0)
  assert tuple(tcn.input.shape) == (None, 1024, 32)
  assert models.conv_macs(tcn) == (1024 * 128 * 32 + 12 * 1024 * 128 * 384 +
                                   128 * 10)
  inp = keras.Input((20, 6))
  h = keras.layers.DepthwiseConv1D(3, depth_multiplier=2, padding="same")(inp)
  h = keras.layers.SeparableConv1D(6, 3)(h)
  h = keras.layers.Conv1D(4, 3, groups=2, padding="same")(h)
  # 20 x 12 x 3; 18 x 12 x (3 + 6); 18 x 4 x 3 x 3 (3 channels per group).
  assert models.conv_macs(keras.Model(inp, h)) == 720 + 1944 + 648


def test_models_suite_transposed_builders_and_macs():
  """The models suite's DCGAN generator and ConvAutoencoder: shapes, and
  MACs with a Conv2DTranspose counted as each input pixel times its whole
  kernel, checked by hand."""
  from tf_fused_int8.benchmark import models  # pylint: disable=g-import-not-at-top
  gan = models.build_float_model("DCGAN", 0)
  assert tuple(gan.input.shape) == (None, 100)
  assert tuple(gan.output.shape) == (None, 28, 28, 1)
  # 100 x 12544; 7 x 7 x 256 x 25 x 128; 7 x 7 x 128 x 25 x 64; 14 x 14 x
  # 64 x 25 x 1.
  assert models.conv_macs(gan) == (100 * 12544 + 49 * 256 * 25 * 128 +
                                   49 * 128 * 25 * 64 + 196 * 64 * 25)
  ae = models.build_float_model("ConvAutoencoder", 0)
  assert tuple(ae.output.shape) == (None, 224, 224, 3)
  # 224^2 x 32 x 27; 112^2 x 32 x 288; transposed: 56^2 x 32 x 9 x 32 and
  # 112^2 x 32 x 9 x 32; 224^2 x 3 x 288.
  assert models.conv_macs(ae) == (224 ** 2 * 32 * 27 + 112 ** 2 * 32 * 288 +
                                  56 ** 2 * 32 * 288 + 112 ** 2 * 32 * 288 +
                                  224 ** 2 * 3 * 288)
