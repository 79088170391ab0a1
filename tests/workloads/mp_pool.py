"""A multiprocessing.Pool sized without regard to the CPUs it may use (issue 18, point 6): the
parent feeds CPU-bound tasks (pure-Python parsing and hashing of a JSON document, ~20 ms each)
to WORKERS processes and waits for the results. With more workers than CPUs, each worker waits
in the run queue behind its siblings; no single process' numbers say why.

  python mp_pool.py [WORKERS] [PIN]     (default 4, no pinning)

PIN: a comma-separated CPU list the process (and so its workers) is pinned to first.
Prints "cpus <n>" (the CPUs it may use), "tid worker-<i> <pid>" for each worker process,
then "ready"; every second after that "offcpu <share> tasks <n>": of the tasks finished in that
second, the share of their wall-clock time they were not on a CPU (each worker's own clock:
1 - thread CPU time / wall time; the tasks never block, so this is their run-queue wait).
Runs until killed (its workers end with it).
"""
import hashlib
import json
import multiprocessing
import os
import sys
import time

DOC = json.dumps({"items": [{"id": i, "name": f"item-{i}", "tags": ["a", "b", "c"], "price": i * 1.5} for i in range(400)]})


def die_with_parent():
    # a worker ends with its parent even when that is killed (SIGKILL leaves no cleanup)
    import ctypes
    import signal
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def task(_):
    wall0, cpu0 = time.monotonic(), time.thread_time()
    deadline = cpu0 + 0.02
    while time.thread_time() < deadline:
        doc = json.loads(DOC)
        hashlib.sha256(repr(doc).encode()).hexdigest()
    return time.monotonic() - wall0, time.thread_time() - cpu0


def worker_pid(_):
    time.sleep(0.2)  # one call per worker: each holds one until all have one
    return os.getpid()


def main():
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    if len(sys.argv) > 2:
        os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(",")})
    print(f"cpus {len(os.sched_getaffinity(0))}", flush=True)
    with multiprocessing.Pool(workers, initializer=die_with_parent) as pool:
        pids = sorted(set(pool.map(worker_pid, range(workers), chunksize=1)))
        for i, pid in enumerate(pids):
            print(f"tid worker-{i} {pid}", flush=True)
        print("ready", flush=True)
        wall = cpu = 0.0
        n = 0
        next_line = time.monotonic() + 1
        for w, c in pool.imap_unordered(task, iter(int, 1), chunksize=1):
            wall, cpu, n = wall + w, cpu + c, n + 1
            if time.monotonic() >= next_line:
                print(f"offcpu {1 - cpu / wall:.3f} tasks {n}", flush=True)
                wall = cpu = 0.0
                n = 0
                next_line += 1


if __name__ == "__main__":
    main()
