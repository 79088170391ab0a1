"""Ground truth for lock waits in CPython's parking lot (3.13+).

  object           a sorter thread keeps one list's per-object lock (free-threaded
                   builds: list.sort holds it for the whole sort) while APPENDERS
                   threads append to the same list
  object-separate  the control: every appender has a list of its own
  lock             a holder keeps a threading.Lock 20 ms at a time while a waiter
                   takes it in a loop
  lock-separate    the control: the waiter has a lock of its own

Prints `tid <name> <tid>` per thread, `object <id> <basicsize>` of the contended
object, then `ready`; then every 0.25 s `inside <name> <s> <now>`: the seconds each
contending thread has spent inside append()/acquire() so far (its lock wait, to
within the cost of the call itself), and the CLOCK_MONOTONIC time.
"""
import os
import random
import sys
import threading
import time

MODE = sys.argv[1]
APPENDERS = int(os.environ.get("APPENDERS", "1"))
inside = {}
started = threading.Barrier(1 + (1 + APPENDERS if MODE.startswith("object") else 2))
tids = {}


def named(name):
    threading.current_thread().name = name
    tids[name] = threading.get_native_id()


def sorter(lst, src):
    named("sorter")
    started.wait()
    while True:
        lst[:] = src
        lst.sort()


def appender(name, lst):
    named(name)
    inside[name] = 0.0
    started.wait()
    while True:
        t0 = time.perf_counter()
        lst.append(1.0)
        inside[name] += time.perf_counter() - t0
        time.sleep(0.0005)


def holder(lock):
    named("holder")
    started.wait()
    while True:
        with lock:
            time.sleep(0.02)
        time.sleep(0.0005)


def waiter(lock):
    named("waiter")
    inside["waiter"] = 0.0
    started.wait()
    while True:
        t0 = time.perf_counter()
        lock.acquire()
        inside["waiter"] += time.perf_counter() - t0
        lock.release()
        time.sleep(0.0005)


threads = []
if MODE.startswith("object"):
    random.seed(1)
    src = [random.random() for _ in range(300_000)]
    shared = []
    contended = shared
    threads.append(threading.Thread(target=sorter, args=(shared, src), daemon=True))
    for i in range(APPENDERS):
        lst = shared if MODE == "object" else []
        threads.append(threading.Thread(target=appender, args=(f"appender-{i}", lst), daemon=True))
elif MODE.startswith("lock"):
    lock = threading.Lock()
    contended = lock
    threads.append(threading.Thread(target=holder, args=(lock,), daemon=True))
    threads.append(threading.Thread(target=waiter, args=(lock if MODE == "lock" else threading.Lock(),), daemon=True))
else:
    sys.exit(f"unknown mode {MODE!r}: object, object-separate, lock or lock-separate")
for t in threads:
    t.start()
started.wait()
for name, tid in sorted(tids.items()):
    print("tid", name, tid)
print("object", id(contended), type(contended).__basicsize__)
print("ready", flush=True)
while True:
    time.sleep(0.25)
    for name, s in sorted(inside.items()):
        print("inside", name, f"{s:.6f}", f"{time.monotonic():.6f}", flush=True)
