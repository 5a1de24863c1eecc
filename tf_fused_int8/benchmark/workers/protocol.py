"""The benchmark's worker protocol and timing (TF-free: runs in any venv).

A worker is one process per implementation family and thread count
(worker.py). The parent writes one JSON command per line to its stdin and
reads one JSON reply per command from its stdout, on a line tagged with TAG
(libraries may print to stdout too; everything untagged is ignored). Keeping
the workers alive lets the parent interleave the timed repeats of every
implementation, across processes, so that load from other processes on a
shared machine hits all of them alike.

Commands ({"op": ...}): see Worker in worker.py. Replies: {"ok": true, ...}
or {"ok": false, "error": "..."}.
"""

import gc
import json
import sys
import time
import traceback

TAG = "@@TFI-BENCH@@ "


def send(obj, stream=None):
  stream = stream or sys.stdout
  stream.write("\n" + TAG + json.dumps(obj) + "\n")
  stream.flush()


def parse_reply(line):
  """The JSON object on a tagged line, or None for any other line."""
  i = line.find(TAG)
  if i < 0:
    return None
  return json.loads(line[i + len(TAG):])


def serve(handlers, stdin=None):
  """Answers commands until "quit" (or end of input)."""
  stdin = stdin or sys.stdin
  for line in stdin:
    line = line.strip()
    if not line:
      continue
    msg = json.loads(line)
    op = msg.get("op")
    if op == "quit":
      send({"ok": True})
      return
    handler = handlers.get(op)
    if handler is None:
      send({"ok": False, "error": f"unknown command {op!r}"})
      continue
    try:
      reply = handler(msg) or {}
      reply.setdefault("ok", True)
    except Exception as e:  # pylint: disable=broad-except
      reply = {"ok": False, "error": f"{type(e).__name__}: {e}",
               "traceback": traceback.format_exc()[-4000:]}
    send(reply)


def calibrate(fn, min_time):
  """Calls per timed repeat so that one repeat lasts about min_time."""
  n = 1
  while True:
    dt = time_calls(fn, n)
    if dt * n >= min_time or n >= 1 << 20:
      return n
    n = max(n + 1, min(n * 10, int(n * min_time / max(dt * n, 1e-7) * 1.1) + 1))


def time_calls(fn, n):
  """Seconds per call of n back-to-back calls of fn.

  Python's garbage collector is off meanwhile (as in timeit): a collection of
  a big object graph would land in whichever loop happens to trigger it.
  """
  enabled = gc.isenabled()
  gc.disable()
  try:
    t0 = time.perf_counter()
    for _ in range(n):
      fn()
    return (time.perf_counter() - t0) / n
  finally:
    if enabled:
      gc.enable()


def error_text(e):
  """One line for a failed implementation: the exception's type and the
  first line of its message (for TF's "Graph execution error:" the op's
  own message, the line that says what went wrong)."""
  lines = [l.strip() for l in str(e).splitlines() if l.strip()]
  line = lines[0] if lines else ""
  if line.startswith("Graph execution error") and len(lines) > 1:
    # The rest is "Detected at node ...", the traceback's "File ..." lines,
    # the message, and "[[{{node ...}}]]".
    line = next((l for l in lines[1:]
                 if not l.startswith(("Detected at", "File ", "[["))), line)
  return f"{type(e).__name__}: {line[:300]}"


def setup_each(builders):
  """{impl: build()} for builders {impl: build}, each callable twice as a warm
  up; a build or warm up that raises is reported, not fatal.

  Twice: our eager rows (a QuantizedModel) run eagerly on a shape's first
  call and trace on the second, whose constant weights (NASNetMobile's five
  requantizing 1x1 filters) are new buffers to our weight caches; with one
  warm up call, the models suite reported those five misses as "packed
  weights again while timing".

  Returns (callables, status) with status[impl] None or error_text.
  """
  fns, status = {}, {}
  for impl, build in builders.items():
    try:
      fn = build()
      fn()
      fn()
      fns[impl] = fn
      status[impl] = None
    except Exception as e:  # pylint: disable=broad-except
      status[impl] = error_text(e)
  return fns, status


class KeyedRuns:
  """The worker commands every family shares, over ``self.runs``: {setup
  key: {impl: callable}} (what setup_each builds for each setup call).
  setup_model's default: no model implementations."""

  def callable(self, key, impl):
    return self.runs[key][impl]

  def release(self, key):
    self.runs.pop(key, None)

  def setup_model(self, key, model, batch):
    del key, model, batch
    return dict(impls={})
