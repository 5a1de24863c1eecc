"""tools/bench/bench_sequence (//:bench_sequence), the TF-free chain timer.

Not a speed test: each run is a fraction of a second. What is checked is that
the chain is wired as the sequence op wires it (each step reads the step
before, a "+side" step a residual block's input), that its two-thread
parallel-for covers every unit of every step exactly once, and that the
buffers it hands on (BENCH_SEQ_RECYCLE=1, as TF's allocator does) are never
one a later step still reads: BENCH_SEQ_CHECK=1 compares every step's output
with the reference kernel's chain.
"""

import os
import subprocess

import pytest

import op_harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bazel-bin", "bench_sequence")

# A MobileNetV2-like piece, in the step profiler's format: a stride-2 stem,
# two inverted residual blocks at 14x14 (the expansion 64 -> 384 is one that
# the x86 GEMMs split by rows on two threads: gemm_kernels.h's
# rows_first_small_filter), a 7x7 block (split by channels) and a global
# average as a 7x7 depthwise step.
STEPS = """\
node step us pct 1x28x28x3 3x3x3x64 s2
node step us pct 1x14x14x64 1x1x64x384
node step us pct 1x14x14x384 3x3x1x384 g384
node step us pct 1x14x14x384 1x1x384x64 +side
node step us pct 1x14x14x64 1x1x64x384
node step us pct 1x14x14x384 3x3x1x384 g384
node step us pct 1x14x14x384 1x1x384x64 +side
node step us pct 1x14x14x64 1x1x64x160
node step us pct 1x14x14x160 3x3x1x160 s2 g160
node step us pct 1x7x7x160 1x1x160x960
node step us pct 1x7x7x960 3x3x1x960 g960
node step us pct 1x7x7x960 1x1x960x160
node step us pct 1x7x7x160 7x7x1x160 g160
"""


@pytest.mark.skipif(not os.path.isfile(BENCH),
                    reason="bazel-bin/bench_sequence not built (bazel build //:all)")
@pytest.mark.parametrize("path", op_harness.kernel_paths())
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("recycle", ["0", "1"])
def test_bench_sequence_chain_equals_reference(tmp_path, path, threads, recycle):
  steps = tmp_path / "steps.txt"
  steps.write_text("a line that is not a step\n" + STEPS)
  env = dict(os.environ, BENCH_SEQ_CHECK="1", BENCH_SEQ_THREADS=threads,
             BENCH_SEQ_RECYCLE=recycle)
  r = subprocess.run([BENCH, str(steps), path, "0.05"], env=env,
                     capture_output=True, text=True, timeout=120, check=False)
  assert r.returncode == 0, (path, r.stdout, r.stderr)
  assert "steps: 13, their sum" in r.stdout, r.stdout
  assert "check: every step equal to the reference kernel" in r.stdout, r.stdout


@pytest.mark.skipif(not os.path.isfile(BENCH),
                    reason="bazel-bin/bench_sequence not built (bazel build //:all)")
def test_bench_sequence_refuses_a_file_without_steps(tmp_path):
  steps = tmp_path / "steps.txt"
  steps.write_text("no shapes here\n1x2x3 4x5\n")
  r = subprocess.run([BENCH, str(steps)], capture_output=True, text=True,
                     timeout=60, check=False)
  assert r.returncode == 2
  assert "no steps in" in r.stderr
