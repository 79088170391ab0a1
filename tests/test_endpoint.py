"""The /metrics endpoint against clients an outsider would point at it: slow
clients, floods of bad requests, a real Prometheus over TLS with client
certificates and basic auth (issue: defects found by outside tests)."""
import base64
import contextlib
import json
import os
import re
import select
import socket
import ssl
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import WAITMETER, Guard, Workload, free_port, prometheus
from pki import bcrypt_hash, self_signed, signed_by
from test_prometheus import pinned_pair_agent, query  # noqa: F401 (fixture)

pytestmark = pytest.mark.needs_root

HEAD_DEADLINE = 5.0  # agent/src/export/http.rs
MAX_CONNECTIONS = 256


def metric(text, name, **labels):
    """The value of one sample of the classic text format, or None."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pat = re.compile(rf"^{re.escape(name)}(?:\{{{re.escape(want)}\}})? (\S+)$" if want else rf"^{re.escape(name)} (\S+)$", re.M)
    m = pat.search(text)
    return float(m.group(1)) if m else None


def status_of(proc_pid, key):
    with open(f"/proc/{proc_pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def raw(port, data, timeout=5.0):
    """Send bytes, read the whole answer (the agent closes after one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except OSError:
            pass
        return out


@pytest.fixture
def agent(pinned_pair_agent):
    """`waitmeter run` on two threads pinned to one CPU: (agent process, port)."""
    _, port, proc = pinned_pair_agent
    return proc, port


@contextlib.contextmanager
def agent_with_web_config(workload_bin, port, web, ready, *extra):
    """`waitmeter run --web.config.file web` on the pinned pair, once `ready()` is true."""
    with Workload(workload_bin, "--pinned-pair", 0) as w:
        proc = subprocess.Popen([str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}",
                                 "--web.config.file", str(web), *extra], stderr=subprocess.PIPE, text=True)
        with Guard(proc):
            deadline = time.monotonic() + 10
            while True:
                try:
                    if ready():
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, "the agent did not come up with TLS"
                time.sleep(0.1)
            yield proc


def scrape(port, timeout=2.0):
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        body = r.read().decode()
        assert r.status == 200
    return time.monotonic() - t0, body


def test_slow_clients_do_not_deny_scrapes(agent):
    """64 clients trickle one header byte a second for 30 s (reconnecting when
    cut off, as an attacker would); a scraper asks every second: every scrape
    answers within 2 s, and no slow connection outlives the head deadline."""
    proc, port = agent
    stop = time.monotonic() + 30.0
    lifetimes, opened = [], [0]
    lock = threading.Lock()

    def trickler():
        while time.monotonic() < stop:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                time.sleep(0.1)
                continue
            with lock:
                opened[0] += 1
            t0 = time.monotonic()
            try:
                for b in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                    if time.monotonic() >= stop:
                        break
                    s.sendall(bytes([b]))
                    # a second until the next byte, watching for the agent closing the connection
                    if select.select([s], [], [], 1.0)[0] and not s.recv(1):
                        raise ConnectionResetError
            except OSError:
                with lock:
                    lifetimes.append(time.monotonic() - t0)
            finally:
                s.close()

    threads = [threading.Thread(target=trickler, daemon=True) for _ in range(64)]
    for t in threads:
        t.start()
    # every trickler connected once (its first connection counted) before the scrapes begin
    deadline = time.monotonic() + 10
    while opened[0] < len(threads):
        assert time.monotonic() < deadline, f"{opened[0]} of {len(threads)} tricklers connected in 10 s"
        time.sleep(0.01)
    latencies = []
    while time.monotonic() < stop:
        t0 = time.monotonic()
        latency, body = scrape(port, timeout=2.0)
        assert "waitmeter_thread_seconds_total" in body
        latencies.append(latency)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    for t in threads:
        t.join(timeout=10)
    print(f"scrapes {len(latencies)}, slowest {max(latencies) * 1000:.1f} ms, median {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms; "
          f"slow connections cut {len(lifetimes)}, longest lived {max(lifetimes, default=0):.2f} s")
    assert len(latencies) >= 25, latencies
    assert max(latencies) < 2.0, latencies
    # the deadline counts from accept: one byte a second never extends it
    assert lifetimes and max(lifetimes) < HEAD_DEADLINE + 2.0, sorted(lifetimes)[-5:]
    assert len(lifetimes) >= 64 * 3, (len(lifetimes), opened)
    _, body = scrape(port)
    dropped = metric(body, "waitmeter_http_connections_dropped_total", reason="head_timeout")
    assert dropped is not None and dropped >= len(lifetimes) * 0.9, (dropped, len(lifetimes))
    assert proc.poll() is None


def test_more_idle_connections_than_slots(agent):
    """400 connections that send nothing: the oldest are closed to make room,
    the scrape still answers, and the evictions are counted."""
    proc, port = agent
    idle = []
    try:
        for _ in range(400):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.5)
        latency, body = scrape(port, timeout=2.0)
        assert latency < 2.0
        evicted = metric(body, "waitmeter_http_connections_dropped_total", reason="evicted")
        # 400 idle + 1 scrape against 256 slots: at least 145 closed to make room
        assert evicted is not None and evicted >= 400 + 1 - MAX_CONNECTIONS, body
    finally:
        for s in idle:
            s.close()
    assert proc.poll() is None


