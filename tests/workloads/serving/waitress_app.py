"""waitress (threaded WSGI server) whose one slow request holds the GIL.

  python waitress_app.py [--port 0] [--target 0.2] [--threads 4]

waitress's main thread runs the asyncore-style poll loop (TcpWSGIServer.run ->
wasyncore.loop -> select) that accepts and reads every request and hands it to one
of its worker threads ("waitress-N"). GET /report makes a worker render a large
JSON report (render_report: one json.dumps call of TARGET seconds, which never
releases the GIL); GET /ping answers "ok". While the report renders, the main thread
cannot take the GIL back from its select() to read the next ping, nor can a free
worker run: the pings wait. Prints "port <port>", "rows <n> <seconds of one
render>", "tid loop <native TID of the main thread>", "tid waitress-<i> <TID>" for
each worker, then "ready".
"""
import argparse
import json
import threading

from waitress.server import create_server

from report import calibrate

ROWS = []


def render_report():
    return json.dumps(ROWS)


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/report":
        body = render_report().encode()
        ctype = "application/json"
    elif path == "/ping":
        body, ctype = b"ok\n", "text/plain"
    else:
        start_response("404 Not Found", [("Content-Length", "0")])
        return [b""]
    start_response("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body)))])
    return [body]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    ROWS[:], took = calibrate(args.target)
    print("rows", len(ROWS), f"{took:.3f}", flush=True)
    server = create_server(app, host="127.0.0.1", port=args.port, threads=args.threads)
    print("port", server.effective_port)
    print("tid loop", threading.get_native_id())  # the thread that calls server.run() below
    for t in threading.enumerate():
        if t.name.startswith("waitress-"):
            print("tid", t.name, t.native_id)
    print("ready", flush=True)
    server.run()


if __name__ == "__main__":
    main()
