"""The measuring clients: a process of their own each, outside the server, on blocking
sockets with timeouts (http.client, keep-alive, reconnecting after an error).

  python client.py ping PORT PATH START SECONDS INTERVAL
  python client.py slow PORT PATH START SECONDS PERIOD

START is a CLOCK_MONOTONIC time (Python's time.monotonic(), the same clock in every
process of the machine): both clients begin then and stop SECONDS later.
ping: one request every INTERVAL seconds on a fixed schedule (a slot missed while a
request was still waiting is skipped, not sent late); slow: one request every PERIOD
seconds (the next at once when one took longer). Each prints one JSON object on stdout:
{"requests": [[monotonic send time, seconds to the whole response, response bytes], ...],
 "errors": [[monotonic time, "what"], ...], "skipped": slots missed (ping)}.
"""
import http.client
import json
import sys
import time


def main():
    mode, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    start, seconds, step = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
    timeout = 5.0 if mode == "ping" else 30.0
    end = start + seconds
    requests, errors, skipped = [], [], 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.connect()  # not part of the first request's time
    slot = start
    while True:
        now = time.monotonic()
        if slot > now:
            time.sleep(slot - now)
        if time.monotonic() >= end:
            break
        t = time.monotonic()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            took = time.monotonic() - t
            if resp.status != 200:
                errors.append([t, f"status {resp.status}"])
            else:
                requests.append([t, took, len(body)])
        except (OSError, http.client.HTTPException) as e:
            errors.append([t, f"{type(e).__name__}: {e}"])
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            time.sleep(0.01)
        slot += step
        now = time.monotonic()
        if mode == "ping" and slot < now:  # slots that passed while this one waited
            missed = int((now - slot) / step) + 1
            skipped += missed
            slot += missed * step
        elif slot < now:
            slot = now
    conn.close()
    print(json.dumps({"mode": mode, "requests": requests, "errors": errors, "skipped": skipped}))


if __name__ == "__main__":
    main()
