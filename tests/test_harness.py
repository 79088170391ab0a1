"""The harness itself, no root needed: a child that prints nothing, or not the
line awaited, fails its wait on time with the command and what it printed, and
is not left running; a test that hangs fails at its time limit."""
import os
import subprocess
import sys
import time

import pytest

from conftest import Lines, Workload


def started_and_gone(pidfile):
    pid = int(pidfile.read_text())
    return not os.path.exists(f"/proc/{pid}")


@pytest.mark.parametrize("script, message", [
    ("exec sleep 60", r": no \"ready\" within 2 s; nothing on its stdout"),
    ("echo tid main 42; printf half; exec sleep 60", r": no \"ready\" within 2 s; its stdout so far: 'tid main 42\\nhalf'"),
    ("echo oops; exit 3", r" \(exited 3\): its stdout ended before \"ready\"; its stdout so far: 'oops\\n'"),
], ids=["silent", "not-ready", "exits"])
def test_a_workload_that_never_says_ready_fails_on_time(tmp_path, script, message):
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"\['sh', '-c', .*\]" + message):
        Workload("sh", "-c", f"echo $$ > {pidfile}; {script}", timeout=2)
    assert time.monotonic() - t0 < 5
    assert started_and_gone(pidfile), "the workload was left running"


def test_a_silent_agent_fails_the_wait_for_its_first_line():
    proc = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"\['sleep', '60'\]: no its first line within 1 s; nothing on its stderr"):
            Lines(proc, proc.stderr).readline(1, "its first line")
        assert time.monotonic() - t0 < 3
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_hung_test_fails_at_its_time_limit(tmp_path, pytestconfig):
    assert float(pytestconfig.getini("timeout")) >= 900  # the suite's default, tests/pytest.ini
    (tmp_path / "test_hang.py").write_text(
        "import time, pytest\n\n@pytest.mark.timeout(1)\ndef test_hang():\n    time.sleep(60)\n")
    t0 = time.monotonic()
    cp = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert cp.returncode == 1 and "Timeout (>1.0s)" in cp.stdout, cp.stdout + cp.stderr
    assert time.monotonic() - t0 < 30
