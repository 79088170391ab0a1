"""The motivating workload: an ingest thread receiving small messages on a
TCP socket, fed at a fixed rate by another process, while a processor thread
runs json.dumps over a list of 200k dicts in a loop (one C call, ~100 ms,
never releasing the GIL). Ingest stores each message with an I/O call (which
releases the GIL), so it needs the GIL back for every message: briefly but
constantly. Each message carries the time it was due to be sent, so when
ingest falls behind, the age of what it handles grows.

  python gil_starve.py same       processor thread in this process: ingest starves for the GIL
  python gil_starve.py separate   processor in its own process (the fix): ingest does not

Options (after the mode), for the age join:
  --metrics-port N   expose the ingest lag as the gauge fix_lag_seconds with prometheus_client
  --client           report each message's lag with waitmeter_client.observe_age()
  --rate N           messages per second (default 500: ingest falls behind; at a few per
                     second it keeps up, each message waiting one json.dumps at most: a
                     flat age with GIL waits)
  --hold S           make one json.dumps take about S seconds on this machine (a part of
                     the list timed before "ready", and repeated): by default one call
                     takes 100-450 ms, by the machine and its load

Prints "tid <name> <native thread id>" for each thread (and "pid processor
<pid>" in separate mode), then "ready". Runs until killed; its children die
with it (they watch their parent).
"""
import json
import os
import socket
import sys
import threading
import time

RATE = 500  # messages per second


def feeder(port, parent, rate=RATE):
    """A separate process sending small messages at `rate`/s until the parent is
    gone; each is stamped with the time it was due (a backlog ages it)."""
    s = socket.create_connection(("127.0.0.1", port))
    period = 1.0 / rate
    start_wall, start = time.time(), time.monotonic()
    nxt = start
    seq = 0
    while os.getppid() == parent:
        # "sent": when it was due (its age counts from there); "wrote": when it was written
        msg = json.dumps({"seq": seq, "sent": start_wall + (nxt - start), "wrote": time.time(), "body": "x" * 64}).encode() + b"\n"
        try:
            s.sendall(msg)
        except OSError:
            return
        seq += 1
        nxt += period
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def process_forever(nice=0, hold=0.0, looping=None):
    if nice:
        os.nice(nice)  # a batch job in its own process: it yields the CPU to ingest
    data = [{"id": i, "name": "item-%d" % i, "value": i * 0.5, "tags": ["a", "b"]} for i in range(200_000)]
    if hold:
        # a tenth of the list, timed (the least of 3), repeated to take `hold`: within a
        # twentieth-list's time of it on a fast machine and on a slow one alike
        data = data[:20_000]
        t = min(_timed(json.dumps, data) for _ in range(3))
        data = data * max(1, round(hold / t))  # the same dicts again
    if looping:
        looping.set()
    while True:
        json.dumps(data)


def _timed(fn, *args):
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def processor_thread(hold, looping):
    print("tid processor", threading.get_native_id(), flush=True)
    process_forever(0, hold, looping)


def thread_state_line(name):
    """3.15+: "tstate <name> <PyThreadState address> <offset of gil_requested>",
    for tests that sample the interpreter's own flag from outside. The offset
    is the interpreter's: `_Py_DebugOffsets.thread_state.gil_requested`, the
    35th u64 after the cookie at the start of _PyRuntime in 3.15
    (Include/internal/pycore_debug_offsets.h)."""
    if sys.version_info < (3, 15):
        return
    import ctypes
    get = ctypes.pythonapi.PyThreadState_Get
    get.restype = ctypes.c_void_p
    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    assert ctypes.string_at(runtime, 8) == b"xdebugpy"
    gil_requested = ctypes.c_uint64.from_address(runtime + 8 + 8 * 34).value
    print("tstate", name, get(), gil_requested, flush=True)


def ingest(listener, started, observe):
    print("tid ingest", threading.get_native_id(), flush=True)
    thread_state_line("ingest")
    started.set()
    conn, _ = listener.accept()
    store = os.open(os.devnull, os.O_WRONLY)
    for line in conn.makefile("rb"):
        m = json.loads(line)
        observe(time.time() - m["sent"])  # the message's age when the application gets it
        os.write(store, line)  # "store" it: an I/O call, which lets go of the GIL


def spawn(fn, *args):
    pid = os.fork()
    if pid == 0:
        try:
            threading.Thread(target=_die_with, args=(os.getppid(),), daemon=True).start()
            fn(*args)
        finally:
            os._exit(0)
    return pid


def _die_with(parent):
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)


def age_reporter(args):
    observers = []
    if "--metrics-port" in args:
        import prometheus_client

        lag = prometheus_client.Gauge("fix_lag_seconds", "Age of the last message handled by ingest")
        prometheus_client.start_http_server(int(args[args.index("--metrics-port") + 1]), addr="127.0.0.1")
        observers.append(lag.set)
    if "--client" in args:
        import waitmeter_client

        observers.append(waitmeter_client.observe_age)
    return lambda age: [o(age) for o in observers]


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "same"
    observe = age_reporter(sys.argv[2:])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    print("tid MainThread", threading.get_native_id(), flush=True)
    args = sys.argv[2:]
    rate = float(args[args.index("--rate") + 1]) if "--rate" in args else RATE
    hold = float(args[args.index("--hold") + 1]) if "--hold" in args else 0.0
    spawn(feeder, port, os.getpid(), rate)
    started = threading.Event()
    threading.Thread(target=ingest, args=(sock, started, observe), name="ingest", daemon=True).start()
    started.wait()
    if mode == "same":
        looping = threading.Event()
        threading.Thread(target=processor_thread, args=(hold, looping), name="processor", daemon=True).start()
        looping.wait()
    else:
        print("pid processor", spawn(process_forever, 19, hold), flush=True)
    time.sleep(1.0)  # the processor has built its data and is in its loop
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
