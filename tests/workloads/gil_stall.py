"""Ground truth for bursts: an ingest thread that needs the GIL back after every short
blocking call, and a batch thread that once, STALL_AT seconds after "ready", holds the GIL
through one blocking C call of STALL seconds (usleep(3) called through ctypes.PyDLL, which
keeps the GIL: a C extension that blocks without releasing it); the rest of the time batch
sleeps. The call's length is the C library's, not a calibration's (a sum() calibrated to
1.5 s took 0.95 s on one machine and 2.6 s on another).

  python gil_stall.py STALL_AT STALL      (STALL 0: no stall, the control)

Prints "tid <name> <native thread id>", then "ready", then "stall <start> <end>" (Unix
times of the call) when it is done.
"""
import ctypes
import select
import sys
import threading
import time

tids = {}


def batch(at, seconds):
    tids["batch"] = threading.get_native_id()
    time.sleep(at)
    if seconds > 0:
        libc = ctypes.PyDLL(None)  # PyDLL: the GIL is held through the call
        t0 = time.time()
        libc.usleep(ctypes.c_uint(int(seconds * 1e6)))
        print("stall %.3f %.3f" % (t0, time.time()), flush=True)
    while True:
        time.sleep(1)


def ingest():
    tids["ingest"] = threading.get_native_id()
    while True:
        select.select([], [], [], 0.001)


def main():
    at, seconds = float(sys.argv[1]), float(sys.argv[2])
    threading.Thread(target=ingest, name="ingest", daemon=True).start()
    threading.Thread(target=batch, args=(at, seconds), name="batch", daemon=True).start()
    time.sleep(0.2)
    tids["MainThread"] = threading.get_native_id()
    print("".join("tid %s %d\n" % kv for kv in tids.items()) + "ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
