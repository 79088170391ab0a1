"""An asyncio TCP server whose handler stalls its event loop on a "slow" line: it renders a
report (json.dumps of a big list, ~100 ms a pass calibrated at start, passes until 150 ms
have gone: 150-250 ms) on the loop itself, so every other client waits until the loop gets
back to its poll (epoll_wait).

  python loop_stall.py server               the server: prints "tid loop <native id>",
                                            "port <port>", "render_ms <ms>", then "ready";
                                            runs until killed
  python loop_stall.py slow PORT SECONDS    a client sending "slow" every 0.5 s (each answered
                                            after the render); at the end one JSON line:
                                            {"sent", "answered": [[sent, answered], ...]}
                                            (time.monotonic(), the same clock in every process)
  python loop_stall.py ping PORT SECONDS    a client sending "ping" every 10 ms, measuring each
                                            one's latency; at the end one JSON line:
                                            {"count", "p50", "p99", "max"} (seconds)

The loop runs in a thread named "loop" (its OS name too), which only waits in epoll_wait:
that is its home wait, and each stretch away from it is one round of the loop (a
"slow" line's stretch: its render).
"""
import asyncio
import ctypes
import json
import socket
import sys
import threading
import time

PASS_S = 0.1  # one json.dumps of DATA
RENDER_S = 0.15  # a render's passes take at least this long (a quick machine is no shorter stall)
DATA = []


def render_report():
    """The stall: CPU work on the event loop (C calls that never yield), at least RENDER_S."""
    t0 = time.perf_counter()
    while True:
        out = json.dumps(DATA)
        if time.perf_counter() - t0 >= RENDER_S:
            return out


def timed_pass():
    """The quickest of three passes, s: the CPU work itself, without the times it was kept from
    the CPU."""
    took = []
    for _ in range(3):
        t0 = time.perf_counter()
        json.dumps(DATA)
        took.append(time.perf_counter() - t0)
    return min(took)


def calibrate():
    """Size DATA so that one pass takes about PASS_S; returns a render's length, s."""
    n = 10_000
    for _ in range(4):
        DATA[:] = [{"id": i, "name": "item-%d" % i, "value": i * 0.5, "tags": ["a", "b"]} for i in range(n)]
        took = timed_pass()
        if 0.8 * PASS_S <= took <= 1.2 * PASS_S:
            break
        n = max(1000, int(n * PASS_S / max(took, 1e-4)))
    t0 = time.perf_counter()
    render_report()
    return time.perf_counter() - t0


async def handle(reader, writer):
    while line := await reader.readline():
        if line.strip() == b"slow":
            render_report()
            writer.write(b"done\n")
        else:
            writer.write(b"pong\n")
        await writer.drain()
    writer.close()


def loop_thread(ready):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, b"loop", 0, 0, 0)  # PR_SET_NAME: the OS name, as the Python one

    async def serve():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    print("tid loop", threading.get_native_id(), flush=True)
    asyncio.run(serve())


def server():
    took = calibrate()
    ready = []
    threading.Thread(target=loop_thread, args=(ready,), name="loop", daemon=True).start()
    while not ready:
        time.sleep(0.01)
    print("port", ready[0], flush=True)
    print("render_ms", round(took * 1000, 1), flush=True)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


def slow_client(port, seconds):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = s.makefile("rb")
    answered = []
    start = time.monotonic()
    nxt = start
    while time.monotonic() < start + seconds:
        sent = time.monotonic()
        s.sendall(b"slow\n")
        f.readline()
        answered.append([sent, time.monotonic()])
        nxt += 0.5
        time.sleep(max(0.0, nxt - time.monotonic()))
    print(json.dumps({"sent": len(answered), "answered": answered}), flush=True)


def ping_client(port, seconds):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = s.makefile("rb")
    lat = []
    start = time.monotonic()
    nxt = start
    while time.monotonic() < start + seconds:
        t0 = time.monotonic()
        s.sendall(b"ping\n")
        f.readline()
        lat.append(time.monotonic() - t0)
        nxt += 0.01
        now = time.monotonic()
        if nxt < now:
            nxt = now  # a late answer: the next ping at once, not a burst of the missed ones
        time.sleep(nxt - now)
    lat.sort()
    print(json.dumps({"count": len(lat), "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)], "max": lat[-1]}),
          flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "server":
        server()
    elif mode == "slow":
        slow_client(int(sys.argv[2]), float(sys.argv[3]))
    elif mode == "ping":
        ping_client(int(sys.argv[2]), float(sys.argv[3]))
    else:
        sys.exit(f"unknown mode {mode}: server, slow PORT SECONDS or ping PORT SECONDS")
