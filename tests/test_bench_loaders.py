"""The bench's own BPF loaders (bench/floor/, bench/primitives/) load and attach on this kernel,
give a figure for every program they hold, and leave no program attached behind them. (Their
timings are the bench's business, never a test's: only that each one was measured.)"""
import json
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402

pytestmark = pytest.mark.needs_root

BENCH = ROOT / "bench"


def attached(names):
    """Which of these program names are attached through a link now (bpftool names each program in
    full, from its BTF)."""
    links = json.loads(subprocess.run(["bpftool", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout or "[]")
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout or "[]")
    by_id = {p["id"]: p.get("name", "") for p in progs}
    return sorted(by_id[l["prog_id"]] for l in links if by_id.get(l["prog_id"]) in names)


def section_programs(src):
    """The names of the programs a BPF C file defines (one SEC per program)."""
    text = src.read_text()
    return re.findall(r'SEC\("tp_btf/[a-z_]+"\)\s*\nint\s+(\w+)\(', text)


def test_the_primitives_bench_measures_every_primitive_and_leaves_nothing_attached():
    obj = harness.build_bpf("primitives.bpf.o", BENCH / "primitives" / "primitives.bpf.c")
    loop = harness.build_c("primitives-loop", BENCH / "primitives" / "loop.c")
    names = section_programs(BENCH / "primitives" / "primitives.bpf.c")
    cp = subprocess.run([sys.executable, str(BENCH / "primitives" / "primitives.py"), str(obj), str(loop),
                         "--calls", "20000", "--rounds", "1"], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    r = json.loads(cp.stdout)
    assert "empty" in names and len(names) >= 10, names
    assert set(r["primitives"]) == set(names) - {"empty"}, (r["primitives"], names)
    # each a number of ns (one short round: its sign is noise, which is the bench's business)
    assert all(isinstance(v, float) for v in [r["floor_ns"], *r["primitives"].values()]), r
    assert not attached(names), "a program of the bench is still attached"


def test_the_floor_loader_attaches_every_hook_and_detaches_at_sigterm():
    obj = harness.build_bpf("floor.bpf.o", BENCH / "floor" / "floor.bpf.c")
    names = section_programs(BENCH / "floor" / "floor.bpf.c")
    assert len(names) == 5 and not attached(names), names
    proc = subprocess.Popen([sys.executable, str(BENCH / "floor" / "floor.py"), str(obj)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("floor: attached ") and set(line.split()[2:]) == set(names), (line, names)
        assert attached(names) == sorted(names)
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0
    deadline = time.monotonic() + 5
    while attached(names) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not attached(names), "the floor's programs are still attached"
