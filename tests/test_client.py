"""waitmeter_client (clients/python), no agent needed and no root: the
application's sends never block, whether nobody listens or the agent stops reading."""
import contextlib
import email.parser
import importlib.util
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import zipfile

import pytest

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


# Threads calling observe_age at once, on the module's counters. `sockets`: how many sockets the
# client made (socket.socket slowed down by 10 ms, so that threads racing on first use would each
# make one). The counters' race needs a thread switch between the load and the store of
# `_sent += 1`: CPython 3.8/3.9 switch at almost any instruction and lose updates free-running,
# 3.10+ (3.11 here) only at calls and backward jumps, so free-running never there. PREEMPT=1
# makes it certain on any of them: a tracer on the client's own frames sleeps before each store
# to a module global, handing the GIL to another thread inside such a read-modify-write.
THREADS = """
import dis, json, os, socket, sys, threading, time
import waitmeter_client as w
THREADS, CALLS = 8, 5000
sys.setswitchinterval(1e-6)
made = []
class SlowSocket(socket.socket):
    def __init__(self, *args, **kwargs):
        made.append(1)
        time.sleep(0.01)
        super().__init__(*args, **kwargs)
socket.socket = SlowSocket
pauses = []
def opcode_events():  # as the threads below trace: CPython 3.12.1 then gives no opcode events at all
    events = []
    def probe():
        return 1
    def each(frame, event, arg):
        events.append(event)
        return each
    def calls(frame, event, arg):
        if frame.f_code is probe.__code__:
            frame.f_trace_opcodes = True
            return each
        return None
    sys.settrace(calls)
    probe()
    probe()  # 3.12 and 3.13 give none in a code's first traced call
    sys.settrace(None)
    return "opcode" in events
if os.environ.get("PREEMPT") == "1":
    if not opcode_events():
        print(json.dumps({"skip": f"Python {sys.version.split()[0]} gives a tracer no opcode events"}))
        sys.exit(0)
    client = {f.__code__ for f in vars(w).values() if getattr(f, "__module__", None) == w.__name__}
    STORE_GLOBAL = dis.opmap["STORE_GLOBAL"]
    def opcodes(frame, event, arg):
        if event == "opcode" and frame.f_code.co_code[frame.f_lasti] == STORE_GLOBAL:
            pauses.append(1)
            time.sleep(1e-5)
        return opcodes
    def calls(frame, event, arg):
        if frame.f_code in client:
            frame.f_trace_opcodes = True
            return opcodes
        return None
    threading.settrace(calls)
start = threading.Barrier(THREADS)
def work():
    start.wait()
    for i in range(CALLS):
        w.observe_age(0.001 * i)
threads = [threading.Thread(target=work) for _ in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"calls": THREADS * CALLS, "sent": w.sent(), "dropped": w.dropped(),
                  "sockets": len(made), "pauses": len(pauses), "pid": os.getpid()}))
"""


@pytest.mark.parametrize("preempt", [False, True], ids=["free-running", "preempted-at-stores"])
def test_counters_are_exact_and_one_socket_is_made_under_concurrency(tmp_path, preempt):
    path = tmp_path / "agent.sock"
    agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    agent.bind(str(path))
    # The queue of a Unix datagram socket is bounded by net.unix.max_dgram_qlen datagrams (10 by
    # default), whatever its SO_RCVBUF: a reader that falls behind makes the client drop, which
    # is counted too. Every datagram the client says it sent must arrive, and none more.
    agent.settimeout(0.1)
    received = []
    done = threading.Event()

    def read():
        while not done.is_set():
            with contextlib.suppress(socket.timeout):
                received.append(agent.recv(64))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        r = run_client(THREADS, {"WAITMETER_SOCKET": str(path), "PREEMPT": "1" if preempt else "0"})
    finally:
        done.set()
        reader.join()
        agent.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:  # what was queued when the reader stopped
                received.append(agent.recv(64))
        agent.close()
    if "skip" in r:
        pytest.skip(r["skip"])
    assert r["sent"] + r["dropped"] == r["calls"], r
    assert r["sent"] == len(received) and r["sent"] > 0, (r, len(received))
    assert r["sockets"] == 1, r
    assert all(len(d) == 28 and d[:4] == b"WMA1" and struct.unpack_from("<I", d, 4)[0] == r["pid"]
               for d in received)
    if preempt:
        assert r["pauses"] > 0, "the tracer never paused before a global store: the test tests nothing"


