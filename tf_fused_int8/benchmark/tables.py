"""The benchmark's printed tables (from the JSON rows)."""

# Implementations compared with ours; "exact" peers are those whose probes
# said exact on this CPU (tf_fp32 is float: never an exact int8 peer).
OTHER_ORDER = ("tf_int8", "tf_fp32", "litert", "onnxruntime_u8",
               "onnxruntime_s8", "torch_x86", "torch_onednn", "openvino_fp32",
               "openvino_int8")
SHORT = {"tf_int8": "tf-int8", "tf_fp32": "tf-fp32", "litert": "litert",
         "onnxruntime_u8": "ort-u8", "onnxruntime_s8": "ort-s8",
         "torch_x86": "torch-x86", "torch_onednn": "torch-onednn",
         "openvino_fp32": "ov-fp32", "openvino_int8": "ov-int8"}


def render(header, rows):
  widths = [max([len(h)] + [len(r[i]) for r in rows])
            for i, h in enumerate(header)]
  def line(cells):
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(cells, widths)))
  return "\n".join([line(header), line(["-" * w for w in widths])] +
                   [line(r) for r in rows])


def _ms(v):
  return "-" if v is None else f"{v:.3f}"


def _num(v, fmt="{:.0f}"):
  return "-" if v is None else fmt.format(v)


def _ratio(num, den):
  return "-" if not num or not den else f"{num / den:.2f}x"


def _groups(rows):
  groups = {}
  for r in rows:
    groups.setdefault((r["layer"], r["batch"], r["threads"]), []).append(r)
  return groups


def _ours(group, mode="graph", forced=None):
  for r in group:
    if r["impl"] == "ours" and r["mode"] == mode and r["forced"] == forced:
      return r
  return None


def _other(group, impl):
  for r in group:
    if r["impl"] == impl:
      return r
  return None


def best_peers(group):
  """(best row, best exact row) among the other implementations timed."""
  timed = [r for r in group if r["impl"] != "ours" and r["gops"]]
  best = max(timed, key=lambda r: r["gops"], default=None)
  exact = max((r for r in timed if r["exact"] is True),
              key=lambda r: r["gops"], default=None)
  return best, exact


def layer_table(rows, paths):
  groups = _groups(rows)
  present = [i for i in OTHER_ORDER if any(r["impl"] == i for r in rows)]
  # Memory columns where a row has them (depthwise layers under --peak).
  memory = any(r.get("mem_pct") or r.get("copy_pct") for r in rows)
  # The epilogue-aware limit where a row has it (--peak).
  limit = any(r.get("limit_pct") for r in rows)
  header = ["layer", "batch", "thr", "kernel", "ours ms", "ours GOPS", "%peak"]
  if limit:
    header += ["%lim"]
  if memory:
    header += ["ours GB/s", "%mem", "%copy"]
  header += ["eager ms"]
  header += [f"{p} GOPS" for p in paths]
  header += [f"{SHORT[i]} GOPS" for i in present]
  header += ["best peer", "vs best", "best exact", "vs exact"]
  for p in paths:
    header += [f"{p} vs best", f"{p} vs exact"]
  header += ["check"]
  out = []
  for (layer, batch, threads), group in groups.items():
    ours = _ours(group)
    eager = _ours(group, "eager")
    forced = [_ours(group, "graph", p) for p in paths]
    g = ours["gops"] if ours else None
    cells = [layer, str(batch), str(threads),
             (ours or {}).get("cpu_kernel") or "-",
             _ms(ours and ours["ms"]), _num(g),
             _num(ours and ours["peak_pct"], "{:.0f}%")]
    if limit:
      cells += [_num(ours and ours.get("limit_pct"), "{:.0f}%")]
    if memory:
      cells += [_num(ours and ours.get("gbps"), "{:.1f}"),
                _num(ours and ours.get("mem_pct"), "{:.0f}%"),
                _num(ours and ours.get("copy_pct"), "{:.0f}%")]
    cells += [_ms(eager and eager["ms"])]
    for r in forced:
      cells.append(_num(r and r["gops"]))
    for impl in present:
      r = _other(group, impl)
      mark = "*" if r and r["exact"] is False else ""
      cells.append(_num(r and r["gops"]) + mark if r and r["gops"] else
                   ("err" if r and r["error"] else "-"))
    best, exact = best_peers(group)
    cells += [SHORT[best["impl"]] if best else "-",
              _ratio(g, best and best["gops"]),
              SHORT[exact["impl"]] if exact else "-",
              _ratio(g, exact and exact["gops"])]
    for r in forced:
      pg = r and r["gops"]
      cells += [_ratio(pg, best and best["gops"]),
                _ratio(pg, exact and exact["gops"])]
    cells.append((ours or {}).get("check") or "-")
    out.append(cells)
  legend = ("GOPS = 2 * MACs / time; ours = in a tf.function (several ops per "
            "call), eager = one eager call; '*' = not exact on this CPU (see "
            "the exactness table); vs = ours GOPS / theirs (P vs: the "
            "forced path P's); %peak = ours vs "
            "the --peak limit of the path that ran; check = ours vs TF's int8 "
            "kernel bit for bit.")
  if limit:
    legend += (" %lim = the layer's limit over ours time: its MACs at that "
               "--peak limit plus its outputs at the path's epilogue limit "
               "(the contract's requantization, once an output).")
  if memory:
    legend += (" Depthwise rows under --peak: GB/s = (input + output bytes) "
               "/ ours time; %mem = that against the memory limit (a copy "
               "far beyond the caches), %copy = against the same copy loop "
               "moving this layer's own input and output bytes, on as many "
               "threads (from the cache level where they live).")
  return render(header, out) + "\n" + legend


