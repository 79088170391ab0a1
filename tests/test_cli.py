"""The command line's habits: -p, options from WAITMETER_* environment variables,
shell completions and man pages that work in their real consumers (bash, groff)."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, WAITMETER, Workload, which


def run(*args, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("WAITMETER_")}
    full.update(env or {})
    cp = subprocess.run([str(WAITMETER), *map(str, args)], capture_output=True, text=True, timeout=60, env=full)
    return cp.returncode, cp.stdout, cp.stderr.strip()


@pytest.fixture(scope="module")
def sleeper(workload_bin):
    with Workload(workload_bin, "--sleep", 1) as w:
        yield w


@pytest.mark.needs_root
def test_options_come_from_the_environment_and_the_command_line_wins(sleeper):
    env = {"WAITMETER_PID": str(sleeper.pid), "WAITMETER_DURATION": "0.5", "WAITMETER_OUTPUT": "json"}
    rc, out, err = run("attach", env=env)
    assert rc == 0, err
    report = json.loads(out)
    assert report["pid"] == sleeper.pid and report["duration_s"] == pytest.approx(0.5, abs=0.3), report["duration_s"]
    # a value on the command line is used, the environment's not even parsed
    rc, out, err = run("attach", "-p", sleeper.pid, "--duration", "1.5", env={**env, "WAITMETER_DURATION": "soon"})
    assert rc == 0, err
    assert json.loads(out)["duration_s"] == pytest.approx(1.5, abs=0.3)


def test_a_bad_value_from_the_environment_names_its_variable():
    rc, _, err = run("attach", "-p", "1", env={"WAITMETER_DURATION": "soon"})
    assert rc == 2
    first = err.splitlines()[0]
    assert first.startswith("waitmeter: ") and "WAITMETER_DURATION" in first and "unset" in first, err
    assert "soon" in err and "--duration" in err, err
    # the same value on the command line: clap's message alone
    rc, _, err = run("attach", "-p", "1", "--duration", "soon")
    assert rc == 2 and "WAITMETER_" not in err, err
    # switches take 1/0, yes/no, on/off, true/false; false leaves run with nothing to watch
    rc, _, err = run("run", env={"WAITMETER_ALL": "0"})
    assert rc == 2 and "nothing to watch" in err, err
    rc, _, err = run("run", "--listen", "nonsense", env={"WAITMETER_ALL": "yes"})
    assert rc == 2 and "nonsense" in err and "nothing to watch" not in err, err
    # a malformed PID
    rc, _, err = run("run", env={"WAITMETER_PID": "12x"})
    assert rc == 2 and "WAITMETER_PID" in err.splitlines()[0], err


def test_help_names_the_variables():
    for sub, var in (("attach", "WAITMETER_STACKS"), ("run", "WAITMETER_WEB_CONFIG_FILE")):
        rc, out, _ = run(sub, "--help")
        assert rc == 0 and f"[env: {var}=" in out and "-p, --pid" in out, out


def bash_complete(line):
    """What bash completes for `line` (the cursor at its end) with the shipped script."""
    script = ROOT / "contrib" / "completions" / "waitmeter.bash"
    words = line.split(" ")
    prog = (f"source {script}\n"
            f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; COMP_LINE={line!r}; "
            f"COMP_POINT={len(line)}\n"
            f"_waitmeter waitmeter {words[-1]!r} {words[-2]!r}\n"
            "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    cp = subprocess.run(["bash", "--norc", "-c", prog], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.split()


def test_bash_completes_subcommands_options_and_values():
    assert which("bash")
    assert "attach" in bash_complete("waitmeter at")
    assert bash_complete("waitmeter run --max-p") == ["--max-processes"]
    assert set(bash_complete("waitmeter run --max-t")) == {"--max-threads", "--max-thread-labels"}
    assert set(bash_complete("waitmeter attach --stacks ")) == {"all", "python", "native", "none"}
    shells = {w for w in bash_complete("waitmeter completions ") if not w.startswith("-")}
    assert shells == {"bash", "zsh", "fish"}, shells
    # the script the binary prints is the one shipped
    rc, out, _ = run("completions", "bash")
    assert rc == 0 and out == (ROOT / "contrib" / "completions" / "waitmeter.bash").read_text()


def test_man_pages_render_without_warnings(tmp_path):
    assert which("groff"), "groff (groff-base) is installed by make setup"
    rc, _, err = run("man", "--dir", tmp_path)
    assert rc == 0, err
    pages = sorted(p.name for p in tmp_path.iterdir())
    assert pages == sorted(p.name for p in (ROOT / "docs" / "man").iterdir()), pages
    for page in tmp_path.iterdir():
        cp = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)], capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0 and not cp.stderr, (page.name, cp.stderr)
    rc, _, err = run("man", "--dir", tmp_path / "no" / "such")
    assert rc == 2 and "--dir" in err.splitlines()[-1], err


def test_the_systemd_unit_verifies_and_grants_only_the_three_capabilities(tmp_path):
    """contrib/systemd/waitmeter.service: checked by systemd's own parser (any unknown key or bad
    value is a message), an unprivileged user, exactly the capabilities that
    test_errors.py::test_a_user_with_only_the_three_capabilities_measures_python runs with."""
    assert which("systemd-analyze"), "systemd-analyze (systemd) is installed by make setup"
    unit = (ROOT / "contrib" / "systemd" / "waitmeter.service").read_text()
    keys = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys.setdefault(k.strip(), []).append(v.strip())
    assert keys["DynamicUser"] == ["yes"] and "User" not in keys, keys
    three = {"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"}
    assert set(keys["AmbientCapabilities"][0].split()) == three and set(keys["CapabilityBoundingSet"][0].split()) == three
    assert keys["ExecStart"] == ["/usr/local/bin/waitmeter run"] and "WAITMETER_ALL=true" in keys["Environment"][0]
    # verify needs the binary where ExecStart names it
    local = tmp_path / "waitmeter.service"
    local.write_text(unit.replace("/usr/local/bin/waitmeter", str(WAITMETER)))
    cp = subprocess.run(["systemd-analyze", "verify", "--man=no", str(local)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and not cp.stderr.strip(), cp.stderr
    # and it does catch a mistake
    local.write_text(unit.replace("/usr/local/bin/waitmeter", str(WAITMETER)).replace("AmbientCapabilities", "AmbientCapability"))
    cp = subprocess.run(["systemd-analyze", "verify", "--man=no", str(local)], capture_output=True, text=True, timeout=60)
    assert "Unknown key" in cp.stderr, cp.stderr
    # the environment the unit sets is one the agent takes
    rc, out, _ = run("run", "--help")
    assert rc == 0 and "WAITMETER_ALL" in out and "WAITMETER_LISTEN" in out


@pytest.mark.needs_root
@pytest.mark.parametrize("python", ["pyenv 3.12 (a shared libpython)", "/usr/bin/python3 (static)"])
def test_attach_runs_a_command_from_its_first_instruction_and_passes_its_exit_code(python, tmp_path):
    """`attach -- python3 launched.py`: the main thread's CPU time from its very first
    instruction (the interpreter's start and the 0.3 s burn before any thread exists) is in
    the report, the interpreter is found once it is up (a shared libpython is not mapped yet
    at the exec), w0 and w1 wait for the GIL behind each other, and the exit code is the
    script's."""
    from test_gil import pyenv_python
    py = pyenv_python(12) if python.startswith("pyenv") else "/usr/bin/python3"
    assert py and os.path.exists(py), python
    tids = tmp_path / "tids"
    cp = subprocess.run([str(WAITMETER), "attach", "--output", "json", "--", py, str(ROOT / "tests" / "workloads" / "launched.py"),
                         str(tids)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 3, cp.stderr
    truth = dict(line.split() for line in tids.read_text().splitlines())
    r = json.loads(cp.stdout)
    assert r["python"] and r["python"]["gil"] == "enabled", r["python"]
    rows = {str(t["tid"]): t for t in r["threads"]}
    main = rows[truth["MainThread"]]
    # from its first instruction: all of the main thread's own CPU time is there
    assert main["seconds"]["running"] >= 0.95 * float(truth["main_cpu"]) - 0.005, (main["seconds"], truth["main_cpu"])
    for me, other in (("w0", "w1"), ("w1", "w0")):
        row = rows[truth[me]]
        assert row["name"] == me, row["name"]
        gil = row["seconds"]["gil_wait"]
        assert gil >= 0.2, row["seconds"]
        assert row["gil_wait_by_holder"].get(truth[other], 0) >= 0.8 * gil, row["gil_wait_by_holder"]
    assert "until it exits" in cp.stderr


@pytest.mark.needs_root
def test_attach_a_command_exit_codes_and_a_command_that_cannot_run():
    rc, _, err = run("attach", "--", "/bin/sh", "-c", "exit 7")
    assert rc == 7, err
    rc, _, err = run("attach", "--", "/bin/sh", "-c", "kill -TERM $$")
    assert rc == 128 + 15, err
    rc, _, err = run("attach", "--", "/nonexistent/program")
    assert rc == 2 and err.splitlines()[-1].startswith("waitmeter: cannot run /nonexistent/program"), err
    rc, _, err = run("attach", "--duration", "1", "--", "/bin/true")
    assert rc == 2 and "--duration" in err, err


@pytest.mark.needs_root
def test_dump_shows_ingest_waiting_for_the_gil_behind_processor():
    """Issue 17's third test: `dump` on the GIL workload puts ingest first, waiting for the GIL
    behind processor, where it waits (blocking_call) and what processor ran (json.dumps); the
    processor is the thread that kept it waiting; MainThread, asleep, blames nobody."""
    from test_gil import pyenv_python
    py = pyenv_python(12)
    assert py, "pyenv 3.12 not installed here"
    with Workload(py, ROOT / "tests" / "workloads" / "gil_holder.py") as w:
        rc, out, err = run("dump", "-p", w.pid, "--output", "json")
        assert rc == 0, err
        d = json.loads(out)
        rc, text, err = run("dump", "-p", w.pid)
        assert rc == 0, err
    ingest, processor = w.tids["ingest"], w.tids["processor"]
    first = d["threads"][0]
    assert first["tid"] == ingest and first["state"] == "gil_wait", first
    assert first["behind"][0]["tid"] == processor and first["behind"][0]["share"] >= 0.8, first["behind"]
    assert first["stack"] and first["stack"][0].startswith("blocking_call (gil_holder.py:"), first["stack"]
    assert any(f.startswith("json.dumps (") for f in first["behind_stack"]), first["behind_stack"]
    rows = {t["tid"]: t for t in d["threads"]}
    assert rows[processor]["blocking"] == [ingest], rows[processor]
    main = rows[w.pid]
    assert main["state"] == "sleep" and not main["behind"] and not main["blocking"], main
    assert main["now"]["state"] == "S" and main["now"]["syscall"], main["now"]
    # the text says the same, first line first
    threads = [line for line in text.splitlines() if line.startswith("Thread ")]
    assert threads[0].startswith(f"Thread {ingest} ingest: waiting for the GIL") and f"behind processor ({processor})" in threads[0], text


@pytest.mark.needs_root
def test_dump_of_a_lock_waiter_and_a_process_that_is_gone(workload_bin):
    """A C process: the mutex waiter is blocked on a futex now (its word, from /proc), the
    sleepers blame nobody. A PID that does not exist: one line, exit code 2."""
    with Workload(workload_bin, "--mutex", "--sleep", 1) as w:
        rc, out, err = run("dump", "-p", w.pid, "--window", "0.5", "--output", "json")
    assert rc == 0, err
    rows = {t["tid"]: t for t in json.loads(out)["threads"]}
    waiter = rows[w.tids["waiter"]]
    assert waiter["state"] == "futex_wait" and waiter["now"]["syscall"] == "futex" and waiter["now"]["futex_word"].startswith("0x"), waiter
    sleeper = rows[w.tids["sleeper-0"]]
    assert sleeper["state"] == "sleep" and not sleeper["behind"], sleeper
    rc, _, err = run("dump", "-p", 4194303)
    assert rc == 2 and len(err.splitlines()) == 1 and "4194303" in err, err


def cgroup_dir():
    """A fresh cgroup and the path `--cgroup` takes for it (relative to /sys/fs/cgroup: v2 as
    is, v1 under its hierarchy's directory); removed afterwards."""
    base = Path("/sys/fs/cgroup")
    parent = base if (base / "cgroup.controllers").exists() else base / "cpu"
    cg = parent / f"wm-select-{os.getpid()}"
    cg.mkdir()
    return cg, "/" + str(cg.relative_to(base))


@pytest.mark.needs_root
def test_run_selects_processes_by_name_and_cgroup_now_and_later(tmp_path):
    """`run --comm NAME` watches the processes of that name, also one started after the agent;
    `run --cgroup PATH` those in the cgroup; a process of another name, or outside, stays out."""
    from conftest import Guard, free_port, wait_http
    named = tmp_path / "wm-sel-sleep"
    shutil.copy("/bin/sleep", named)
    procs = []

    def start(exe):
        p = subprocess.Popen([str(exe), "300"])
        procs.append(p)
        return p

    def watched(port):
        text = wait_http(f"http://127.0.0.1:{port}/metrics")
        return {int(m) for m in re.findall(r'^waitmeter_thread_seconds_total\{pid="(\d+)"', text, re.M)}

    def until(port, want, timeout=10):
        deadline = time.monotonic() + timeout
        while (got := watched(port)) & want != want and time.monotonic() < deadline:
            time.sleep(0.3)
        return got

    cg, cg_arg = cgroup_dir()
    try:
        early, other = start(named), start("/bin/sleep")
        port = free_port()
        with Guard(subprocess.Popen([str(WAITMETER), "run", "--comm", "wm-sel-sleep", "--listen", f"127.0.0.1:{port}"],
                                    stderr=subprocess.PIPE, text=True)):
            assert early.pid in until(port, {early.pid})
            late = start(named)
            got = until(port, {early.pid, late.pid})
            assert {early.pid, late.pid} <= got and other.pid not in got, (got, early.pid, late.pid, other.pid)
        inside, outside = start("/bin/sleep"), start("/bin/sleep")
        (cg / "cgroup.procs").write_text(str(inside.pid))
        for arg in (cg_arg, f"/sys/fs/cgroup{cg_arg}/"):
            port = free_port()
            with Guard(subprocess.Popen([str(WAITMETER), "run", "--cgroup", arg, "--listen", f"127.0.0.1:{port}"],
                                        stderr=subprocess.PIPE, text=True)):
                got = until(port, {inside.pid})
                assert inside.pid in got and outside.pid not in got and early.pid not in got, (arg, got)
        rc, _, err = run("run", "--cgroup", "relative/path")
        assert rc == 2 and "--cgroup relative/path" in err, err
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.mark.needs_root
def test_run_children_follows_a_process_descendants_now_and_later():
    """`run --pid P --children` exports P's series and its descendants', those it had and one it
    starts later (a grandchild too); a process outside its tree stays out. Without --pid it is
    refused with one line."""
    from conftest import Guard, free_port, wait_http
    # the shell's child now (a subshell whose own child is a grandchild), and one 2 s later
    parent = subprocess.Popen(["sh", "-c", "(sleep 300 & wait) & sleep 2; sleep 300 & wait"], start_new_session=True)
    outside = subprocess.Popen(["sleep", "300"])
    try:
        time.sleep(0.5)
        port = free_port()
        with Guard(subprocess.Popen([str(WAITMETER), "run", "--pid", str(parent.pid), "--children", "--listen", f"127.0.0.1:{port}"],
                                    stderr=subprocess.PIPE, text=True)):
            def tree():
                out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(parent.pid)], capture_output=True, text=True).stdout.split()
                kids = {int(p) for p in out}
                for k in list(kids):
                    kids |= {int(p) for p in subprocess.run(["ps", "-o", "pid=", "--ppid", str(k)], capture_output=True, text=True).stdout.split()}
                return kids | {parent.pid}
            # the later sleep has started (after the agent): the shell's children are its subshell
            # and "sleep 300", "sleep 2" has ended
            started = time.monotonic() + 15
            while sorted(subprocess.run(["ps", "-o", "args=", "--ppid", str(parent.pid)], capture_output=True, text=True).stdout.split("\n")[:-1]) \
                    != sorted(["sh -c (sleep 300 & wait) & sleep 2; sleep 300 & wait", "sleep 300"]):
                assert time.monotonic() < started, "the shell did not start its later sleep in 15 s"
                time.sleep(0.05)
            deadline = time.monotonic() + 15
            while True:
                text = wait_http(f"http://127.0.0.1:{port}/metrics")
                got = {int(m) for m in re.findall(r'^waitmeter_thread_seconds_total\{pid="(\d+)"', text, re.M)}
                want = tree()
                # the shell, its subshell and that one's sleep, and the later sleep
                if (len(want) >= 4 and want <= got) or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert len(want) >= 4 and want <= got and outside.pid not in got, (want, got, outside.pid)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the shell's whole tree (its own session)
        outside.kill()
        for p in (parent, outside):
            p.wait()
    rc, _, err = run("run", "--children")
    assert rc == 2 and "--pid" in err, err


@pytest.mark.needs_root
def test_a_process_that_exits_while_the_probes_load_leaves_the_others_measured():
    """`attach -p A,B` where B is there when the agent starts and gone before its probes have
    loaded (0.15 s; they take 0.4-0.7 s here): A is measured (one JSON line), B is named as gone
    before the window, and the exit code is 2. Alone, B is one clear line, not a missing PID."""
    stay = subprocess.Popen(["sleep", "30"])
    brief = subprocess.Popen(["sleep", "0.15"])
    try:
        rc, out, err = run("attach", "-p", f"{stay.pid},{brief.pid}", "--duration", "1", "--output", "json")
        brief.wait()
        alone = subprocess.Popen(["sleep", "0.15"])
        rc1, out1, err1 = run("attach", "-p", str(alone.pid), "--duration", "1")
        alone.wait()
    finally:
        stay.kill()
        stay.wait()
    assert rc == 2, err
    reports = [json.loads(line) for line in out.splitlines()]
    assert [r["pid"] for r in reports] == [stay.pid], out[:300]
    assert err.splitlines()[-1] == f"waitmeter: process {brief.pid} exited before the window opened: no report of it", err
    assert rc1 == 2 and out1 == "", (rc1, out1)
    assert err1.strip() == f"waitmeter: process {alone.pid} exited while the probes loaded, before the window opened: nothing to measure", err1


def test_attach_several_processes_at_once(workload_bin):
    """`attach -p A,B`: one window, a report per process (JSON Lines), each with only its own
    threads and its own culprits; one that exits meanwhile ends its report there, the other
    goes on, and the exit code says which exited."""
    from test_gil import pyenv_python
    py = pyenv_python(12)
    assert py, "pyenv 3.12 not installed here"
    with Workload(py, ROOT / "tests" / "workloads" / "gil_holder.py") as g, \
            Workload(workload_bin, "--pinned-pair", 0, "--exit-after", 3000) as c:
        rc, out, err = run("attach", "-p", f"{g.pid},{c.pid}", "--duration", "4", "--output", "json")
    reports = [json.loads(line) for line in out.splitlines()]
    assert [r["pid"] for r in reports] == [g.pid, c.pid], out[:500]
    gil, pair = reports
    assert {t["tid"] for t in gil["threads"]} == {g.pid, *g.tids.values()}, gil["threads"]
    ingest = next(t for t in gil["threads"] if t["tid"] == g.tids["ingest"])
    assert ingest["gil_wait_by_holder"].get(str(g.tids["processor"]), 0) >= 0.8 * ingest["seconds"]["gil_wait"] > 0.3, ingest
    assert gil["exited"] is False and gil["duration_s"] >= 3.9, (gil["exited"], gil["duration_s"])
    # the C process exited 3 s after it was ready (less the agent's start, by the test's clock):
    # its report ends there, with its own threads only
    truth = c.ready_at + 3.0 - pair["started_unix_s"]
    assert truth >= 0.3, (truth, "the agent took too long to load")
    assert pair["exited"] is True and abs(pair["exited_after_s"] - truth) <= 0.15, (pair["exited"], pair.get("exited_after_s"), truth)
    assert {t["name"] for t in pair["threads"]} >= {"spin-a", "spin-b"} and not {t["name"] for t in pair["threads"]} & {"ingest", "processor"}
    assert rc == 2 and f"process {c.pid} exited" in err.splitlines()[-1], err
