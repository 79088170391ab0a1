"""Load the empty programs of floor.bpf.o, attach them, hold them until SIGTERM/SIGINT.

  python floor.py floor.bpf.o

Uses the system's libbpf (libbpf1, 1.x) through ctypes. Prints "floor: attached
NAME ..." once every program is attached; exits 1 with the reason if one is not.
The programs stay loaded as long as this process holds their file descriptors
(the bench reads their run_cnt/run_time_ns from /proc/PID/fdinfo).
"""
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bpfctl import fail as bpf_fail, lib, programs  # noqa: E402


def fail(what):
    bpf_fail("floor", what)


def main():
    obj = lib.bpf_object__open_file(sys.argv[1].encode(), None)
    if not obj:
        fail(f"open {sys.argv[1]}")
    if lib.bpf_object__load(obj):
        fail("load")
    links, names = [], []
    for name, prog in programs(obj).items():
        link = lib.bpf_program__attach(prog)
        if not link:
            fail(f"attach {name}")
        links.append(link)
        names.append(name)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    print("floor: attached " + " ".join(names), flush=True)
    while not stop:
        signal.pause()
    for link in links:
        lib.bpf_link__destroy(link)
    lib.bpf_object__close(obj)


if __name__ == "__main__":
    main()
