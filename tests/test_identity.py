"""Which pod is that? (issue 39). Real processes in real cgroups shaped as each container runtime
and cgroup driver names them (cgroup v2 and v1 hierarchies of this machine), watched by `waitmeter
run`, named from a pod list served locally the way the API server and the kubelet answer it
(`v1.PodList` JSON), while that server answers, changes, refuses, answers garbage, stalls and goes
away. The ground truth is what the test put where: the ID in each cgroup's name and the names in
the list it serves.

No cluster runs here: the cgroup paths are those the runtimes write (docs/deployment.md, "Which
pod is that?"), the answers are PodLists as the API server serves them."""
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import WAITMETER, Guard, free_port, wait_http

pytestmark = pytest.mark.needs_root

V2 = Path("/sys/fs/cgroup/unified")
V1 = Path("/sys/fs/cgroup/cpu")
COMM = "wm-id-sleep"


def cid(n):
    return f"{n:02x}" * 32


class PodListServer:
    """Answers GET /pods with the PodList of `pods` (mode "ok"), or 403, garbage, or no answer at all
    (mode "stall"); counts the requests and keeps their Authorization headers."""

    def __init__(self):
        self.pods = []
        self.mode = "ok"
        self.requests = 0
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.requests += 1
                if outer.mode == "stall":
                    outer.release.wait(60)
                    return
                if outer.mode == "forbidden":
                    body = json.dumps({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403}).encode()
                    self.send_response(403)
                elif outer.mode == "garbage":
                    body = b"<html>this is not a pod list</html>"
                    self.send_response(200)
                else:
                    body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                       "items": outer.pods}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/pods"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def pod(namespace, name, uid, containers, annotations=None):
    """A pod as the API server lists it: metadata, spec, and a status naming each started container."""
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": {"app": name.split("-")[0]},
                     "annotations": annotations or {}},
        "spec": {"nodeName": "node-1", "containers": [{"name": c, "image": "example/app:1"} for c, _ in containers]},
        "status": {"phase": "Running", "podIP": "10.0.0.7",
                   "containerStatuses": [{"name": c, "ready": True, "restartCount": 0, "image": "example/app:1",
                                          "containerID": f"containerd://{i}" if i else "", "started": bool(i)}
                                         for c, i in containers]},
    }


def info(text):
    """pid -> the labels of its waitmeter_process_info series."""
    out = {}
    for labels in re.findall(r"^waitmeter_process_info\{(.*)\} 1", text, re.M):
        d = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels))
        out[int(d["pid"])] = d
    return out


def counter(text, result):
    m = re.search(rf'^waitmeter_pod_list_fetches_total\{{result="{result}"\}} (\S+)', text, re.M)
    return float(m.group(1)) if m else None


