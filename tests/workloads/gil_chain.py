"""Ground truth for a causal chain (issue 18, point 1): ingest waits on a lock whose
holder is itself waiting for the GIL behind a third thread.

  feeder     (a child process: the network) writes a 64-byte message to a socketpair
             every 2 ms
  ingest     reads each message (recv releases the GIL) and appends it to a shared
             batch under `batch_lock`: the thread whose messages fall behind
  worker     every 20 ms takes `batch_lock` and, holding it, normalises the batch in
             pure Python for about 20 ms of CPU (an in-memory index rebuilt under the
             lock): it needs the GIL all the while
  processor  json.dumps of a large list in a loop: one C call that holds the GIL for
             tens of milliseconds without a switch

  python gil_chain.py [same|separate]
      separate: processor in its own process (the control): worker gets the GIL
                back within a switch interval and holds the lock only for its own work

Prints "tid <name> <native thread id>", then "ready"; every second after that
"lockwait <s> at <t>": ingest's wall-clock seconds inside batch_lock.acquire()
so far (the ground truth of its lock wait; it includes getting the GIL back after
the lock), and CLOCK_MONOTONIC then. Runs until killed.
"""
import json
import multiprocessing
import os
import socket
import sys
import threading
import time

DATA = [{"id": i, "name": "item-%d" % i, "value": i * 0.5, "tags": ["a", "b"]} for i in range(40_000)]
batch_lock = threading.Lock()
batch = []
index = {}
waited = [0.0]
tids = {}
# children are forked (3.14 defaults to forkserver, whose children's parent is the server)
FORK = multiprocessing.get_context("fork")


def processor():
    tids["processor"] = threading.get_native_id()
    while True:
        json.dumps(DATA)


def processor_child(parent):
    """The control's processor, in a process of its own; it ends with its parent."""
    while os.getppid() == parent:
        json.dumps(DATA)


def spin_cpu(seconds):
    """Pure-Python work for `seconds` of the thread's CPU: asks for the GIL back at every
    switch request."""
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        index[n % 512] = str(n)
        n += 1


def worker():
    tids["worker"] = threading.get_native_id()
    while True:
        time.sleep(0.02)
        with batch_lock:
            items = batch[:]
            batch.clear()
            spin_cpu(0.02)
        del items


def ingest(sock):
    tids["ingest"] = threading.get_native_id()
    buf = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return
        buf += chunk
        while len(buf) >= 64:
            msg, buf = buf[:64], buf[64:]
            t0 = time.perf_counter()
            batch_lock.acquire()
            waited[0] += time.perf_counter() - t0
            batch.append(msg)
            batch_lock.release()


def feeder(sock, other_end):
    """The network, in a child process; it ends when the workload does (its peer closes)."""
    other_end.close()
    msg = b"x" * 64
    try:
        while True:
            sock.sendall(msg)
            time.sleep(0.002)
    except OSError:
        pass


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "same"
    a, b = socket.socketpair()
    threads = [
        threading.Thread(target=ingest, args=(a,), name="ingest", daemon=True),
        threading.Thread(target=worker, name="worker", daemon=True),
    ]
    FORK.Process(target=feeder, args=(b, a), daemon=True).start()
    b.close()
    if mode == "same":
        threads.append(threading.Thread(target=processor, name="processor", daemon=True))
    else:
        FORK.Process(target=processor_child, args=(os.getpid(),), daemon=True).start()
    for t in threads:
        t.start()
    while len(tids) < len(threads):
        time.sleep(0.01)
    tids["MainThread"] = threading.get_native_id()
    for name, tid in tids.items():
        print("tid", name, tid)
    print("ready", flush=True)
    while True:
        time.sleep(1)
        print("lockwait %.4f at %.4f" % (waited[0], time.monotonic()), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
