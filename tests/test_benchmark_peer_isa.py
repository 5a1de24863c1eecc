"""--peer_isa: the benchmark's peers shown a CPU with fewer int8 instructions.

workers/cpuid_mask.c makes CPUID fault and answers it with the wider
instruction sets' feature bits cleared. These tests build it with cc, run a
small C program under it and compare what that program reads with the real
CPUID, bit by bit, against this file's own list of the bits each name must
hide (Intel SDM vol. 2, CPUID leaf 7); and run the benchmark CLI with a peer
limited. On a CPU without CPUID faulting they check that the library says so
and the CLI refuses, since a limited run cannot happen there.
"""

import os
import platform
import re
import subprocess
import sys
import types

import pytest

from tf_fused_int8.benchmark import cli
from test_benchmark import QUICK, _cpu_flags, _run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tf_fused_int8", "benchmark", "workers",
                   "cpuid_mask.c")

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() != "x86_64",
    reason="CPUID masking is for x86-64 Linux")

# (leaf, subleaf, register) -> bit -> feature, per Intel's SDM.
LEAF7 = {
    (0, "ebx"): {16: "avx512f", 17: "avx512dq", 21: "avx512ifma",
                 26: "avx512pf", 27: "avx512er", 28: "avx512cd",
                 30: "avx512bw", 31: "avx512vl"},
    (0, "ecx"): {1: "avx512vbmi", 6: "avx512vbmi2", 11: "avx512vnni",
                 12: "avx512bitalg", 14: "avx512vpopcntdq"},
    (0, "edx"): {2: "avx512_4vnniw", 3: "avx512_4fmaps",
                 8: "avx512_vp2intersect", 22: "amx_bf16", 23: "avx512fp16",
                 24: "amx_tile", 25: "amx_int8"},
    (1, "eax"): {4: "avx_vnni", 5: "avx512_bf16", 21: "amx_fp16",
                 23: "avx_ifma"},
    (1, "edx"): {4: "avx_vnni_int8", 5: "avx_ne_convert", 8: "amx_complex",
                 10: "avx_vnni_int16", 19: "avx10"},
}
# Kept under every name: what an AVX2 CPU has.
KEPT = {(0, "ebx"): {3: "bmi1", 5: "avx2", 8: "bmi2"}}
HIDDEN = {
    "avx2": {name for bits in LEAF7.values() for name in bits.values()},
    "avxvnni": {name for bits in LEAF7.values() for name in bits.values()
                if name != "avx_vnni"},
    "avx512vnni": {"amx_bf16", "amx_tile", "amx_int8", "amx_fp16",
                   "amx_complex", "avx512fp16", "avx10"},
}

PROBE_C = r"""
#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static void show(const char* who) {
  unsigned a, b, c, d, a1, b1, c1, d1;
  __cpuid_count(7, 0, a, b, c, d);
  __cpuid_count(7, 1, a1, b1, c1, d1);
  printf("%s %u %u %u %u %u %u %u %u\n", who, a, b, c, d, a1, b1, c1, d1);
  fflush(stdout);
}
static void* thread_main(void* arg) { show("thread"); return arg; }
int main(int argc, char** argv) {
  show("main");
  pthread_t t;
  pthread_create(&t, NULL, thread_main, NULL);
  pthread_join(t, NULL);
  if (argc > 1) { volatile int* p = (int*)(long)atoi(argv[1]); *p = 1; }
  return 0;
}
"""

REGS = ("eax", "ebx", "ecx", "edx")


CAN_FAULT = "cpuid_fault" in _cpu_flags()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  d = tmp_path_factory.mktemp("cpuid")
  lib, probe = str(d / "libmask.so"), str(d / "probe")
  subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared",
                  "-fPIC", "-o", lib, SRC], check=True)
  with open(d / "probe.c", "w") as f:
    f.write(PROBE_C)
  subprocess.run(["cc", "-O2", "-o", probe, str(d / "probe.c"), "-lpthread"],
                 check=True)
  return lib, probe


def _probe(built, mask, *args):
  lib, probe = built
  env = dict(os.environ)
  if mask is not None:
    env.update(LD_PRELOAD=lib, TF_FUSED_INT8_CPUID_MASK=mask)
  r = subprocess.run([probe, *args], env=env, capture_output=True, text=True,
                     check=False)
  seen = {}
  for line in r.stdout.splitlines():
    who, *v = line.split()
    v = [int(x) for x in v]
    seen[who] = {(0, reg): v[i] for i, reg in enumerate(REGS)}
    seen[who].update({(1, reg): v[4 + i] for i, reg in enumerate(REGS)})
  return r.returncode, seen


