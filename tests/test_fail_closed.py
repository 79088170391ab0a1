"""Fail closed (issue 34): what an outside attacker or a careless operator did to the
endpoint, the age inputs and the files waitmeter touches, each against the real binary.
Every test here failed on 70bee40."""
import base64
import http.client
import http.server
import json
import os
import re
import socket
import ssl
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import WAITMETER, Guard, Workload, attach, free_port, wait_http
from pki import bcrypt_hash
from test_age import command, metric_values, rejected, sender
from test_endpoint import agent_with_web_config, make_pki, tls_get

pytestmark = pytest.mark.needs_root


def plain_status(port, path="/metrics"):
    """The status of a plain-HTTP GET, or None when no HTTP answer came (a TLS port)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, http.client.HTTPException):
        return None


def reloads(port, d):
    code, body = tls_get(port, "/metrics", d, "prometheus", "s3cret")
    assert code == 200, code
    return {k[len('{result="'):-len('"}')]: v for k, v in metric_values(body, "waitmeter_web_config_reloads_total").items()}


def after_a_reload_check(port, d):
    """Connections look at the file at most once a second: let one look, then one more."""
    time.sleep(1.2)
    try:
        tls_get(port, "/healthz", d)
    except OSError:
        pass
    time.sleep(0.2)


# --- 1. a reload never weakens the endpoint -----------------------------------------------------

def test_an_emptied_or_weakened_web_config_keeps_tls_and_auth(workload_bin, tmp_path):
    """`: > web.yml` used to turn TLS and auth off two seconds later, silently, for good.
    Emptied, replaced by a valid file without TLS or users, removed: TLS and auth stay, each
    refusal is an error line in the log and a count; a real rotation still goes through."""
    make_pki(tmp_path)
    web = tmp_path / "web.yml"
    hashed = bcrypt_hash("s3cret")
    strong = json.dumps({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
                         "basic_auth_users": {"prometheus": hashed}})
    web.write_text(strong)
    port = free_port()
    log = tmp_path / "agent.log"
    with Workload(workload_bin, "--pinned-pair", 0) as w, open(log, "w") as err:
        proc = subprocess.Popen([str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}",
                                 "--web.config.file", str(web)], stderr=err)
        with Guard(proc):
            deadline = time.monotonic() + 15
            while True:
                try:
                    if tls_get(port, "/healthz", tmp_path)[0] == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.1)
            assert plain_status(port) is None
            steps = [
                ("emptied", lambda: web.write_text(""), "failed"),
                ("no TLS, no users", lambda: web.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n"),
                 "refused_weaker"),
                ("users but no TLS", lambda: web.write_text(json.dumps({"basic_auth_users": {"prometheus": hashed}})),
                 "refused_weaker"),
                ("removed", lambda: web.unlink(), "failed"),
            ]
            seen = {"ok": 0, "failed": 0, "refused_weaker": 0}
            for what, change, result in steps:
                change()
                after_a_reload_check(port, tmp_path)
                assert plain_status(port) is None, f"{what}: plain HTTP answered"
                assert tls_get(port, "/metrics", tmp_path)[0] == 401, f"{what}: no auth asked"
                assert tls_get(port, "/metrics", tmp_path, "prometheus", "guess")[0] == 401, what
                seen[result] += 1
                assert reloads(port, tmp_path) == seen, what
            # as strong (another password): in force
            web.write_text(strong.replace(hashed, bcrypt_hash("n3w")))
            after_a_reload_check(port, tmp_path)
            assert tls_get(port, "/metrics", tmp_path, "prometheus", "n3w")[0] == 200
            assert tls_get(port, "/metrics", tmp_path, "prometheus", "s3cret")[0] == 401
            assert proc.poll() is None
    text = log.read_text()
    errors = [l for l in text.splitlines() if l.startswith("waitmeter: error: --web.config.file")]
    assert len(errors) == 4, text
    assert sum("keeping the previous configuration" in l for l in errors) == 2, errors
    assert sum("without TLS or basic auth: refused" in l or "without TLS: refused" in l for l in errors) == 2, errors


# --- 2. the age socket's path ------------------------------------------------------------------

def run_age_socket(path, timeout=20):
    return subprocess.run([str(WAITMETER), "run", "--pid", str(os.getpid()), "--listen", f"127.0.0.1:{free_port()}",
                           "--age-socket", str(path)], capture_output=True, text=True, timeout=timeout)


def one_line(cp):
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1, (cp.returncode, cp.stderr)
    return lines[0]


def test_the_age_socket_replaces_only_a_stale_socket(tmp_path):
    """`--age-socket /tmp/x.conf` used to delete x.conf, and made missing folders as root."""
    conf = tmp_path / "x.conf"
    conf.write_text("keep me\n")
    assert "is a regular file, not a socket" in one_line(run_age_socket(conf))
    assert conf.read_text() == "keep me\n"
    link = tmp_path / "link.sock"
    link.symlink_to(conf)
    assert "is a symbolic link" in one_line(run_age_socket(link))
    assert link.is_symlink() and conf.read_text() == "keep me\n"
    assert "is a folder" in one_line(run_age_socket(tmp_path))
    missing = tmp_path / "no" / "such" / "age.sock"
    assert "does not exist" in one_line(run_age_socket(missing))
    assert not (tmp_path / "no").exists()
    # a socket another process receives on is not taken over
    live = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    live.bind(str(tmp_path / "live.sock"))
    try:
        assert "a running process receives on that socket" in one_line(run_age_socket(tmp_path / "live.sock"))
        assert (tmp_path / "live.sock").exists()
    finally:
        live.close()
    # a stale one (left by an agent that died) is replaced, and the agent serves
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(stale))
    s.close()
    port = free_port()
    agent = subprocess.Popen([str(WAITMETER), "run", "--pid", str(os.getpid()), "--listen", f"127.0.0.1:{port}",
                              "--age-socket", str(stale)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with Guard(agent):
        wait_http(f"http://127.0.0.1:{port}/metrics", timeout=30)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        probe.connect(str(stale))  # the agent receives on it now
        probe.close()
    assert not stale.exists(), "the agent removes its own socket when it stops"


# --- 3. profile requests cannot starve scrapes -------------------------------------------------

def http_status(port, path, timeout=10.0):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__


def test_profile_floods_do_not_starve_scrapes_and_hung_up_profiles_stop(agent_for_profiles):
    """Bursts of 300 complete /debug/pprof/wait?seconds=1 requests every 0.3 s used to make a
    third of 32 concurrent scrapes fail with 503; four ?seconds=300 requests whose clients hung
    up after a second held every profile slot (429 for everyone) for five minutes."""
    port = agent_for_profiles
    stop = time.monotonic() + 8.0
    flood_answers = []

    def flood():
        request = b"GET /debug/pprof/wait?seconds=1 HTTP/1.1\r\nHost: x\r\n\r\n"
        while time.monotonic() < stop:
            t0 = time.monotonic()
            socks = []
            for _ in range(300):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(request)
                    socks.append(s)
                except OSError:
                    pass
            for s in socks:
                try:
                    flood_answers.append(s.recv(12)[9:12])
                except OSError:
                    flood_answers.append(b"err")
                finally:
                    s.close()
            time.sleep(max(0.0, 0.3 - (time.monotonic() - t0)))

    scrapes = []
    lock = threading.Lock()

    def scraper():
        while time.monotonic() < stop:
            code = http_status(port, "/metrics")
            with lock:
                scrapes.append(code)
            time.sleep(0.2)

    threads = [threading.Thread(target=flood)] + [threading.Thread(target=scraper) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    codes = {c: scrapes.count(c) for c in set(scrapes)}
    assert len(scrapes) >= 32 * 10 and codes == {200: len(scrapes)}, codes
    assert len(flood_answers) >= 1000 and flood_answers.count(b"429") >= 0.9 * len(flood_answers), \
        {c: flood_answers.count(c) for c in set(flood_answers)}

    # four long profiles whose clients hang up after a second: their recordings stop
    hung = []
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /debug/pprof/wait?seconds=300 HTTP/1.1\r\nHost: x\r\n\r\n")
        hung.append(s)
    time.sleep(1.0)
    for s in hung:
        s.close()
    deadline = time.monotonic() + 10
    while True:
        code = http_status(port, "/debug/pprof/wait?seconds=1", timeout=20)
        if code == 200:
            break
        assert code == 429 and time.monotonic() < deadline, code
        time.sleep(0.5)
    text = wait_http(f"http://127.0.0.1:{port}/metrics")
    assert metric_values(text, "waitmeter_http_connections_dropped_total")['{reason="client_gone"}'] >= 4
    # no socket of theirs is left in CLOSE-WAIT
    ss = subprocess.run(["ss", "-tn", "state", "close-wait", f"( sport = :{port} )"], capture_output=True, text=True, timeout=10)
    assert len(ss.stdout.strip().splitlines()) <= 1, ss.stdout


@pytest.fixture
def agent_for_profiles(workload_bin):
    port = free_port()
    with Workload(workload_bin, "--pinned-pair", 0) as w:
        agent = subprocess.Popen([str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with Guard(agent):
            wait_http(f"http://127.0.0.1:{port}/metrics", timeout=30)
            yield port
            assert agent.poll() is None


# --- 4. no user enumeration by timing ----------------------------------------------------------

def test_unknown_and_known_users_cost_the_same(workload_bin, tmp_path):
    """bcrypt cost 10: an unknown user used to take 0.29-0.38 s, a known one with a wrong
    password 0.08-0.12 s. Medians of interleaved attempts now agree within 25%."""
    web = tmp_path / "web.yml"
    web.write_text(json.dumps({"basic_auth_users": {"prometheus": bcrypt_hash("s3cret", cost=10),
                                                    "grafana": bcrypt_hash("other", cost=10)}}))
    port = free_port()

    def timed(user, password):
        auth = base64.b64encode(f"{user}:{password}".encode()).decode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Basic {auth}"})
        t0 = time.monotonic()
        try:
            urllib.request.urlopen(req, timeout=10).read()
            code = 200
        except urllib.error.HTTPError as e:
            code = e.code
        return code, time.monotonic() - t0

    with agent_with_web_config(workload_bin, port, web, lambda: plain_status(port, "/healthz") == 200):
        assert timed("prometheus", "s3cret")[0] == 200  # the control: the right password
        known, unknown = [], []
        for i in range(15):
            for user, out in (("prometheus", known), (f"nobody{i}", unknown)):
                code, took = timed(user, "guess")
                assert code == 401
                out.append(took)
    k, u = statistics.median(known), statistics.median(unknown)
    assert 0.75 <= u / k <= 1.25, (k, u, known, unknown)


# --- 5. absurd ages -----------------------------------------------------------------------------

class AgeEndpoint:
    """An application's /metrics whose age gauge says whatever the test sets."""

    def __init__(self):
        self.value = "0.5"
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = f"# TYPE lag gauge\nlag {outer.value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("value", ["1e308", "-1.9", "-1e308", "NaN", "+Inf", "-Inf", "700000"])
def test_an_age_that_is_no_age_is_refused_and_counted(workload_bin, value):
    """1e308 printed a 309-digit age and `mean inf s`; -1 made a false finding (`above its
    -1.90 s objective`); NaN and infinities were dropped uncounted. The control: 0.5 is taken."""
    ep = AgeEndpoint()
    try:
        with Workload(workload_bin, "--pinned-pair", 0) as w:
            age = ["--age-url", ep.url, "--age-metric", "lag", "--age-interval", "0.2"]
            ep.value = "0.5"
            good, _ = attach(w.pid, 1.5, *age)
            ep.value = value
            report, cp = attach(w.pid, 1.5, *age)
            text = subprocess.run([str(WAITMETER), "attach", "--pid", str(w.pid), "--duration", "1.5", *age],
                                  capture_output=True, text=True, timeout=60)
            port = free_port()
            agent = subprocess.Popen([str(WAITMETER), "run", "--pid", str(w.pid), "--listen", f"127.0.0.1:{port}", *age],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with Guard(agent):
                url = f"http://127.0.0.1:{port}/metrics"
                wait_http(url, timeout=30)
                deadline = time.monotonic() + 10
                while True:
                    m = wait_http(url)
                    errs = metric_values(m, "waitmeter_age_scrape_errors_total")
                    if errs.get('{reason="out_of_range"}', 0) >= 3 or time.monotonic() > deadline:
                        break
                    time.sleep(0.3)
    finally:
        ep.close()
    assert good["age"] is not None and good["age"]["last_s"] == 0.5, good["age"]
    assert report["age"] is None, report["age"]
    assert not any("objective" in v or "age" in v.split(":")[0] for v in report["verdict"]), report["verdict"]
    assert "is no age" in cp.stderr, cp.stderr
    assert text.returncode == 0
    assert not re.search(r"\d{20}|\binf\b|\bnan\b|e\+?308", text.stdout, re.I), text.stdout
    assert errs['{reason="out_of_range"}'] >= 3, errs
    assert "waitmeter_app_age_seconds{" not in m


def test_client_records_that_are_no_ages_are_refused_and_counted(tmp_path):
    sock = tmp_path / "age.sock"
    from test_age import age_agent, ages_of, until
    with sender(sock) as w, age_agent(sock, [w.pid]) as url:
        for age in ["1e308", "-1e308", "-1.9", "nan", "inf", "700000"]:
            assert command(w, f"claim {w.pid} {w.pid} 5 {age}") == ["sent", "5"]
        text = until(url, lambda t: rejected(t).get("out_of_range") == 30)[-1]
        assert ages_of(text, w.pid) == []
        # the control: a real age is taken
        assert command(w, f"claim {w.pid} {w.pid} 1 2.5") == ["sent", "1"]
        text = until(url, lambda t: ages_of(t, w.pid) == [2.5])[-1]
    assert rejected(text)["out_of_range"] == 30 and ages_of(text, w.pid) == [2.5], rejected(text)


# --- the same class elsewhere: the files the agent writes -------------------------------------

def test_a_profile_is_never_written_through_a_link_and_a_failed_run_keeps_the_old_one(workload_bin, tmp_path):
    """`attach --profile FILE` opened FILE with O_TRUNC at start: through a link planted at the
    path (a root agent truncated what it pointed at), and a run that failed left it empty."""
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    planted = tmp_path / "wait.pb.gz"
    planted.symlink_to(secret)
    with Workload(workload_bin, "--pinned-pair", 0) as w:
        attach(w.pid, 1.0, "--profile", planted)
    assert secret.read_text() == "root's\n"
    assert not planted.is_symlink() and planted.read_bytes()[:2] == b"\x1f\x8b", "a gzipped profile in place of the link"
    # a run that fails (no such process) leaves an earlier profile as it was, and no temporary file
    before = planted.read_bytes()
    cp = subprocess.run([str(WAITMETER), "attach", "--pid", "999999999", "--duration", "1", "--profile", str(planted)],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2, cp.stderr
    assert planted.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["secret", "wait.pb.gz"]


# --- 6. bounds said as they are -------------------------------------------------------------------

@pytest.mark.parametrize("args,said", [
    (["attach", "--pid", "1", "--duration", "100000000"], "give at most 31536000 seconds (365 days)"),
    (["attach", "--pid", "1", "--duration", "0"], "give at least 0.001 seconds"),
    (["attach", "--pid", "1", "--interval", "0.000001"], "give at least 0.05 seconds"),
    (["attach", "--pid", "1", "--age-slo", "1e308"], "give at most 604800 seconds (7 days)"),
    (["run", "--all", "--max-thread-labels", "100000000"], "give a whole number from 1 to 1000"),
])
def test_out_of_range_numbers_name_their_bound(args, said):
    cp = subprocess.run([str(WAITMETER), *args], capture_output=True, text=True, timeout=20)
    assert cp.returncode == 2 and said in cp.stderr, (cp.returncode, cp.stderr)
