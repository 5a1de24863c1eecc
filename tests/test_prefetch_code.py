"""The x86 GEMM kernels still contain their software prefetches.

Not a speed test: it disassembles the built library (objdump) and counts the
PREFETCHT0 / PREFETCHT1 instructions in each function that must have them.
Why: the prefetches change no bit of any result, so every other test stays
green without them, and they have been lost once already. Stop 43 moved the
side-input prefetch of gemm_avx512vnni.cc into a small inline helper; GCC
counted a function that only prefetches as free of side effects and deleted
its calls at -O2, and ResNet50's residual 1x1 layers at batch 8 were 3.5x
slower again (bench_core, 8x56x56x64 -> 256 with a cold side input: 1.3 ->
4.7-5.0 ms) until the helpers were made always_inline (gemm_isa_common.h).
Reproducing that change (PrefetchSideAhead plain `inline`) drops
DirectTiles' PREFETCHT0s from 5 to 1 and GemmTileZmm's from 4 to 0: both
rows below fail.

The minimums are the counts of GCC 12 (Debian 12, the CI's compiler) at the
head that added this test. Each row names where its prefetches come from;
a change that removes or merges prefetch sites on purpose updates the
minimum here and says why, with a measurement, in its commit.
"""

import platform
import re
import shutil
import subprocess

import pytest

# (function, instruction, minimum count, where the instructions come from).
# Function names as objdump -C prints them, up to the argument list.
EXPECTED = [
    ("tf_fused_int8::cpu::(anonymous namespace)::DirectTiles", "prefetcht0", 5,
     "side input rows 16 ahead (PrefetchSideAhead) and output rows 16 ahead "
     "(PrefetchOutputRows), gemm_avx512vnni.cc"),
    ("tf_fused_int8::cpu::(anonymous namespace)::DirectTiles", "prefetcht1", 1,
     "the next weights' lines (TileLineShare + PrefetchL2)"),
    ("tf_fused_int8::cpu::(anonymous namespace)::GemmTileZmm", "prefetcht0", 4,
     "side input rows 16 ahead (PrefetchSideAhead: each row's first and "
     "last line, in this block's rows and the next block's)"),
    ("tf_fused_int8::cpu::(anonymous namespace)::GemmTileZmm", "prefetcht1", 3,
     "the next weights (SetTilePrefetch, PrefetchL2) and the filter rows "
     "that are verified or packed next"),
    ("void tf_fused_int8::cpu::(anonymous namespace)::MicroTile<6, 4, true, false>",
     "prefetcht1", 1,
     "the next (panel, block)'s weights, one line per k-group (tc.pf)"),
    ("void tf_fused_int8::cpu::(anonymous namespace)::MicroTile<12, 2, true, false>",
     "prefetcht1", 1, "the same, narrow blocks"),
    ("void tf_fused_int8::cpu::(anonymous namespace)::MicroTile<12, 2, true, true>",
     "prefetcht1", 1, "the same, narrow blocks whose last zmm runs as ymm "
     "(kHalf: 24 channels)"),
    ("tf_fused_int8::cpu::(anonymous namespace)::GemmTileAmx", "prefetcht1", 32,
     "the weight tiles two block pairs ahead, 32 lines per K step, in every "
     "MicroTile<MT, NT> inlined into it (kPrefetchAhead, gemm_amx.cc)"),
    ("tf_fused_int8::cpu::(anonymous namespace)::GemvZmmImpl", "prefetcht0", 8,
     "the filter's column strip 16 rows ahead of the GEMV's K loop "
     "(GemvRows)"),
    ("bool tf_fused_int8::cpu::(anonymous namespace)::GemmTileYmm<"
     "tf_fused_int8::cpu::(anonymous namespace)::MaddPolicy>", "prefetcht0", 1,
     "output rows ahead (PrefetchOutputRows), gemm_ymm.h, avx2"),
    ("bool tf_fused_int8::cpu::(anonymous namespace)::GemmTileYmm<"
     "tf_fused_int8::cpu::(anonymous namespace)::MaddPolicy>", "prefetcht1", 2,
     "the next weights and the verified filter rows (PrefetchL2), avx2"),
    ("bool tf_fused_int8::cpu::(anonymous namespace)::GemmTileYmm<"
     "tf_fused_int8::cpu::(anonymous namespace)::VnniPolicy>", "prefetcht0", 1,
     "output rows ahead (PrefetchOutputRows), avxvnni"),
    ("bool tf_fused_int8::cpu::(anonymous namespace)::GemmTileYmm<"
     "tf_fused_int8::cpu::(anonymous namespace)::VnniPolicy>", "prefetcht1", 2,
     "the next weights and the verified filter rows (PrefetchL2), avxvnni"),
]

_HEADER = re.compile(r"^[0-9a-f]+ <(.*)>:$")


def _functions(library):
  """{demangled name without its argument list: [instruction mnemonics]},
  the instructions of every copy of the function (GCC may emit clones)."""
  out = subprocess.run(
      ["objdump", "-d", "-C", "--no-show-raw-insn", library],
      check=True, capture_output=True, text=True).stdout
  funcs = {}
  current = None
  for line in out.splitlines():
    m = _HEADER.match(line)
    if m:
      name = m.group(1)
      # Cut the argument list: the first "(" that follows the name (a
      # "(anonymous namespace)" inside the name is part of it).
      cut = re.sub(r"\(anonymous namespace\)", "\0", name)
      cut = cut.split("(", 1)[0].replace("\0", "(anonymous namespace)")
      current = funcs.setdefault(cut, [])
      continue
    if current is None:
      continue
    parts = line.split("\t")
    if len(parts) >= 2 and parts[0].strip().endswith(":"):
      current.append(parts[1].split()[0] if parts[1].split() else "")
  return funcs


@pytest.fixture(scope="module")
def functions():
  if platform.machine() not in ("x86_64", "AMD64"):
    pytest.skip("the x86 kernels are only built on x86-64")
  if shutil.which("objdump") is None:
    pytest.skip("objdump (binutils) is not installed")
  from tf_fused_int8 import _loader  # pylint: disable=g-import-not-at-top
  funcs = _functions(_loader.library_path())
  if not any("GemmTileZmm" in name for name in funcs):
    pytest.skip("the library has no symbol table (stripped)")
  return funcs


@pytest.mark.parametrize("name,insn,minimum,why", EXPECTED,
                         ids=[f"{e[0].split('::')[-1]}-{e[1]}" for e in EXPECTED])
def test_prefetches_present(functions, name, insn, minimum, why):
  assert name in functions, (
      f"{name} is not in the library any more: update EXPECTED (and check "
      f"that its prefetches moved with it)")
  count = functions[name].count(insn)
  assert count >= minimum, (
      f"{name} has {count} {insn} (expected at least {minimum}: {why}). A "
      f"prefetch helper that is not always_inline may have been deleted by "
      f"the compiler (gemm_isa_common.h); check the disassembly.")


def test_the_count_sees_a_known_instruction(functions):
  """The parser reads mnemonics: every micro-tile has VPDPBUSDs."""
  insns = functions[
      "void tf_fused_int8::cpu::(anonymous namespace)::MicroTile<6, 4, true, false>"]
  assert insns.count("vpdpbusd") >= 24
