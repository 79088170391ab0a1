"""A FastAPI service (uvicorn, one event loop) whose `/report` handler calls a synchronous
database driver (psycopg2) on the event loop: `fetch_daily_report` runs a query that takes the
server 150 ms (`pg_sleep`), and every other request waits for the loop meanwhile. `/ping` answers
at once. The database is a PostgreSQL server reached on its Unix socket.

  python db_handler.py SOCKET_DIR PG_PORT HTTP_PORT   the service: prints "tid loop <native id>",
                                                      then "ready"; runs until killed
  python db_handler.py client HTTP_PORT SECONDS [report]
        pings every 10 ms (and asks for /report every 0.5 s with `report`); at the end one JSON
        line: {"count", "p50", "max"} of the pings' latency (seconds, the client's own clock)
"""
import json
import sys
import threading
import time


def client(port, seconds, report):
    import httpx
    base = f"http://127.0.0.1:{port}"
    end = time.monotonic() + seconds

    def reports():
        with httpx.Client() as c:
            while time.monotonic() < end:
                c.get(base + "/report", timeout=30)
                time.sleep(0.5)

    if report:
        threading.Thread(target=reports, daemon=True).start()
    lat = []
    with httpx.Client() as c:
        while time.monotonic() < end:
            t0 = time.monotonic()
            c.get(base + "/ping", timeout=30)
            lat.append(time.monotonic() - t0)
            time.sleep(0.01)
    lat.sort()
    print(json.dumps({"count": len(lat), "p50": lat[len(lat) // 2], "max": lat[-1]}), flush=True)


def service(sock_dir, pg_port, http_port):
    import psycopg2
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()
    conn = psycopg2.connect(host=sock_dir, port=pg_port, user="postgres", dbname="postgres")
    conn.autocommit = True

    def fetch_daily_report():
        with conn.cursor() as cur:
            cur.execute("SELECT pg_sleep(0.15), count(*) FROM generate_series(1, 1000)")
            return cur.fetchone()[1]

    @app.get("/report")
    async def report():
        return {"rows": fetch_daily_report()}

    @app.get("/ping")
    async def ping():
        return "ok"

    config = uvicorn.Config(app, host="127.0.0.1", port=http_port, log_level="warning")
    server = uvicorn.Server(config)
    print("tid loop", threading.get_native_id(), flush=True)

    async def started():
        import asyncio
        while not server.started:
            await asyncio.sleep(0.05)
        print("ready", flush=True)

    async def main():
        import asyncio
        await asyncio.gather(server.serve(), started())

    import asyncio
    asyncio.run(main())


if __name__ == "__main__":
    if sys.argv[1] == "client":
        client(int(sys.argv[2]), float(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "report")
    else:
        service(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
