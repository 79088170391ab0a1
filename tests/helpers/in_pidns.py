"""Runs inside `unshare --pid --fork --mount-proc`: the agent and a workload in
a new PID namespace, as in a pod with shareProcessNamespace. Prints one JSON
object for the test to check; every process it starts is ended before it exits.

usage: in_pidns.py attach WAITMETER WORKLOAD [workload args...]
       in_pidns.py run-all WAITMETER WORKLOAD PORT [workload args...]
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from conftest import Workload, stop, wait_http  # noqa: E402


def main():
    mode, waitmeter, workload = sys.argv[1:4]
    out = {"ns_self_pid": os.getpid()}
    if mode == "attach":
        with Workload(workload, *sys.argv[4:]) as w:
            cp = subprocess.run([waitmeter, "attach", "--pid", str(w.pid), "--duration", "1.5", "--output", "json"],
                                capture_output=True, text=True, timeout=60)
            out.update(pid=w.pid, tids=w.tids, rc=cp.returncode, stderr=cp.stderr,
                       report=json.loads(cp.stdout) if cp.stdout.strip() else None)
    elif mode == "run-all":
        port = sys.argv[4]
        url = f"http://127.0.0.1:{port}/metrics"
        agent = subprocess.Popen([waitmeter, "run", "--all", "--listen", f"127.0.0.1:{port}"],
                                 stderr=subprocess.PIPE, text=True)
        try:
            out["before"] = wait_http(url)
            with Workload(workload, *sys.argv[5:]) as w:  # started after the agent
                time.sleep(2.5)  # discovery runs every second
                out.update(pid=w.pid, tids=w.tids, during=wait_http(url))
            time.sleep(2.5)
            out["after"] = wait_http(url)
        finally:
            stop(agent, grace=10)
            out["agent_rc"] = agent.returncode
            out["agent_stderr"] = agent.stderr.read()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
