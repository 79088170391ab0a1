"""threading.Lock contention: a "holder" thread holds the lock 50 ms at a
time (sleeping, so the GIL is free); a "waiter" thread keeps acquiring it.
The waiter's time is futex_wait (the lock's semaphore), woken by the holder.
Prints "tid <name> <native id>" per thread, then "ready"; runs until killed."""
import threading
import time

lock = threading.Lock()


def holder(started):
    print("tid holder", threading.get_native_id(), flush=True)
    started.set()
    while True:
        with lock:
            time.sleep(0.05)
        time.sleep(0.0005)


def waiter():
    print("tid waiter", threading.get_native_id(), flush=True)
    while True:
        with lock:
            pass


def main():
    print("tid MainThread", threading.get_native_id(), flush=True)
    started = threading.Event()
    threading.Thread(target=holder, args=(started,), name="holder", daemon=True).start()
    started.wait()
    threading.Thread(target=waiter, name="waiter", daemon=True).start()
    time.sleep(0.3)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
