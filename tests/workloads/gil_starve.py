"""The motivating workload: an ingest thread receiving small messages on a
socket, fed at a fixed rate by another process, while a processor thread runs
json.dumps over a list of 200k dicts in a loop (one C call, ~100 ms, never
releasing the GIL).

  python gil_starve.py same       processor thread in this process: ingest starves for the GIL
  python gil_starve.py separate   processor in its own process (the fix): ingest does not

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


def feeder(port, parent):
    """A separate process sending small messages at RATE/s until the parent is gone."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    period = 1.0 / RATE
    nxt = time.monotonic()
    seq = 0
    while os.getppid() == parent:
        msg = json.dumps({"seq": seq, "sent": time.time(), "body": "x" * 64}).encode()
        s.sendto(msg, ("127.0.0.1", port))
        seq += 1
        nxt += period
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def process_forever():
    data = [{"id": i, "name": "item-%d" % i, "value": i * 0.5, "tags": ["a", "b"]} for i in range(200_000)]
    while True:
        json.dumps(data)


def processor_thread():
    print("tid processor", threading.get_native_id(), flush=True)
    process_forever()


def ingest(sock, started):
    print("tid ingest", threading.get_native_id(), flush=True)
    started.set()
    lag = 0.0
    while True:
        msg, _ = sock.recvfrom(2048)
        m = json.loads(msg)
        lag = time.time() - m["sent"]


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


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "same"
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    print("tid MainThread", threading.get_native_id(), flush=True)
    spawn(feeder, port, os.getpid())
    started = threading.Event()
    threading.Thread(target=ingest, args=(sock, started), name="ingest", daemon=True).start()
    started.wait()
    if mode == "same":
        threading.Thread(target=processor_thread, name="processor", daemon=True).start()
    else:
        print("pid processor", spawn(process_forever), flush=True)
    time.sleep(1.0)  # the processor has built its data and is in its loop
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
