"""`python -m tf_fused_int8.benchmark`: see tf_fused_int8/benchmark/__init__.py."""

import os

# Before numpy loads: its OpenBLAS pool's idle workers would spin on a core
# the timed kernels need (numpy is not what is timed).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # pylint: disable=g-import-not-at-top

from tf_fused_int8.benchmark import cases  # pylint: disable=g-import-not-at-top
from tf_fused_int8.benchmark import cli  # pylint: disable=g-import-not-at-top

cli.define_flags()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    cli.validate()
  except (cases.SpecError, ValueError) as e:
    raise app.UsageError(str(e))
  try:
    cli.run()
  except cli.PeerIsaError as e:
    raise SystemExit(f"error: {e}")


if __name__ == "__main__":
  app.run(main)
