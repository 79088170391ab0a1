"""A FastAPI app under its TestClient with websocket clients (issue 18, point 3), as a test
suite or a load script drives it: each websocket session runs the app in a thread of its own
(anyio's blocking portal), and the client sends a message every 100 ms and reads the echo.

Starlette up to 0.36 waits for the client's next message by busy-polling its event loop
(`while queue.empty(): await anyio.sleep(0)` in `_asgi_receive`): each portal thread takes the
GIL back tens of thousands of times a second to find nothing. Current Starlette waits on a
memory stream: its portal threads sleep until a message comes.

  python fastapi_ws.py [SESSIONS]     (default 3)

Prints "tid portal-<i> <tid>" for each session's portal thread, "tid MainThread <tid>",
then "ready"; every second after that "echoes <n>": the echoes received so far. Runs until
killed.
"""
import sys
import threading
import time

from fastapi import FastAPI, WebSocket
from fastapi.testclient import TestClient

app = FastAPI()


@app.websocket("/ws")
async def echo(ws: WebSocket):
    await ws.accept()
    while True:
        msg = await ws.receive_text()
        await ws.send_text(msg)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    client = TestClient(app)
    before = {t.ident for t in threading.enumerate()}
    sessions = []
    tids = {}
    for i in range(n):
        ws = client.websocket_connect("/ws").__enter__()
        sessions.append(ws)
        new = [t for t in threading.enumerate() if t.ident not in before and t.native_id not in tids.values()]
        for t in new:
            tids["portal-%d" % i] = t.native_id
            before.add(t.ident)
    for name, tid in tids.items():
        print("tid", name, tid)
    print("tid MainThread", threading.get_native_id())
    print("ready", flush=True)
    echoes = 0
    last = time.monotonic()
    while True:
        for ws in sessions:
            ws.send_text("ping")
            assert ws.receive_text() == "ping"
            echoes += 1
        time.sleep(0.1)
        if time.monotonic() - last >= 1:
            last = time.monotonic()
            print("echoes", echoes, flush=True)


if __name__ == "__main__":
    main()
