"""Ground truth for `waitmeter attach -- python3 launched.py TIDS_FILE`: measured from
its first instruction. The main thread burns CPU first thing (0.3 s of its own CPU time,
before any other thread exists), then two threads, w0 and w1, serialize on the GIL with
json.dumps for 1.5 s; it writes "<name> <native id>" per thread and the main thread's
CPU seconds at the end (`time.thread_time()`) to TIDS_FILE, and exits with code 3."""
import json
import sys
import threading
import time

end = time.thread_time() + 0.3
while time.thread_time() < end:
    pass


def work():
    stop = time.monotonic() + 1.5
    while time.monotonic() < stop:
        json.dumps(list(range(2000)))


threads = [threading.Thread(target=work, name=f"w{i}") for i in range(2)]
for t in threads:
    t.start()
with open(sys.argv[1], "w") as f:
    for t in threads:
        f.write(f"{t.name} {t.native_id}\n")
    for t in threads:
        t.join()
    f.write(f"MainThread {threading.main_thread().native_id}\n")
    f.write(f"main_cpu {time.thread_time()}\n")
sys.exit(3)