FORK = """
import json, os, signal, threading, time, waitmeter_client as w
w.observe_age(1.0)
parent_sock = w._socket()
held, release = threading.Event(), threading.Event()
def hold():  # another thread is inside the client's lock when the process forks
    with w._lock:
        held.set()
        release.wait()
t = threading.Thread(target=hold)
t.start()
held.wait()
pid = os.fork()
if pid == 0:
    w.observe_age(2.0)  # the lock's holder does not exist in the child
    w.observe_age(3.0)
    os._exit(0 if w._socket() is not parent_sock and w.sent() + w.dropped() == 3 else 1)
release.set()
t.join()
deadline = time.monotonic() + 10
while (st := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
    time.sleep(0.01)
if st[0] == 0:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(json.dumps({"blocked": st[0] == 0, "exit": os.waitstatus_to_exitcode(st[1]) if st[0] else None}))
"""


def test_a_forked_child_has_its_own_socket_and_never_blocks_on_the_lock(tmp_path):
    r = run_client(FORK, {"WAITMETER_SOCKET": str(tmp_path / "nobody.sock")})
    assert r == {"blocked": False, "exit": 0}, r


def test_the_client_passes_mypy_strict(tmp_path):
    if importlib.util.find_spec("mypy") is None:
        pytest.skip(f"mypy is not installed in {sys.executable} (pip install mypy)")
    cp = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                         str(CLIENT / "waitmeter_client")],
                        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr


@pytest.mark.timeout(300)
def test_the_client_wheel_is_typed_and_licensed_and_installs(tmp_path):
    # built from a copy: setuptools builds in the source tree (build/, *.egg-info)
    src = tmp_path / "src"
    shutil.copytree(CLIENT, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    out = tmp_path / "wheels"
    cp = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
                        capture_output=True, text=True, timeout=240)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    [whl] = out.glob("waitmeter_client-*-py3-none-any.whl")
    with zipfile.ZipFile(whl) as z:
        files = set(z.namelist())
        [dist_info] = {f.split("/")[0] for f in files if f.split("/")[0].endswith(".dist-info")}
        metadata = z.read(f"{dist_info}/METADATA").decode()
        license_text = z.read(f"{dist_info}/licenses/LICENSE").decode()
    assert "waitmeter_client/py.typed" in files and "waitmeter_client/__init__.py" in files, sorted(files)
    headers = email.parser.HeaderParser().parsestr(metadata)
    assert tuple(map(int, headers["Metadata-Version"].split("."))) >= (2, 4), headers["Metadata-Version"]
    assert headers["License-Expression"] == "Apache-2.0", metadata
    assert headers.get_all("License-File") == ["LICENSE"], metadata
    assert not [c for c in headers.get_all("Classifier", []) if c.startswith("License ::")], metadata
    assert "Apache License" in license_text and "Version 2.0" in license_text
    assert license_text == (CLIENT.parent.parent / "LICENSE").read_text(), "clients/python/LICENSE is not the repository's"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    cp = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(whl)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    code = ("import json, pathlib, waitmeter_client as w; "
            "print(json.dumps([w.__version__, w.__file__, (pathlib.Path(w.__file__).parent / 'py.typed').exists()]))")
    cp = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert cp.returncode == 0, cp.stderr
    version, where, typed = json.loads(cp.stdout)
    [declared] = re.findall(r'^version = "(.*)"$', (CLIENT / "pyproject.toml").read_text(), re.M)
    assert version == declared and whl.name.startswith(f"waitmeter_client-{declared}-"), (version, declared, whl.name)
    assert where.startswith(str(venv)) and typed, (where, typed)
