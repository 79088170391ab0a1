"""Wrong use gets one clear line naming the cause and the fix, and exit code 2."""
import subprocess

import pytest

from conftest import WAITMETER, Workload, free_port, which

pytestmark = pytest.mark.needs_root


def run(*args, prefix=()):
    cp = subprocess.run([*prefix, str(WAITMETER), *map(str, args)], capture_output=True, text=True, timeout=60)
    return cp.returncode, cp.stderr.strip()


def one_line(stderr):
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("waitmeter: "), stderr
    return lines[0]


@pytest.fixture(scope="module")
def sleeper(workload_bin):
    with Workload(workload_bin, "--sleep", 1) as w:
        yield w


def test_no_such_pid():
    rc, err = run("attach", "--pid", 4_000_000, "--duration", 1)
    assert rc == 2
    assert "no process with PID 4000000" in one_line(err)


def test_kernel_thread_is_refused():
    rc, err = run("attach", "--pid", 2, "--duration", 1)  # kthreadd
    assert rc == 2
    assert "kernel thread" in one_line(err)


@pytest.mark.parametrize(
    "drop, missing",
    [("cap_bpf,cap_sys_admin", "missing CAP_BPF ("), ("cap_perfmon,cap_sys_admin", "missing CAP_PERFMON (")],
)
def test_missing_capability_is_named(sleeper, drop, missing):
    assert which("capsh"), "capsh (libcap2-bin) is installed by make setup"
    rc, err = run("attach", "--pid", sleeper.pid, "--duration", 1, prefix=("capsh", f"--drop={drop}", "--", "-c", 'exec "$0" "$@"'))
    line = one_line(err)
    assert rc == 2, err
    assert missing in line and "setcap cap_bpf,cap_perfmon" in line, line


def test_not_root(sleeper):
    prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all")
    rc, err = run("attach", "--pid", sleeper.pid, "--duration", 1, prefix=prefix)
    line = one_line(err)
    assert rc == 2
    assert "missing CAP_BPF and CAP_PERFMON (not root)" in line and "sudo" in line, line


def test_kernel_without_btf(sleeper):
    # a kernel without /sys/kernel/btf/vmlinux is told to bring BTF with --btf;
    # a --btf file that does not exist takes the same path
    rc, err = run("attach", "--pid", sleeper.pid, "--duration", 1, "--btf", "/nonexistent/vmlinux.btf")
    assert rc == 2
    line = one_line(err)
    assert "no BTF file at /nonexistent/vmlinux.btf" in line and "BTFHub" in line, line


@pytest.mark.parametrize(
    "args, words",
    [
        (["attach", "--pid", "1", "--duration", "0"], "greater than 0"),
        (["attach", "--duration", "1"], "--pid"),
        (["attach", "--pid", "abc"], "invalid value"),
        (["run"], "--pid"),
        (["attach", "--pid", "1", "--output", "xml"], "invalid value"),
    ],
)
def test_bad_usage_exits_2(args, words):
    rc, err = run(*args)
    assert rc == 2
    assert words in err


def test_listen_address_in_use(sleeper):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc, err = run("run", "--pid", sleeper.pid, "--listen", f"127.0.0.1:{port}")
    assert rc == 2
    assert f"cannot listen on 127.0.0.1:{port}" in one_line(err)


def test_help_has_examples():
    for sub in ([], ["attach"], ["run"]):
        cp = subprocess.run([str(WAITMETER), *sub, "--help"], capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0
        assert "Examples:" in cp.stdout


def test_no_bpf_link_or_program_left_behind(sleeper):
    import time

    rc, _ = run("attach", "--pid", sleeper.pid, "--duration", 0.5)
    assert rc == 0
    # the kernel frees programs of a closed process asynchronously (RCU): allow it a moment
    deadline = time.monotonic() + 5
    while True:
        cp = subprocess.run(["bpftool", "prog", "show"], capture_output=True, text=True, check=True, timeout=30)
        left = [line for line in cp.stdout.splitlines() if "name sched_switch_" in line or "name task_ids" in line]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, cp.stdout
