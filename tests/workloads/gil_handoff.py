"""Ground truth for GIL holders at fast hand-offs (issue 18, point 4): two poller
threads each check an idle pipe with select() and a zero timeout (the call
releases the GIL), then do a few microseconds of Python, in a loop. The GIL
changes hands tens of thousands of times a second, so a poller often goes to
sleep on the GIL just as it is being handed over, when no thread holds it.
The main thread waits in join(), on a lock, never for the GIL: each poller's
GIL wait can only be behind the other poller.

  python gil_handoff.py [POLLERS] [HOGS]     (default 2 and 1)

HOGS child processes spin on the CPU (and end when this process does): with
them the pollers share the machine's two CPUs with other work, as in a busy
pod, and the GIL changes hands tens of thousands of times a second.

Prints "tid poller-<i> <native thread id>" for each poller, "tid MainThread
<tid>", then "ready". Runs until killed.
"""
import os
import select
import subprocess
import sys
import threading


def poller(i, tids, started):
    r, _w = os.pipe()
    tids[i] = threading.get_native_id()
    started.release()
    n = 0
    while True:
        select.select([r], [], [], 0)
        n += sum(range(40))  # a few microseconds of Python between polls


HOG = "import os\nwhile os.getppid() == %d:\n    sum(range(10000))\n"


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    hogs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    for _ in range(hogs):
        subprocess.Popen([sys.executable, "-c", HOG % os.getpid()])
    started = threading.Semaphore(0)
    tids = {}
    threads = [threading.Thread(target=poller, args=(i, tids, started), name=f"poller-{i}", daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for _ in threads:
        started.acquire()
    for i in range(count):
        print(f"tid poller-{i} {tids[i]}", flush=True)
    print(f"tid MainThread {threading.get_native_id()}", flush=True)
    print("ready", flush=True)
    threads[0].join()


if __name__ == "__main__":
    main()
