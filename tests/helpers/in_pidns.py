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
import urllib.request


def start_workload(binary, args):
    p = subprocess.Popen([binary, *args], stdout=subprocess.PIPE, text=True)
    tids = {}
    for line in p.stdout:
        if line.startswith("tid "):
            _, role, tid = line.split()
            tids[role] = int(tid)
        elif line.strip() == "ready":
            break
    return p, tids


def scrape(url, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main():
    mode, waitmeter, workload = sys.argv[1:4]
    out = {"ns_self_pid": os.getpid()}
    if mode == "attach":
        p, tids = start_workload(workload, sys.argv[4:])
        try:
            cp = subprocess.run([waitmeter, "attach", "--pid", str(p.pid), "--duration", "1.5", "--output", "json"],
                                capture_output=True, text=True, timeout=60)
            out.update(pid=p.pid, tids=tids, rc=cp.returncode, stderr=cp.stderr,
                       report=json.loads(cp.stdout) if cp.stdout.strip() else None)
        finally:
            p.kill()
            p.wait()
    elif mode == "run-all":
        port = sys.argv[4]
        url = f"http://127.0.0.1:{port}/metrics"
        agent = subprocess.Popen([waitmeter, "run", "--all", "--listen", f"127.0.0.1:{port}"],
                                 stderr=subprocess.PIPE, text=True)
        try:
            out["before"] = scrape(url)
            p, tids = start_workload(workload, sys.argv[5:])  # started after the agent
            try:
                time.sleep(2.5)  # discovery runs every second
                out.update(pid=p.pid, tids=tids, during=scrape(url))
            finally:
                p.kill()
                p.wait()
            time.sleep(2.5)
            out["after"] = scrape(url)
        finally:
            agent.terminate()
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
            out["agent_rc"] = agent.returncode
            out["agent_stderr"] = agent.stderr.read()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
