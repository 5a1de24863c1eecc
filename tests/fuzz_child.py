"""Child process of test_fuzz.py: runs each case of a JSON file through the
raw op and prints one line per case. A crash shows as a missing 'done' line;
'start i' before each case tells which one crashed."""

import hashlib
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import fuzz_cases  # pylint: disable=g-import-not-at-top
import tf_fused_int8  # pylint: disable=g-import-not-at-top

RAW = tf_fused_int8.load_ops().fused_int8_conv2d_bias_activation


def run(case):
  a = fuzz_cases.make_arrays(case)

  def t(x):
    x = tf.constant(x)
    return tf.bitcast(x, tf.qint8) if case["dtype"] == "qint8" else x

  y = RAW(conv_input=t(a["conv_input"]), filter=t(a["filter"]),
          bias=a["bias"], side_input=t(a["side_input"]),
          conv_input_scale=a["conv_input_scale"],
          side_input_scale=a["side_input_scale"], strides=case["strides"],
          padding=case["padding"], dilations=case["dilations"],
          activation_mode=case["activation"])
  if y.dtype == tf.qint8:
    y = tf.bitcast(y, tf.int8)
  y = y.numpy()
  return y.shape, hashlib.sha256(y.tobytes()).hexdigest()


def main():
  cases = json.load(open(sys.argv[1]))
  for i, case in enumerate(cases):
    print(f"start {i}", flush=True)
    try:
      shape, digest = run(case)
      print(json.dumps({"i": i, "ok": True, "shape": list(shape), "sha": digest}), flush=True)
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
            TypeError, ValueError) as e:
      print(json.dumps({"i": i, "ok": False, "error": type(e).__name__,
                        "message": str(e)[:300]}), flush=True)
  print("done", flush=True)


if __name__ == "__main__":
  main()
