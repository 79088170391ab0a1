"""Ground truth for wait stacks: a processor thread holds the GIL in two known
places with a known share of its time, while an ingest thread needs the GIL
back after every short blocking call.

  processor  json.dumps of a list of dicts (one C call that never releases the
             GIL), then spin(), a pure-Python loop, for a third of the time the
             dumps took: 75% of its time in json.dumps, 25% in spin
  ingest     select() with a zero timeout (releases the GIL) in blocking_call(),
             in a loop: it asks for the GIL back all the time, so it waits
             behind processor through both phases, and where it waits is
             blocking_call

  python gil_holder.py [same|separate|churn]
      separate: processor in its own process (control)
      churn: as same, and every 50 ms a short-lived thread "short" waits for
             the GIL in blocking_call 200 times and exits

Prints "tid <name> <native thread id>", then "ready"; every second after
that "shares dumps=<s> spin=<s> calls=<n> wall=<s>" (processor's CPU seconds
in each so far, how many json.dumps calls, and their wall-clock seconds), and
"calls <end>:<length> ..." for the json.dumps calls that ended since the last
such line (Unix time of the end, wall-clock seconds: the length of a hold;
for the calls of a measuring window).
Runs until killed.
"""
import json
import os
import select
import sys
import threading
import time

DATA = [{"id": i, "name": "item-%d" % i, "value": i * 0.5, "tags": ["a", "b"]} for i in range(40_000)]
totals = {"dumps": 0.0, "spin": 0.0, "calls": 0, "wall": 0.0}
ended = []  # (Unix time, wall seconds) of each json.dumps call not yet printed


def spin(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
    return x


def processor():
    while True:
        t0, w0 = time.thread_time(), time.perf_counter()
        json.dumps(DATA)
        took = time.thread_time() - t0
        wall = time.perf_counter() - w0
        ended.append((time.time(), wall))
        totals["wall"] += wall
        totals["dumps"] += took
        totals["calls"] += 1
        t1 = time.thread_time()
        spin(took / 3)
        totals["spin"] += time.thread_time() - t1


tids = {}


def processor_main():
    tids["processor"] = threading.get_native_id()
    processor()


def blocking_call():
    select.select([], [], [], 0)


def ingest():
    tids["ingest"] = threading.get_native_id()
    while True:
        blocking_call()


def short():
    for _ in range(200):
        blocking_call()


def churn():
    while True:
        threading.Thread(target=short, name="short").start()
        time.sleep(0.05)


def watch_parent(parent):
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "same"
    tids["MainThread"] = threading.get_native_id()
    if mode in ("same", "churn"):
        threading.Thread(target=processor_main, name="processor", daemon=True).start()
    else:
        parent = os.getpid()
        if os.fork() == 0:
            threading.Thread(target=watch_parent, args=(parent,), daemon=True).start()
            processor()
    threading.Thread(target=ingest, name="ingest", daemon=True).start()
    time.sleep(0.3)
    # printed by one thread: lines of threads printing at once can interleave
    print("".join("tid %s %d\n" % kv for kv in tids.items()) + "ready", flush=True)
    if mode == "churn":
        threading.Thread(target=churn, daemon=True).start()
    while True:
        time.sleep(1)
        calls = [ended.pop(0) for _ in range(len(ended))]
        print(
            "shares dumps=%.4f spin=%.4f calls=%d wall=%.4f\n" % (totals["dumps"], totals["spin"], totals["calls"], totals["wall"])
            + "calls " + " ".join("%.4f:%.5f" % c for c in calls),
            flush=True,
        )


if __name__ == "__main__":
    main()
