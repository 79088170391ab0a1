"""An application serving age metrics with known values through the real
prometheus_client (PyPI), the way applications do (its WSGI app), next to
many metrics the agent has no use for:

  app_lag_seconds{session="a"} 2.5, {session="b"} 7   gauge
  app.lag.seconds 4.25                                gauge with a UTF-8 name
  app_age_seconds                                     histogram (client_golang's default buckets):
                                                      0.75 every 20 ms, each with an exemplar
  app_messages_total 42                               counter whose last exemplar is 2
  app_stage_<i>_seconds, i < 50                       histograms nobody asked for

prometheus_client writes exemplars only in OpenMetrics, when the scraper asks
for it (Accept: application/openmetrics-text).

  python age_app.py PORT LOG [--broken-lines]

Every request is logged to LOG as one JSON line: its query string (decoded
`name[]` values too) and the size of the body answered. --broken-lines puts a
malformed line and a line that is not UTF-8 at the top of every body (the
rest is the library's own). Prints "ready" once it listens; runs until killed.
"""
import json
import sys
import threading
import time
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from socketserver import ThreadingMixIn

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

GO_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

port, log_path = int(sys.argv[1]), sys.argv[2]
broken = "--broken-lines" in sys.argv[3:]

registry = CollectorRegistry()
lag = Gauge("app_lag_seconds", "Age of the last message, by session.", ["session"], registry=registry)
lag.labels("a").set(2.5)
lag.labels("b").set(7)
Gauge("app.lag.seconds", "The same with a UTF-8 name.", registry=registry).set(4.25)
age = Histogram("app_age_seconds", "Age of each message.", buckets=GO_BUCKETS, registry=registry)
msgs = Counter("app_messages", "Messages handled.", registry=registry)
msgs.inc(40, exemplar={"trace_id": "first"})
msgs.inc(2, exemplar={"trace_id": "second"})
for i in range(50):
    h = Histogram(f"app_stage_{i}_seconds", f"Time in stage {i}.", ["route"], registry=registry)
    for route in ("/a", "/b"):
        h.labels(route).observe(0.01 * i)


def observe():
    i = 0
    while True:
        age.observe(0.75, exemplar={"trace_id": f"t{i}"})
        i += 1
        time.sleep(0.02)


threading.Thread(target=observe, daemon=True).start()

metrics = make_wsgi_app(registry)
log = open(log_path, "a", buffering=1)
lock = threading.Lock()


def app(environ, start_response):
    query = environ.get("QUERY_STRING", "")
    answer = {}

    def start(status, headers, exc_info=None):
        answer["status"] = status
        return start_response(status, headers, exc_info)

    body = b"".join(metrics(environ, start))
    if broken:
        body = b'app_lag_seconds{session="c" 3\napp_lag_seconds{session="\xff"} 9\n' + body
    with lock:
        log.write(json.dumps({"query": query, "names": parse_qs(query).get("name[]", []), "bytes": len(body),
                              "accept": environ.get("HTTP_ACCEPT", "")}) + "\n")
    return [body]


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


server = make_server("127.0.0.1", port, app, Server, handler_class=Quiet)
print("ready", flush=True)
server.serve_forever()
