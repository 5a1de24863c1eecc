"""tools/bench/bench_core (//:bench_core), the TF-free profiling timer.

Not a speed test: each run is a fraction of a second, and what is checked is
that its two-thread parallel-for (a spinning helper claiming units from the
back while the caller claims from the front, as cc/tf/pool_parallel_for.cc
does) finishes and covers every unit exactly once. BENCH_CORE_CHECK=1 makes
the tool compare its last timed output with the reference kernel; a unit
skipped or run twice, or a hang like the one its claim counter once had,
fails here.
"""

import os
import subprocess

import pytest

import op_harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bazel-bin", "bench_core")

# N H W Ci K Co stride groups: a pointwise layer, a 3x3 layer over two
# images (the padded input where the path has one), a strided 5x5 with odd
# channels and a depthwise layer.
SHAPES = [
    "1 28 28 64 1 96 1 1",
    "2 28 28 64 3 64 1 1",
    "1 33 31 17 5 33 2 1",
    "1 28 28 48 3 48 1 48",
]


# Pointwise layers with a side input (BENCH_CORE_SIDE=1), as ResNet's
# residual adds: Co = 160 ends in a narrow block (the side prefetch of
# gemm_avx512vnni.cc crosses into it), Co = 1024 has sixteen full ones.
SIDE_SHAPES = [
    "2 28 28 64 1 160 1 1",
    "1 14 14 256 1 1024 1 1",
    "1 15 13 40 3 72 1 1",
]


@pytest.mark.skipif(not os.path.isfile(BENCH),
                    reason="bazel-bin/bench_core not built (bazel build //:all)")
@pytest.mark.parametrize("path", op_harness.kernel_paths())
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("side", ["0", "1"])
def test_bench_core_output_equals_reference(path, threads, side):
  env = dict(os.environ, BENCH_CORE_CHECK="1", BENCH_CORE_FILTERS="3",
             BENCH_CORE_THREADS=threads, BENCH_CORE_INLINE="0",
             BENCH_CORE_SIDE=side)
  for shape in SIDE_SHAPES if side == "1" else SHAPES:
    r = subprocess.run([BENCH] + shape.split() + [path, "0.05"], env=env,
                       capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0, (shape, path, r.stdout, r.stderr)
    assert "us/call" in r.stdout, r.stdout
    assert "check: equal to the reference kernel" in r.stdout, r.stdout
