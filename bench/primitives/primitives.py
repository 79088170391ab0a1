"""The cost of each BPF primitive on this machine (bench/primitives/primitives.bpf.c).

  python primitives.py primitives.bpf.o LOOP [--calls N] [--rounds R]

LOOP is the built loop.c. For every program but `empty`, in interleaved rounds: time N getppid(2)
calls of LOOP with no program, with `empty` attached and with the program attached; the
primitive's cost is the program's ns per call less `empty`'s (the median over rounds), and
`empty` is the floor (a tp_btf program's call and its filter). Prints one JSON object: {"floor_ns",
"primitives": {name: ns}, "spread": {name: (min, max)}}. Uses the system's libbpf through ctypes,
as bench/floor/floor.py does.
"""
import argparse
import ctypes
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bpfctl import fail as bpf_fail, lib, programs  # noqa: E402


def fail(what):
    bpf_fail("primitives", what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("obj")
    ap.add_argument("loop")
    ap.add_argument("--calls", type=int, default=500000)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    loop = subprocess.Popen([a.loop], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = loop.stdout.readline().split()
        if first[:1] != ["ready"]:
            sys.exit(f"primitives: {a.loop} did not start")
        tid = int(first[1])
        obj = lib.bpf_object__open_file(a.obj.encode(), None)
        if not obj:
            fail(f"open {a.obj}")
        m = lib.bpf_object__next_map(obj, None)
        while m:
            if lib.bpf_map__name(m).decode().endswith(".rodata"):
                size = ctypes.c_size_t()
                data = lib.bpf_map__initial_value(m, ctypes.byref(size))
                ctypes.c_uint32.from_address(data).value = tid
            m = lib.bpf_object__next_map(obj, m)
        if lib.bpf_object__load(obj):
            fail("load")
        # the loop's entry among a few thousand others, as a node's threads map holds
        by_tid = lib.bpf_object__find_map_by_name(obj, b"by_tid")
        value = ctypes.create_string_buffer(lib.bpf_map__value_size(by_tid))
        for k in [tid] + [tid + 7 * i for i in range(1, 3000)]:
            key = ctypes.c_uint32(k)
            if lib.bpf_map__update_elem(by_tid, ctypes.byref(key), 4, value, len(value), 0):
                fail("fill by_tid")
        progs = programs(obj)

        def timed(prog):
            link = None
            if prog:
                link = lib.bpf_program__attach(progs[prog])
                if not link:
                    fail(f"attach {prog}")
            try:
                loop.stdin.write(f"{a.calls}\n")
                loop.stdin.flush()
                return float(loop.stdout.readline())
            finally:
                if link:
                    lib.bpf_link__destroy(link)

        timed(None)  # warm up
        floor, over = [], {name: [] for name in progs if name != "empty"}
        for _ in range(a.rounds):
            for name in over:
                none, empty, it = timed(None), timed("empty"), timed(name)
                floor.append(empty - none)
                over[name].append(it - empty)
        lib.bpf_object__close(obj)
        print(json.dumps({"floor_ns": statistics.median(floor), "calls": a.calls, "rounds": a.rounds,
                          "primitives": {k: statistics.median(v) for k, v in over.items()},
                          "spread": {k: (min(v), max(v)) for k, v in over.items()}}))
    finally:
        loop.stdin.close()
        loop.wait(10)


if __name__ == "__main__":
    main()
