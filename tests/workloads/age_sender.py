"""A process that sends age records to the agent's socket ($WAITMETER_SOCKET), for the
tests of the socket's trust model (tests/test_age.py).

usage: age_sender.py [--client AGE]

  --client AGE   a thread "client" reports AGE every 20 ms with the real waitmeter_client
                 (clients/python on PYTHONPATH), as an application would

Prints "tid main <pid>" (and "tid client <tid>"), as its own PID namespace numbers them, then
"ready". Then it takes commands on stdin, one a line, and answers each with one line once its
records are sent. Records are sent by a blocking socket of its own, so that each one reaches the
agent (the real client drops what does not fit):

  threads N            start N more threads that wait      -> "threads <how many wait>"
  real AGE             a record of AGE for each of its threads (/proc/self/task) -> "sent <n>"
  fake N AGE           N records of thread IDs no thread can have -> "sent N"
  claim PID TID N AGE  N records claiming PID and TID      -> "sent N"
  stop N               end N of the waiting threads        -> "stopped N"
"""
import os
import socket
import struct
import sys
import threading
import time

RECORD = struct.Struct("<4sIIdd")  # as waitmeter_client sends it
PATH = os.environ["WAITMETER_SOCKET"]
# above any PID the kernel hands out (PID_MAX_LIMIT is 2^22)
NO_SUCH_TID = 3_000_000_000


def main():
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # blocking

    def send(pid, tid, age):
        raw.sendto(RECORD.pack(b"WMA1", pid, tid, age, time.time()), PATH)

    print(f"tid main {os.getpid()}", flush=True)
    if "--client" in sys.argv:
        import waitmeter_client

        age = float(sys.argv[sys.argv.index("--client") + 1])
        started = threading.Event()

        def client():
            print(f"tid client {threading.get_native_id()}", flush=True)
            started.set()
            while True:
                waitmeter_client.observe_age(age)
                time.sleep(0.02)

        threading.Thread(target=client, name="client", daemon=True).start()
        started.wait()
    waiting = []  # (thread, event that ends it)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "threads":
            threading.stack_size(256 * 1024)
            for _ in range(int(args[0])):
                stop = threading.Event()
                t = threading.Thread(target=stop.wait, daemon=True)
                t.start()
                waiting.append((t, stop))
            print(f"threads {len(waiting)}", flush=True)
        elif cmd == "real":
            tids = [int(t) for t in os.listdir("/proc/self/task")]
            for tid in tids:
                send(os.getpid(), tid, float(args[0]))
            print(f"sent {len(tids)}", flush=True)
        elif cmd == "fake":
            for i in range(int(args[0])):
                send(os.getpid(), NO_SUCH_TID + i, float(args[1]))
            print(f"sent {args[0]}", flush=True)
        elif cmd == "claim":
            pid, tid, n, age = int(args[0]), int(args[1]), int(args[2]), float(args[3])
            for _ in range(n):
                send(pid, tid, age)
            print(f"sent {n}", flush=True)
        elif cmd == "stop":
            n = int(args[0])
            for t, stop in waiting[-n:]:
                stop.set()
                t.join()
            del waiting[-n:]
            print(f"stopped {n}", flush=True)


if __name__ == "__main__":
    main()