def test_every_runtime_shape_is_named_and_the_names_follow_the_pod_list(tmp_path):
    """Each process' `waitmeter_process_info` carries the container ID and runtime its cgroup
    names, its pod's UID, and the namespace, pod and container the pod list gives; a host process
    says `runtime="host"`. A container that starts later is named within seconds; names outlive a
    server that refuses, answers garbage, stalls or goes away, every failure is counted by its
    kind, and no scrape waits for the server."""
    if not (V2 / "cgroup.procs").exists() or not (V1 / "cgroup.procs").exists():
        pytest.fail("this test needs the cgroup v2 hierarchy at /sys/fs/cgroup/unified and v1's cpu at /sys/fs/cgroup/cpu")
    top = f"wm-id-{os.getpid()}"
    u = [str(uuid.uuid4()) for _ in range(6)]
    us = [x.replace("-", "_") for x in u]
    # (hierarchy, path under the test's own parent, expected runtime, container ID, pod UID)
    shapes = {
        "systemd-containerd": (V2, f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{us[0]}.slice/cri-containerd-{cid(1)}.scope", "containerd", cid(1), u[0]),
        "systemd-crio": (V2, f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{us[1]}.slice/crio-{cid(2)}.scope", "crio", cid(2), u[1]),
        "crio-conmon": (V2, f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{us[1]}.slice/crio-conmon-{cid(2)}.scope", "host", "", None),
        "docker-systemd": (V2, f"system.slice/docker-{cid(3)}.scope", "docker", cid(3), None),
        "podman": (V2, f"machine.slice/libpod-{cid(4)}.scope", "podman", cid(4), None),
        "host-service": (V2, "system.slice/wm-test.service", "host", "", None),
        "cgroupfs-containerd": (V1, f"kubepods/burstable/pod{u[2]}/{cid(5)}", "unknown", cid(5), u[2]),
        "cgroupfs-crio": (V1, f"kubepods/besteffort/pod{u[3]}/crio-{cid(6)}", "crio", cid(6), u[3]),
        "docker-cgroupfs": (V1, f"docker/{cid(7)}", "unknown", cid(7), None),
    }
    server = PodListServer()
    server.pods = [
        pod("shop", "checkout-7d9f8b-x2k4p", u[0], [("app", cid(1))]),
        pod("data", "ingest-0", u[1], [("worker", cid(2))], {"pyroscope.io/service_name": "ingest"}),
        pod("web", "api-5c6d7-abcde", u[2], [("api", cid(5))]),
        # its container's status has no ID yet: the pod is named by its UID
        pod("jobs", "batch-28411", u[3], [("runner", "")]),
    ]
    sleep = tmp_path / COMM
    shutil.copy("/bin/sleep", sleep)
    made, procs = [], {}

    def place(name, hierarchy, rel):
        d = hierarchy / top / rel
        d.mkdir(parents=True, exist_ok=True)
        made.append(d)
        p = subprocess.Popen([str(sleep), "300"])
        procs[name] = p
        (d / "cgroup.procs").write_text(str(p.pid))
        return p

    port = free_port()
    base = f"http://127.0.0.1:{port}/metrics"
    agent = None
    try:
        for name, (h, rel, *_rest) in shapes.items():
            place(name, h, rel)
        outside = subprocess.Popen([str(sleep), "300"])
        procs["outside"] = outside
        agent = subprocess.Popen([str(WAITMETER), "run", "--comm", COMM, "--listen", f"127.0.0.1:{port}",
                                  "--pods", server.url, "--pods-refresh", "1"], stderr=subprocess.PIPE, text=True)
        with Guard(agent):
            wait_http(base)

            def scrape():
                t0 = time.monotonic()
                text = wait_http(base)
                return text, time.monotonic() - t0

            def until(check, timeout=15.0):
                deadline = time.monotonic() + timeout
                while True:
                    text, _ = scrape()
                    if check(text) or time.monotonic() > deadline:
                        return text
                    time.sleep(0.3)

            want_pids = {p.pid for p in procs.values()}
            text = until(lambda t: want_pids <= set(info(t)) and info(t)[procs["systemd-containerd"].pid].get("pod"))
            got = info(text)
            for name, (_h, _rel, runtime, container_id, pod_uid) in shapes.items():
                labels = got.get(procs[name].pid)
                assert labels, (name, text)
                assert labels["runtime"] == runtime, (name, labels)
                assert labels.get("container_id", "") == container_id, (name, labels)
                assert labels.get("pod_uid") == pod_uid, (name, labels)
                assert labels["comm"] == COMM
            assert got[outside.pid]["runtime"] == "host" and "container_id" not in got[outside.pid]
            named = lambda name: {k: got[procs[name].pid].get(k) for k in ("namespace", "pod", "container", "service_name")}
            assert named("systemd-containerd") == {"namespace": "shop", "pod": "checkout-7d9f8b-x2k4p", "container": "app", "service_name": "shop/app"}
            assert named("systemd-crio") == {"namespace": "data", "pod": "ingest-0", "container": "worker", "service_name": "ingest"}
            assert named("cgroupfs-containerd") == {"namespace": "web", "pod": "api-5c6d7-abcde", "container": "api", "service_name": "web/api"}
            # named by its pod's UID: no container name
            assert named("cgroupfs-crio") == {"namespace": "jobs", "pod": "batch-28411", "container": None, "service_name": "jobs/batch-28411"}
            for name in ("docker-systemd", "podman", "docker-cgroupfs", "host-service", "crio-conmon"):
                assert named(name) == dict.fromkeys(("namespace", "pod", "container", "service_name")), (name, got[procs[name].pid])
            assert counter(text, "ok") >= 1 and counter(text, "forbidden") == 0, text

            # a pod that starts later: its process is watched at once, named once the list has it
            late_uid = str(uuid.uuid4())
            late = place("late", V2, f"kubepods.slice/kubepods-pod{late_uid.replace('-', '_')}.slice/cri-containerd-{cid(8)}.scope")
            text = until(lambda t: late.pid in info(t))
            assert info(text)[late.pid].get("container_id") == cid(8) and "pod" not in info(text)[late.pid], info(text)[late.pid]
            server.pods = server.pods + [pod("shop", "cart-0", late_uid, [("cart", cid(8))])]
            text = until(lambda t: info(t).get(late.pid, {}).get("container") == "cart", timeout=10)
            assert info(text)[late.pid].get("pod") == "cart-0", info(text)[late.pid]

            # the server refuses, then answers garbage: each counted, the names kept
            for mode, result in (("forbidden", "forbidden"), ("garbage", "bad_response")):
                server.mode = mode
                before = counter(text, result)
                text = until(lambda t: counter(t, result) > before)
                assert counter(text, result) > before, (mode, text)
                assert info(text)[procs["systemd-containerd"].pid].get("pod") == "checkout-7d9f8b-x2k4p", mode

            # the server takes the request and never answers: scrapes do not wait, the fetch times out
            server.mode = "stall"
            before = counter(text, "timeout")
            slowest = 0.0
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                text, took = scrape()
                slowest = max(slowest, took)
                if counter(text, "timeout") > before:
                    break
                time.sleep(0.5)
            assert counter(text, "timeout") > before, text
            assert slowest < 2.0, f"a scrape took {slowest:.2f} s while the pod list server stalled"
            assert info(text)[procs["systemd-crio"].pid].get("container") == "worker"

            # the server goes away
            server.close()
            before = counter(text, "unreachable")
            text = until(lambda t: counter(t, "unreachable") > before)
            assert counter(text, "unreachable") > before, text
            assert info(text)[late.pid].get("container") == "cart"
            assert agent.poll() is None
    finally:
        server.close()
        for p in procs.values():
            p.kill()
            p.wait()
        for d in sorted(made, key=lambda p: len(p.parts), reverse=True):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
        for h in (V1, V2):
            parents = sorted((p for p in (h / top).rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for d in parents + [h / top]:
                try:
                    d.rmdir()
                except OSError:
                    pass


def test_bad_pod_sources_are_refused_with_one_line():
    """A --pods value that is not a source, `api` without a node name or outside a cluster, and a
    token over plain http are each refused with one line naming the fix, exit code 2, before
    anything is loaded."""
    cases = [
        (["--pods", "kubelet"], "auto, api, off"),
        (["--pods", "api"], "--node-name"),
        (["--pods", "api", "--node-name", "node-1"], "KUBERNETES_SERVICE_HOST"),
        (["--pods", "api", "--node-name", "Node_1"], "not a Kubernetes node name"),
        (["--pods", "http://127.0.0.1:1/pods", "--pods-token-file", "/etc/hostname"], "https"),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_") and k != "NODE_NAME"}
    for args, want in cases:
        r = subprocess.run([str(WAITMETER), "run", "--pid", "1", "--listen", "127.0.0.1:0", *args],
                           capture_output=True, text=True, timeout=30, env=env)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and want in r.stderr, (args, r.returncode, r.stderr)
