"""Ground truth for bursts: an ingest thread that needs the GIL back after every short
blocking call, and a batch thread that once, STALL_AT seconds after "ready", holds the GIL
through one long C call (sum() over a range: a builtin loop that never lets go) of about
STALL seconds; the rest of the time batch sleeps.

  python gil_stall.py STALL_AT STALL      (STALL 0: no stall, the control)

Prints "tid <name> <native thread id>", then "ready", then "stall <start> <end>" (Unix
times of the call) when it is done.
"""
import select
import sys
import threading
import time

tids = {}


def calibrate(seconds):
    """A range whose sum() takes about `seconds` here."""
    n, per = 2_000_000, float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        sum(range(n))
        per = min(per, (time.perf_counter() - t0) / n)
    return int(seconds / per)


def batch(at, seconds):
    tids["batch"] = threading.get_native_id()
    time.sleep(at)
    if seconds > 0:
        # Calibrated here, just before the call, so that it runs on the machine as it is
        # then (a calibration at start-up, beside other start-ups, made a 1.5 s call 0.95 s).
        n = calibrate(seconds)
        t0 = time.time()
        sum(range(n))
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