def test_ten_thousand_bad_and_good_requests(agent):
    """Oversized heads, garbage, other methods, TLS and HTTP/2 on a plain port,
    and scrapes, 10,000 in all: the agent stays up, its memory and threads
    return to their level, and every kind gets its answer."""
    proc, port = agent
    kinds = [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 "),
        (b"HEAD /metrics HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 "),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", b"HTTP/1.1 405 "),
        (b"DELETE / HTTP/1.1\r\n\r\n", b"HTTP/1.1 405 "),
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", b"HTTP/1.1 431 "),
        (b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 100 + b"\r\n", b"HTTP/1.1 431 "),
        (os.urandom(64) + b"\r\n\r\n", b"HTTP/1.1 "),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(32) + b"\r\n\r\n", b"HTTP/1.1 400 "),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"HTTP/1.1 505 "),
        (b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", b"HTTP/1.1 400 "),
    ]
    pid = proc.pid
    for i in range(500):  # warm up: thread stacks, caches
        raw(port, kinds[i % len(kinds)][0])
    time.sleep(0.5)
    rss0 = status_of(pid, "VmRSS")
    for i in range(10_000):
        data, want = kinds[i % len(kinds)]
        out = raw(port, data)
        if i % 97 == 0:  # check a sample of the answers (all of them would double the run time)
            assert out.startswith(want), (data[:40], out[:80])
    time.sleep(1.0)
    rss1 = status_of(pid, "VmRSS")
    assert proc.poll() is None
    _, body = scrape(port)
    assert "waitmeter_thread_seconds_total" in body
    assert rss1 - rss0 < 8 * 1024, f"RSS grew {rss0} -> {rss1} kB over 10,000 requests"
    # connection threads are gone: back to the agent's own few
    assert status_of(pid, "Threads") < 12, status_of(pid, "Threads")
    assert metric(body, "waitmeter_http_requests_total", code="405") >= 2000
    assert metric(body, "waitmeter_http_requests_total", code="431") >= 2000


