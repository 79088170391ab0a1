"""aiohttp server whose event loop is kept busy by one slow request.

  python aiohttp_app.py [--port 0] [--target 0.2]

GET /ping answers "ok"; GET /report returns a large JSON report rendered on the event
loop itself (render_report: one json.dumps call of TARGET seconds), so every other
request waits behind it: the incident. Prints "port <port>", "rows <n> <seconds of one
render>", "tid loop <native TID of the event loop's thread>", then "ready".
"""
import argparse
import asyncio
import json
import threading

from aiohttp import web

from report import calibrate

ROWS = []


def render_report():
    return json.dumps(ROWS)


async def report(request):
    body = render_report()
    return web.Response(text=body, content_type="application/json")


async def ping(request):
    return web.Response(text="ok\n")


async def main(port, target):
    app = web.Application()
    app.router.add_get("/ping", ping)
    app.router.add_get("/report", report)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    print("port", runner.addresses[0][1])
    print("tid loop", threading.get_native_id())
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.2)
    args = ap.parse_args()
    ROWS[:], took = calibrate(args.target)
    print("rows", len(ROWS), f"{took:.3f}", flush=True)
    asyncio.run(main(args.port, args.target))
