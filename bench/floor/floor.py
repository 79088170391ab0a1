"""Load the empty programs of floor.bpf.o, attach them, hold them until SIGTERM/SIGINT.

  python floor.py floor.bpf.o

Uses the system's libbpf (libbpf1, 1.x) through ctypes. Prints "floor: attached
NAME ..." once every program is attached; exits 1 with the reason if one is not.
The programs stay loaded as long as this process holds their file descriptors
(the bench reads their run_cnt/run_time_ns from /proc/PID/fdinfo).
"""
import ctypes
import ctypes.util
import os
import signal
import sys

lib = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
P = ctypes.c_void_p
for fn, res, args in [("bpf_object__open_file", P, [ctypes.c_char_p, P]), ("bpf_object__load", ctypes.c_int, [P]),
                      ("bpf_object__next_program", P, [P, P]), ("bpf_program__name", ctypes.c_char_p, [P]),
                      ("bpf_program__attach", P, [P]), ("bpf_link__destroy", ctypes.c_int, [P]),
                      ("bpf_object__close", None, [P])]:
    getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args


def fail(what):
    err = ctypes.get_errno()
    sys.exit(f"floor: {what}: {os.strerror(err) if err else 'failed'}")


def main():
    obj = lib.bpf_object__open_file(sys.argv[1].encode(), None)
    if not obj:
        fail(f"open {sys.argv[1]}")
    if lib.bpf_object__load(obj):
        fail("load")
    links, names, prog = [], [], lib.bpf_object__next_program(obj, None)
    while prog:
        name = lib.bpf_program__name(prog).decode()
        link = lib.bpf_program__attach(prog)
        if not link:
            fail(f"attach {name}")
        links.append(link)
        names.append(name)
        prog = lib.bpf_object__next_program(obj, prog)
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
