"""waitmeter_client (clients/python), no agent needed and no root: the
application's sends never block, whether nobody listens or the agent stops reading."""
import json
import os
import socket
import subprocess
import sys

from conftest import CLIENT


def run_client(code, env):
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                        env={**os.environ, "PYTHONPATH": str(CLIENT), **env})
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


LOOP = """
import json, socket, time, waitmeter_client as w
N = 100_000
t = time.perf_counter()
for i in range(N):
    w.observe_age(0.001 * i)
took = time.perf_counter() - t
raw = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); raw.setblocking(False)
t = time.perf_counter()
for i in range(N):
    try:
        raw.sendto(b"x" * 28, w._path)
    except OSError:
        pass
raw_took = time.perf_counter() - t
print(json.dumps({"took": took, "raw": raw_took, "dropped": w.dropped(), "sent": w.sent()}))
"""


def test_client_with_no_agent_never_blocks_and_counts_drops(tmp_path):
    r = run_client(LOOP, {"WAITMETER_SOCKET": str(tmp_path / "nobody.sock")})
    assert r["dropped"] == 100_000 and r["sent"] == 0
    # no slower than a non-blocking sendto by more than the packing around it
    assert r["took"] <= 5 * r["raw"] + 1.0, r


def test_client_with_an_agent_that_stops_reading_never_blocks(tmp_path):
    path = tmp_path / "stuck.sock"
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stuck.bind(str(path))  # bound, never read: its queue fills
    try:
        r = run_client(LOOP, {"WAITMETER_SOCKET": str(path)})
    finally:
        stuck.close()
    assert r["sent"] > 0 and r["dropped"] > 0 and r["sent"] + r["dropped"] == 100_000, r
    assert r["took"] <= 5 * r["raw"] + 1.0, r