def exactness_table(rows):
  per_layer = {}
  impls = []
  for r in rows:
    if r["exact_text"] is None:
      continue
    name = r["impl"] if r["impl"] != "ours" else (
        "ours" + ("@" + r["forced"] if r["forced"] else "") +
        (" eager" if r["mode"] == "eager" else ""))
    if name not in impls:
      impls.append(name)
    per_layer.setdefault(r["layer"], {})[name] = r["exact_text"]
  if not per_layer:
    return ""
  header = ["layer"] + [SHORT.get(i, i) for i in impls]
  body = [[layer] + [v.get(i, "-") for i in impls]
          for layer, v in per_layer.items()]
  return ("exactness (probes at batch 1: activations at their maximum with "
          "weights -128, and random; 'off by N' = N output levels from the "
          "exact result)\n" + render(header, body))


# Our rows of one (model, batch, threads), after the tf.function's: its
# concrete function, then InferenceRunner, then the eager call (each row's
# "mode"; the label that prefixes its kernel).
OURS_MODE_ORDER = {"concrete": 1, "runner": 2, "eager": 3}


def models_table(rows, models):
  groups = _groups(rows)
  present = [i for i in ("tf_fp32", "litert", "openvino_fp32", "openvino_int8")
             if any(r["impl"] == i for r in rows)]
  header = ["model", "batch", "thr", "kernel", "ours ms"]
  header += [f"{SHORT[i]} ms" for i in present]
  header += [f"vs {SHORT[i]}" for i in present]
  out = []
  for (model, batch, threads), group in groups.items():
    # The auto-selected path in a tf.function first, then its concrete
    # function, then through InferenceRunner, then each --paths path forced
    # (tf.function rows, then runner rows); a stable sort keeps the run's
    # order within each.
    ours_rows = sorted((r for r in group if r["impl"] == "ours"),
                       key=lambda r: (bool(r["forced"]),
                                      OURS_MODE_ORDER.get(r.get("mode"), 0)))
    theirs = [_other(group, i) for i in present]
    for ours in ours_rows or [None]:
      ms = ours["ms"] if ours and not ours["error"] else None
      kernel = (ours or {}).get("cpu_kernel") or "-"
      if ours and ours["forced"]:
        kernel = "forced " + kernel
      if ours and ours.get("mode") in OURS_MODE_ORDER:
        kernel = ours["mode"] + " " + kernel
      cells = [model, str(batch), str(threads), kernel,
               _ms(ms) if not (ours and ours["error"]) else "err"]
      cells += [_ms(r and r["ms"]) if not (r and r["error"]) else "err"
                for r in theirs]
      cells += [_ratio(r and r["ms"], ms) for r in theirs]
      out.append(cells)
  lines = [render(header, out),
           "vs X = X's time / ours (above 1: ours is faster); ours = "
           "quantize_model + fuse_conv_sequences, in a tf.function; 'concrete P' "
           "= that tf.function's concrete function for the input's signature, "
           "called directly (as a SavedModel signature is); 'runner "
           "P' = the same model through tf_fused_int8.InferenceRunner (frozen, "
           "run in the calling thread, numpy in and out); 'eager P' = "
           "the model called eagerly, model(x, training=False) (a "
           "QuantizedModel: from a shape's second call its traced function); "
           "'forced P' = the same model with TF_FUSED_INT8_CPU_KERNEL=P "
           "(--paths)."]
  for name, info in models.items():
    lines.append(f"{name}: {info['macs'] / 1e9:.2f} GMACs per image, "
                 f"{info['int8_regions']} int8 region(s), cosine(float, int8 "
                 f"logits) = {info['cosine']:.4f}")
    for note in info.get("stays_float") or []:
      lines.append(f"  {name}: " + (note if len(note) <= 300 else
                                    note[:297] + "..."))
  return "\n".join(lines)


