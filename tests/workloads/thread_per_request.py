"""A thread-per-request HTTP server (the standard library's ThreadingHTTPServer: a new
thread for every connection) under a steady load of short requests (issue 18, point 7).

  python thread_per_request.py

A client process (the network) sends one request per connection as fast as it is
answered. Prints "tid MainThread <tid>", then "ready"; every second after that
"served <n>": the requests answered so far (each by a thread of its own). Runs until
killed; the client ends with it.
"""
import http.client
import http.server
import multiprocessing
import os
import threading
import time

served = [0]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        served[0] += 1

    def log_message(self, *args):
        pass


def client(port, parent):
    while os.getppid() == parent:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/")
            c.getresponse().read()
            c.close()
        except OSError:
            time.sleep(0.01)
        time.sleep(0.002)


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="acceptor", daemon=True).start()
    multiprocessing.get_context("fork").Process(target=client, args=(server.server_address[1], os.getpid()), daemon=True).start()
    print("tid MainThread", threading.get_native_id())
    print("ready", flush=True)
    while True:
        time.sleep(1)
        print("served", served[0], flush=True)


if __name__ == "__main__":
    main()
