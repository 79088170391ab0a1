"""Ground truth for GIL-wait accuracy, for `make bench`. A "waiter" thread always
wants the GIL (a pure Python loop); a "holder" thread, on "go" from stdin, calls
holdgil.hold(MS) COUNT times (tests/workloads/holdgil.c: keeps the GIL for exactly
MS ms and returns the nanoseconds held), sleeping 20 ms between calls so the
waiter runs. Then it prints {"held_s": total held} and the process waits for
stdin to close.

  python gil_truth.py HOLDGIL_DIR [MS] [COUNT] [SWITCH_INTERVAL_S]

The truth assumes the waiter waits only for the GIL during each hold: on a
machine busy with other work it also waits for a CPU (runqueue), which is not
GIL wait; the harness reports the waiter's runqueue time beside the result.

SWITCH_INTERVAL_S (sys.setswitchinterval, default CPython's 0.005): with the
default, a GIL waiter sleeps in 5 ms timed waits and is briefly runnable between
them; with 0.1 it sleeps through a whole 50 ms hold in one wait.

Prints "tid waiter N", "tid holder N", then "ready".
"""
import json
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import holdgil  # noqa: E402

MS = float(sys.argv[2]) if len(sys.argv) > 2 else 50.0
COUNT = int(sys.argv[3]) if len(sys.argv) > 3 else 20
if len(sys.argv) > 4:
    sys.setswitchinterval(float(sys.argv[4]))


def waiter(started):
    print(f"tid waiter {threading.get_native_id()}", flush=True)  # one write: threads print concurrently
    started.release()
    x = 0
    while True:
        x += 1


def holder(started, go, out):
    print(f"tid holder {threading.get_native_id()}", flush=True)
    started.release()
    go.wait()
    held = 0
    for _ in range(COUNT):
        held += holdgil.hold(MS)
        time.sleep(0.02)
    out["held_s"] = held / 1e9
    go.clear()
    go.done = True


def main():
    started, go, out = threading.Semaphore(0), threading.Event(), {}
    go.done = False
    threading.Thread(target=waiter, args=(started,), name="waiter", daemon=True).start()
    threading.Thread(target=holder, args=(started, go, out), name="holder", daemon=True).start()
    started.acquire()
    started.acquire()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    go.set()
    while not go.done:
        time.sleep(0.01)
    time.sleep(0.2)  # the waiter takes the GIL back
    print(json.dumps(out), flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