def peak_table(rows):
  loops, epilogues, memory = {}, {}, {}
  for r in rows:
    if r["suite"] == "peak":
      kind = (memory if "gbps" in r else
              epilogues if r["layer"].startswith("epilogue_") else loops)
      kind.setdefault(r["layer"], {})[r["threads"]] = r
  if not loops and not epilogues and not memory:
    return ""
  threads = sorted({t for v in list(loops.values()) + list(epilogues.values()) +
                    list(memory.values()) for t in v})

  def table(title, first, unit, key, limits, fmt="{:.0f}"):
    header = [first] + [f"{t} thr {unit}" for t in threads]
    body = [[name] + [(_num(v[t][key], fmt) if v.get(t) and v[t][key] else "n/a")
                      for t in threads] for name, v in limits.items()]
    return title + "\n" + render(header, body)

  parts = []
  if loops:
    parts.append(table("peak (register-only loops of one instruction, 2 ops "
                       "per multiply-accumulate; n/a = not on this CPU)",
                       "instruction limit", "GOPS", "gops", loops))
  if epilogues:
    parts.append(table("epilogue (the contract's requantization of int32 "
                       "accumulators to int8, its leanest form, on registers; "
                       "G outputs/s)", "epilogue limit", "G out/s", "gops",
                       epilogues, "{:.1f}"))
  if memory:
    parts.append(table("memory (a loop of ymm loads and plain stores reading "
                       "256 MiB and writing 256 MiB; GB/s = bytes read + "
                       "written per second)", "memory limit", "GB/s", "gbps",
                       memory))
  return "\n\n".join(parts)


def errors_list(rows):
  seen = []
  for r in rows:
    if r.get("error") and r["suite"] != "peak":
      name = r["impl"] + ("@" + r["forced"] if r.get("forced") else "")
      line = f"{name}: {r['error']}"
      if line not in seen:
        seen.append(line)
  return "\n".join("error: " + l for l in seen)


def format_all(rows, impls, models, paths, suite):
  del impls
  parts = [peak_table(rows)]
  body = [r for r in rows if r["suite"] != "peak"]
  if suite == "models":
    parts.append(models_table(body, models))
  else:
    parts.append(layer_table(body, paths))
    parts.append(exactness_table(body))
  parts.append(errors_list(body))
  return "\n\n".join(p for p in parts if p)