def test_head_allow_gzip_and_healthz(agent):
    import gzip

    _, port = agent
    r = raw(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    head, _, body = r.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and body == b"" and b"Content-Length: " in head
    r = raw(port, b"PUT /metrics HTTP/1.1\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 405") and b"\r\nAllow: GET, HEAD\r\n" in r
    r = raw(port, b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip, deflate\r\n\r\n")
    head, _, body = r.partition(b"\r\n\r\n")
    assert b"Content-Encoding: gzip" in head
    assert b"waitmeter_thread_seconds_total" in gzip.decompress(body)
    r = raw(port, b"GET /healthz HTTP/1.1\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 200") and r.endswith(b"\r\n\r\nok\n")


def test_renders_are_shared_by_a_burst_of_scrapes(agent):
    """50 scrapes at once: all answer, from at most a few renders (the
    exposition of a busy pair changes with every render, so equal bodies mean
    one render served many)."""
    _, port = agent
    bodies = []
    lock = threading.Lock()

    def one():
        _, b = scrape(port, timeout=5.0)
        with lock:
            bodies.append(b)

    ts = [threading.Thread(target=one) for _ in range(50)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(bodies) == 50
    assert len(set(bodies)) <= 3, len(set(bodies))


# --- TLS, client certificates, basic auth -------------------------------------------------------

def make_pki(d):
    """A CA, a server certificate for 127.0.0.1, and a client certificate."""
    self_signed(d, "ca")
    signed_by(d, "server", "ca", "serverAuth", san="IP:127.0.0.1,DNS:localhost")
    signed_by(d, "client", "ca", "clientAuth")


def tls_get(port, path, d, user=None, password=None, client_cert=True):
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    if client_cert:
        ctx.load_cert_chain(str(d / "client.crt"), str(d / "client.key"))
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_real_prometheus_scrapes_over_tls_with_client_cert_and_basic_auth(workload_bin, tmp_path):
    make_pki(tmp_path)
    hashed = bcrypt_hash("s3cret")
    web = tmp_path / "web.yml"
    # the exporter toolkit's format; relative paths are relative to the file
    web.write_text(json.dumps({
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                              "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "ca.crt"},
        "basic_auth_users": {"prometheus": hashed},
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
    }))
    port = free_port()
    tls = {"ca_file": str(tmp_path / "ca.crt"), "cert_file": str(tmp_path / "client.crt"), "key_file": str(tmp_path / "client.key")}
    target = [{"targets": [f"127.0.0.1:{port}"]}]
    jobs = [
        {"job_name": "waitmeter", "scheme": "https", "tls_config": tls, "static_configs": target,
         "basic_auth": {"username": "prometheus", "password": "s3cret"}},
        {"job_name": "wrong-password", "scheme": "https", "tls_config": tls, "static_configs": target,
         "basic_auth": {"username": "prometheus", "password": "guess"}},
        {"job_name": "no-client-cert", "scheme": "https", "tls_config": {"ca_file": str(tmp_path / "ca.crt")}, "static_configs": target,
         "basic_auth": {"username": "prometheus", "password": "s3cret"}},
        {"job_name": "plain-http", "static_configs": target},
    ]
    with agent_with_web_config(workload_bin, port, web, lambda: tls_get(port, "/healthz", tmp_path)[0] == 200,
                               "--timeline-minutes", "1") as proc:
        # no credentials, wrong ones: 401 with a challenge; /healthz needs none
        assert tls_get(port, "/metrics", tmp_path)[0] == 401
        # the kept timeline is behind the same lock (thread names, code: the process' insides)
        assert tls_get(port, "/debug/timeline?seconds=5&format=trace", tmp_path)[0] == 401
        assert tls_get(port, "/debug/timeline?seconds=5&format=trace", tmp_path, "prometheus", "guess")[0] == 401
        assert tls_get(port, "/metrics", tmp_path, "prometheus", "guess")[0] == 401
        assert tls_get(port, "/metrics", tmp_path, "nobody", "s3cret")[0] == 401
        code, body = tls_get(port, "/metrics", tmp_path, "prometheus", "s3cret")
        assert code == 200 and "waitmeter_thread_seconds_total" in body
        code, body = tls_get(port, "/debug/timeline?seconds=5&format=trace", tmp_path, "prometheus", "s3cret")
        assert code == 200 and json.loads(body)["traceEvents"], (code, body[:300])
        # no client certificate: the handshake fails
        with pytest.raises((ssl.SSLError, ConnectionResetError, urllib.error.URLError)):
            tls_get(port, "/healthz", tmp_path, client_cert=False)
        with prometheus(tmp_path, port, jobs=jobs) as base:
            deadline = time.monotonic() + 30
            while True:
                up = {dict(k)["job"]: v for k, v in query(base, "up").items()}
                if len(up) == 4:
                    break
                assert time.monotonic() < deadline, up
                time.sleep(0.5)
            series = query(base, 'waitmeter_thread_seconds_total{job="waitmeter",state="runqueue"}')
        assert up == {"waitmeter": 1.0, "wrong-password": 0.0, "no-client-cert": 0.0, "plain-http": 0.0}, up
        assert len(series) >= 2, series
        time.sleep(1.1)  # past the render cache
        code, body = tls_get(port, "/metrics", tmp_path, "prometheus", "s3cret")
        assert metric(body, "waitmeter_http_requests_total", code="401") >= 6
        assert metric(body, "waitmeter_http_connections_dropped_total", reason="tls_handshake") >= 2
        assert proc.poll() is None


def test_certificates_are_reloaded_when_they_change(workload_bin, tmp_path):
    """cert-manager rotates the files in place: new connections get the new
    certificate without a restart; a broken file keeps the last good one."""
    make_pki(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    port = free_port()

    def served_cert():
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
                return t.getpeercert(binary_form=True)

    with agent_with_web_config(workload_bin, port, web, lambda: served_cert() is not None) as proc:
        first = served_cert()
        # a renewed certificate and key, written in place
        signed_by(tmp_path, "server", "ca", "serverAuth", san="IP:127.0.0.1")
        time.sleep(1.5)
        served_cert()  # the first connection after the change triggers the reload
        second = served_cert()
        assert second != first
        # a broken rewrite: the agent keeps serving the last good certificate
        (tmp_path / "server.crt").write_text("not a certificate\n")
        time.sleep(1.5)
        served_cert()
        assert served_cert() == second
        assert proc.poll() is None


def test_bad_web_config_is_one_clear_line(tmp_path):
    cases = {
        "tls_server_config:\n  cert_fle: x.pem\n": "unknown field",
        "basic_auth_users:\n  admin: hunter2\n": "not a bcrypt hash",
        "tls_server_config:\n  cert_file: nope.pem\n  key_file: nope.key\n": "failed to read certificate",
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n": None,  # the certificate fails first
    }
    for text, want in cases.items():
        web = tmp_path / "web.yml"
        web.write_text(text)
        cp = subprocess.run([str(WAITMETER), "run", "--all", "--listen", f"127.0.0.1:{free_port()}", "--web.config.file", str(web)],
                            capture_output=True, text=True, timeout=20)
        assert cp.returncode == 2, (text, cp.returncode, cp.stderr)
        lines = cp.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("waitmeter: bad --web.config.file"), cp.stderr
        if want:
            assert want in lines[0], lines[0]


def test_closed_stdout_is_not_a_panic(workload_bin):
    """`attach --output json | head -c 100` ends quietly with exit code 0."""
    with Workload(workload_bin, "--pinned-pair", 0) as w:
        cp = subprocess.run(["bash", "-c", f"{WAITMETER} attach --pid {w.pid} --duration 1 --output json | head -c 100 >/dev/null; "
                             "echo \"exit=${PIPESTATUS[0]}\" >&2"], capture_output=True, text=True, timeout=30)
    assert "exit=0" in cp.stderr, cp.stderr
    assert "panicked" not in cp.stderr and "RUST_BACKTRACE" not in cp.stderr, cp.stderr
