"""Ground truth for "waiting for work is idle, a lock handed around mid-work is a convoy": a
concurrent.futures.ThreadPoolExecutor of WORKERS (8) threads fed by a producer thread.

  python idle_pool.py idle      the producer submits a light task (~1 ms of pure-Python CPU)
                                RATE (50) times a second: the pool is idle nearly all the time,
                                its 8 workers waiting together on the executor's queue
  python idle_pool.py contend   every 200 ms the producer submits a burst of 8 tasks; each
                                does ~1 ms of CPU, then takes one shared threading.Lock and
                                holds it for HOLD_MS (10 ms, asleep: an append to a shared log
                                under a lock), then ~1 ms more: the 8 queue on that lock in the
                                middle of their work, and still wait on their queue most of the
                                time

  options: --rate N (idle: tasks per second), --hold-ms N (contend), --burst N (contend)

All 8 workers are started up front (each first task waits on a barrier: the executor only
starts a thread when none is idle). Prints "tid producer <tid>", "tid worker-<i> <tid>" for each
worker; on CPython 3.12 and older also "word queue <address>" and "word lock <address>": the
futex words the workers wait on for work (the executor's queue.SimpleQueue) and for the shared
lock (their PyThread_type_lock is a glibc sem_t, its futex word first, and the objects' first
field after PyObject_HEAD points to it); then "ready". Every 0.25 s after that (from the main
thread):
  stats <CLOCK_MONOTONIC> <tasks done> <seconds the tasks ran> <seconds in lock.acquire()>
the totals so far, by the tasks' own clocks (time.monotonic()). Runs until killed.
"""
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

WORKERS = 8
RATE = 50.0
WORK_S = 0.001
HOLD_S = 0.010
BURST = 8
BURST_PERIOD = 0.2

lock = threading.Lock()
totals = {"tasks": 0, "task_s": 0.0, "lock_s": 0.0}
totals_lock = threading.Lock()  # taken once per task, uncontended (tasks rarely end together)


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def light():
    t0 = time.monotonic()
    spin(WORK_S)
    done(t0, 0.0)


def contended(hold):
    t0 = time.monotonic()
    spin(WORK_S)
    a = time.monotonic()
    with lock:
        waited = time.monotonic() - a
        time.sleep(hold)
    spin(WORK_S)
    done(t0, waited)


def done(t0, waited):
    took = time.monotonic() - t0
    with totals_lock:
        totals["tasks"] += 1
        totals["task_s"] += took
        totals["lock_s"] += waited


def producer(pool, mode, rate, hold, burst, started):
    print("tid producer", threading.get_native_id(), flush=True)
    started.set()
    period = 1.0 / rate if mode == "idle" else BURST_PERIOD
    nxt = time.monotonic()
    while True:
        if mode == "idle":
            pool.submit(light)
        else:
            for _ in range(burst):
                pool.submit(contended, hold)
        nxt += period
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def futex_word(obj):
    """The futex word of a _thread.lock or a _queue.SimpleQueue (CPython <= 3.12): the
    PyThread_type_lock after PyObject_HEAD, a sem_t whose first 32 bits the futex waits on."""
    import ctypes

    return ctypes.c_void_p.from_address(id(obj) + 2 * ctypes.sizeof(ctypes.c_void_p)).value


def option(args, name, default):
    return float(args[args.index(name) + 1]) if name in args else default


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "idle"
    if mode not in ("idle", "contend"):
        sys.exit(f"usage: {sys.argv[0]} idle|contend [--rate N] [--hold-ms N] [--burst N]")
    args = sys.argv[2:]
    rate = option(args, "--rate", RATE)
    hold = option(args, "--hold-ms", HOLD_S * 1000) / 1000
    burst = int(option(args, "--burst", BURST))
    print("tid MainThread", threading.get_native_id(), flush=True)
    pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="worker")
    barrier = threading.Barrier(WORKERS + 1)

    def first():
        barrier.wait()
        return threading.get_native_id()

    futures = [pool.submit(first) for _ in range(WORKERS)]
    barrier.wait(timeout=10)
    for i, f in enumerate(futures):
        print(f"tid worker-{i}", f.result(timeout=10), flush=True)
    if sys.implementation.name == "cpython" and sys.version_info < (3, 13):
        print("word queue", hex(futex_word(pool._work_queue)), flush=True)
        print("word lock", hex(futex_word(lock)), flush=True)
    started = threading.Event()
    threading.Thread(target=producer, args=(pool, mode, rate, hold, burst, started), name="producer", daemon=True).start()
    started.wait()
    time.sleep(0.5)  # the producer's pace is set
    print("ready", flush=True)
    while True:
        time.sleep(0.25)
        with totals_lock:
            t = dict(totals)
        print("stats", repr(time.monotonic()), t["tasks"], repr(t["task_s"]), repr(t["lock_s"]), flush=True)


if __name__ == "__main__":
    main()