@pytest.mark.skipif(not CAN_FAULT, reason="no CPUID faulting on this CPU")
@pytest.mark.parametrize("mask", ["avx2", "avxvnni", "avx512vnni"])
def test_mask_hides_exactly_the_wider_instruction_sets(built, mask):
  rc, real = _probe(built, None)
  assert rc == 0
  rc, seen = _probe(built, mask)
  assert rc == 0
  assert set(seen) == {"main", "thread"}  # threads started later too
  for who in ("main", "thread"):
    for key in real["main"]:
      hide = 0
      for bit, name in LEAF7.get(key, {}).items():
        if name in HIDDEN[mask]:
          hide |= 1 << bit
      assert seen[who][key] == real["main"][key] & ~hide, (who, key, mask)
    for key, bits in KEPT.items():
      for bit in bits:
        assert (seen[who][key] >> bit & 1) == (real["main"][key] >> bit & 1)
  if mask in ("avx2", "avxvnni") and "avx512f" in _cpu_flags():
    assert not seen["main"][(0, "ebx")] >> 16 & 1  # not a no-op here
  if mask == "avxvnni" and "avx_vnni" in _cpu_flags():
    assert seen["main"][(1, "eax")] >> 4 & 1  # AVX-VNNI still shown


@pytest.mark.skipif(not CAN_FAULT, reason="no CPUID faulting on this CPU")
def test_other_segfaults_still_crash(built):
  """The SIGSEGV handler answers CPUID only: a null write still kills the
  process with SIGSEGV (after the CPUIDs before it were answered)."""
  rc, seen = _probe(built, "avx2", "0")
  assert rc == -11 and "main" in seen


def test_without_the_variable_nothing_changes(built):
  rc, real = _probe(built, None)
  rc2, seen = _probe(built, "")
  assert rc == rc2 == 0 and seen == real


@pytest.mark.skipif(CAN_FAULT, reason="this CPU can fault CPUID")
def test_cli_refuses_where_cpuid_cannot_fault():
  r = _run_cli(*QUICK, "--layers=6x7x8:3x3x16:1", "--peers=litert",
               "--peer_isa=avx2", "--noprobes")
  assert r.returncode != 0
  assert "cpuid_fault" in r.stderr + r.stdout


def test_check_peer_isa_names_the_reason():
  for state, words in ((-2, "cpuid_fault"), (-4, "replaced the SIGSEGV"),
                       (0, "not loaded"), (None, "state None")):
    with pytest.raises(cli.PeerIsaError, match=words):
      cli.check_peer_isa("litert", {"cpuid_mask_state": state}, "avx2")
  cli.check_peer_isa("litert", {"cpuid_mask_state": 1}, "avx2")


@pytest.mark.skipif(not CAN_FAULT, reason="no CPUID faulting on this CPU")
@pytest.mark.parametrize("isa,onednn", [("avx2", "AVX2"),
                                        ("avxvnni", "AVX2_VNNI")])
def test_cli_limits_the_peer_and_tfs_onednn(tmp_path, isa, onednn):
  """litert (the project venv's TFLite) runs limited; our forced row of the
  same instruction set gets its ratios against the peers; TF's oneDNN
  follows --peer_isa."""
  if isa == "avxvnni" and "avx_vnni" not in _cpu_flags():
    pytest.skip("our avxvnni path needs AVX-VNNI on this CPU")
  r = _run_cli(*QUICK, "--layers=6x7x8:3x3x16:1", "--peers=litert",
               f"--paths={isa}", f"--peer_isa={isa}", "--noprobes",
               "--notf_int8")
  assert r.returncode == 0, r.stderr[-4000:]
  assert (f"note: peers: their CPUID says {isa} is this CPU's widest int8 "
          "instruction set") in r.stdout, r.stdout
  assert f"TF's oneDNN limited to {onednn} " in r.stdout + " ", r.stdout
  header = next(l for l in r.stdout.splitlines() if l.startswith("layer "))
  assert f"{isa} vs best" in header and f"{isa} vs exact" in header
  (row,) = [l for l in r.stdout.splitlines() if l.startswith("6x7x8 ")]
  cells = dict(zip(re.split(r"\s{2,}", header.strip()),
                   re.split(r"\s{2,}", row.strip())))
  assert cells["check"] == "exact", row
  assert cells["litert GOPS"].isdigit(), row  # the limited peer ran
  assert cells[f"{isa} GOPS"].isdigit(), row
  assert cells[f"{isa} vs best"].endswith("x"), row


def test_usage_errors():
  r = _run_cli(*QUICK, "--peer_isa=avx2", "--peers=")
  assert r.returncode != 0 and "no peer is selected" in r.stderr, r.stderr
  r = _run_cli(*QUICK, "--peer_isa=sse", "--peers=litert")
  assert r.returncode != 0 and "peer_isa" in r.stderr


def test_peer_env_keeps_what_the_environment_preloads_first(monkeypatch):
  """The mask library goes after LD_PRELOAD's entries: a sanitizer runtime
  (tools/asan_check.sh preloads libasan and libubsan) must stay first, or
  the peer's worker aborts at start."""
  monkeypatch.setattr(cli, "FLAGS", types.SimpleNamespace(peer_isa="avx2"))
  env = cli.peer_env({"LD_PRELOAD": "/x/libasan.so /x/libubsan.so", "A": "1"}, "/w/mask.so")
  assert env["LD_PRELOAD"] == "/x/libasan.so /x/libubsan.so:/w/mask.so"
  assert env["A"] == "1" and env["TF_FUSED_INT8_CPUID_MASK"] == "avx2"
  assert cli.peer_env({}, "/w/mask.so")["LD_PRELOAD"] == "/w/mask.so"
  assert cli.peer_env({"LD_PRELOAD": "a.so:b.so"}, "/w/m.so")["LD_PRELOAD"] == "a.so:b.so:/w/m.so"
