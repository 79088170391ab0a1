"""GIL ping-pong, the worst case for GIL measurement: two threads hand N
messages back and forth through two queue.Queue objects as fast as they can,
so the GIL changes hands twice per round trip.

  python pingpong.py N [--cpu C]     (--cpu: pin the process to one CPU)

Prints "ready", waits for "go" on stdin, then prints {"seconds": elapsed, "cpu_s": CPU time of the
process (user + system) meanwhile} and waits for stdin to close.
"""
import json
import os
import queue
import sys
import threading
import time

N = int(sys.argv[1])
if "--cpu" in sys.argv:
    os.sched_setaffinity(0, {int(sys.argv[sys.argv.index("--cpu") + 1])})


def echo(inq, outq):
    while True:
        m = inq.get()
        outq.put(m)
        if m is None:
            return


def main():
    a, b = queue.Queue(), queue.Queue()
    t = threading.Thread(target=echo, args=(a, b), name="echo")
    t.start()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        os._exit(1)
    t0, cpu0 = time.monotonic(), time.process_time()
    for i in range(N):
        a.put(i)
        b.get()
    elapsed = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    a.put(None)
    t.join()
    print(json.dumps({"seconds": elapsed, "cpu_s": cpu}), flush=True)
    sys.stdin.readline()  # the harness reads the tool's counters, then closes stdin


if __name__ == "__main__":
    main()
