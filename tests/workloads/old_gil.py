"""GIL contention on any CPython, 2.7 included (issue 18, point 8): N threads run pure
Python loops and so take turns on the GIL; with N = 1 nothing waits for it (the control).

  python old_gil.py N

Prints "tid spin-<i> <native thread id>", then "ready"; runs until killed. Python 2
syntax too: no f-strings, no threading.get_native_id (the gettid syscall through ctypes).
"""
import ctypes
import sys
import threading
import time

SYS_GETTID = 186  # x86-64
libc = ctypes.CDLL(None, use_errno=True)
tids = {}


def spin(name):
    tids[name] = libc.syscall(SYS_GETTID)
    x = 0
    while True:
        for i in range(10000):
            x += i * i
        x %= 1000003


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    for i in range(n):
        t = threading.Thread(target=spin, args=("spin-%d" % i,), name="spin-%d" % i)
        t.daemon = True
        t.start()
    while len(tids) < n:
        time.sleep(0.01)
    for name in sorted(tids):
        print("tid %s %d" % (name, tids[name]))
    print("ready")
    sys.stdout.flush()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
