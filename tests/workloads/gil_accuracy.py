"""GIL-wait accuracy workload. A "waiter" thread always wants the GIL (a pure
Python loop); a "holder" thread, on "go" from stdin, calls holdgil.hold(MS)
COUNT times with a short sleep between (which lets the waiter run), then
prints "done <ns held in total>". The waiter's GIL wait is that total.

  python gil_accuracy.py BUILD_DIR [MS] [COUNT]
"""
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import holdgil  # noqa: E402

MS = float(sys.argv[2]) if len(sys.argv) > 2 else 50.0
COUNT = int(sys.argv[3]) if len(sys.argv) > 3 else 20


def waiter():
    x = 0
    while True:
        x += 1


def holder(go):
    go.wait()
    held = 0
    for _ in range(COUNT):
        held += holdgil.hold(MS)
        time.sleep(0.02)
    print("done", held, flush=True)


def main():
    go = threading.Event()
    threading.Thread(target=waiter, name="waiter", daemon=True).start()
    threading.Thread(target=holder, args=(go,), name="holder", daemon=True).start()
    print("ready", flush=True)
    if sys.stdin.readline().strip() == "go":
        go.set()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
