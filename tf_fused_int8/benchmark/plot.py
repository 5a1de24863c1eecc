"""Plots ours / best peer per row: `python plot.py rows.json out.png`.

Standalone (json + matplotlib only), so that it runs in the project's venv or
in the peers' venv, whichever has matplotlib.
"""

import json
import sys


def main(data, out):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  with open(data) as f:
    rows = [r for r in json.load(f) if r["suite"] != "peak"]
  groups = {}
  for r in rows:
    groups.setdefault((r["layer"], r["batch"], r["threads"]), []).append(r)
  labels, best, exact = [], [], []
  for (layer, batch, threads), group in groups.items():
    ours = [r for r in group if r["impl"] == "ours" and r["mode"] == "graph"
            and not r["forced"] and r["gops"]]
    others = [r for r in group if r["impl"] != "ours" and r["gops"]]
    if not ours or not others:
      continue
    g = ours[0]["gops"]
    labels.append(f"{layer}\nb{batch} t{threads}")
    best.append(g / max(r["gops"] for r in others))
    ex = [r["gops"] for r in others if r["exact"] is True]
    exact.append(g / max(ex) if ex else 0.0)
  fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(labels)), 4.5))
  xs = range(len(labels))
  ax.bar([x - 0.2 for x in xs], best, 0.4, label="ours / best peer")
  ax.bar([x + 0.2 for x in xs], exact, 0.4, label="ours / best exact peer")
  ax.axhline(1.0, color="k", lw=0.8)
  ax.set_xticks(list(xs))
  ax.set_xticklabels(labels, rotation=90, fontsize=7)
  ax.set_ylabel("speed ratio (GOPS)")
  ax.legend()
  fig.tight_layout()
  fig.savefig(out, dpi=120)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1], sys.argv[2]))
