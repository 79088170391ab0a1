"""Bench variant of the ingest/processor GIL workload (tests/workloads/gil_starve.py),
with a fixed measurement window and its own numbers printed at the end.

A feeder process sends small JSON messages at RATE/s over TCP, each stamped with
the time it was due. In this process an `ingest` thread reads them, takes each
message's lag (now - due), and "stores" it with os.write (an I/O call that lets
go of the GIL, so it needs the GIL back for every message). A `processor`
thread meanwhile runs json.dumps over ITEMS dicts in a loop: one C call of
~25 ms that never releases the GIL. Each dumps is one unit of fixed work.

  python ingest.py SECONDS [--rate 500] [--items 50000]

Prints "ready" once the threads exist and the data is built, waits for a line
"go" on stdin, runs SECONDS, then prints one JSON line:
  {"processor_rate": units/s, "units": n, "processor_cpu_ms_per_unit": ms,
   "ingest_rate": messages handled/s,
   "lag_p50": s, "lag_p99": s, "lag_max": s, "sent": n}
then waits for stdin to close (the harness reads the tool's counters meanwhile).
"""
import json
import os
import socket
import sys
import threading
import time


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


SECONDS = float(sys.argv[1])
RATE = arg("--rate", 500)
ITEMS = arg("--items", 50000)


def feeder(port, go_fd):
    s = socket.create_connection(("127.0.0.1", port))
    os.read(go_fd, 1)  # the parent says go
    period = 1.0 / RATE
    wall0, t0 = time.time(), time.monotonic()
    seq = 0
    while time.monotonic() - t0 < SECONDS + 0.5:
        due = seq * period
        msg = json.dumps({"seq": seq, "due": wall0 + due, "body": "x" * 64}).encode() + b"\n"
        try:
            s.sendall(msg)
        except OSError:
            break
        seq += 1
        delay = t0 + seq * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    os._exit(0)


def main():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            feeder(port, go_r)
        finally:
            os._exit(0)
    conn, _ = listener.accept()
    data = [{"id": i, "name": "item-%d" % i, "value": i * 0.5, "tags": ["a", "b"]} for i in range(ITEMS)]
    go = threading.Event()
    result = {}

    def processor():
        go.wait()
        units, end = 0, go.t0 + SECONDS
        t, cpu0 = time.monotonic(), time.thread_time()
        while t < end:
            json.dumps(data)
            units += 1
            t = time.monotonic()
        result["units"] = units
        result["processor_rate"] = units / (t - go.t0)
        # CPU time of this thread (user + system, BPF programs run in its context included) per unit
        result["processor_cpu_ms_per_unit"] = (time.thread_time() - cpu0) * 1e3 / units

    def ingest():
        lags = []
        store = os.open(os.devnull, os.O_WRONLY)
        f = conn.makefile("rb")
        go.wait()
        end = go.t0 + SECONDS
        for line in f:
            m = json.loads(line)
            lags.append(time.time() - m["due"])
            os.write(store, line)
            if time.monotonic() >= end:
                break
        lags.sort()
        n = len(lags)
        result.update(handled=n, ingest_rate=n / SECONDS,
                      lag_p50=lags[n // 2] if n else None, lag_p99=lags[int(n * 0.99)] if n else None,
                      lag_max=lags[-1] if n else None)

    threads = [threading.Thread(target=processor, name="processor"), threading.Thread(target=ingest, name="ingest")]
    for t in threads:
        t.start()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        os._exit(1)
    go.t0 = time.monotonic()
    os.write(go_w, b"g")
    go.set()
    for t in threads:
        t.join()
    conn.close()
    os.waitpid(child, 0)
    print(json.dumps(result), flush=True)
    sys.stdin.readline()  # the harness reads the tool's counters, then closes stdin


if __name__ == "__main__":
    main()
