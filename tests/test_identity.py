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
import urllib.request
import re
import shutil
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import ROOT, WAITMETER, Guard, Workload, free_port, prometheus, wait_http
from test_gil import STARVE, pyenv_python

import sys  # noqa: E402
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import pod_lists  # noqa: E402
import pyroscope_receiver  # noqa: E402

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


def remove_cgroups(top):
    """Every cgroup under `top` (the test's own) and `top` itself, deepest first, once their
    processes are gone (a killed task leaves its cgroup a moment later)."""
    if not top.exists():
        return
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [top]:
        for _ in range(50):
            try:
                d.rmdir()
                break
            except OSError:
                time.sleep(0.1)


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
    procs = {}

    def place(name, hierarchy, rel):
        d = hierarchy / top / rel
        d.mkdir(parents=True, exist_ok=True)
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
        for h in (V1, V2):
            remove_cgroups(h / top)


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


def test_a_real_prometheus_alert_names_the_pod_of_the_starving_process(tmp_path):
    """The rules loaded in a real Prometheus that scrapes the node agent as the Prometheus
    Operator does (the agent's own pod as target labels, honor_labels so the process' labels
    win): a GIL-starving process in a pod-shaped cgroup raises WaitmeterGILStarvation naming its
    pod and container, from the pod list; a healthy process beside it raises nothing."""
    py12 = pyenv_python(12)
    if not py12:
        pytest.fail("pyenv 3.12 is not installed here (make setup installs it)")
    top = V2 / f"wm-alert-{os.getpid()}"
    uid = str(uuid.uuid4())
    cg = top / "kubepods.slice" / f"kubepods-pod{uid.replace('-', '_')}.slice" / f"cri-containerd-{cid(9)}.scope"
    server = PodListServer()
    server.pods = [pod("shop", "checkout-7d9f8b-x2k4p", uid, [("app", cid(9))])]
    port = free_port()
    try:
        cg.mkdir(parents=True)
        with Workload(py12, STARVE, "same") as starving, Workload(py12, STARVE, "separate") as control:
            (cg / "cgroup.procs").write_text(str(starving.pid))
            agent = subprocess.Popen(
                [str(WAITMETER), "run", "--pid", str(starving.pid), "--pid", str(control.pid), "--listen", f"127.0.0.1:{port}",
                 "--pods", server.url, "--pods-refresh", "1"], stderr=subprocess.PIPE, text=True)
            with Guard(agent):
                wait_http(f"http://127.0.0.1:{port}/metrics")
                rules = tmp_path / "rules.yaml"
                rules.write_text((ROOT / "dashboards" / "rules" / "waitmeter-rules.yaml").read_text().replace("[5m]", "[20s]"))
                job = {"job_name": "waitmeter", "honor_labels": True,
                       "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                                           "labels": {"namespace": "monitoring", "pod": "waitmeter-x7k2p", "container": "waitmeter"}}]}
                with prometheus(tmp_path, port, [rules], jobs=[job]) as base:
                    deadline = time.monotonic() + 90
                    gil = []
                    while time.monotonic() < deadline and not gil:
                        with urllib.request.urlopen(f"{base}/api/v1/alerts", timeout=5) as r:
                            active = json.load(r)["data"]["alerts"]
                        gil = [a for a in active if a["labels"]["alertname"] == "WaitmeterGILStarvation"]
                        time.sleep(1)
    finally:
        server.close()
        remove_cgroups(top)
    assert gil, "no GIL starvation alert"
    assert {a["labels"]["pid"] for a in gil} == {str(starving.pid)}, gil
    labels = gil[0]["labels"]
    assert (labels.get("namespace"), labels.get("pod"), labels.get("container"), labels.get("container_id")) == \
        ("shop", "checkout-7d9f8b-x2k4p", "app", cid(9)), labels
    assert "(pod shop/checkout-7d9f8b-x2k4p, container app)" in gil[0]["annotations"]["summary"], gil[0]
    assert "pod shop/checkout-7d9f8b-x2k4p, container app" in gil[0]["annotations"]["description"], gil[0]


def test_pushed_and_pulled_profiles_carry_the_pods_names(tmp_path):
    """A process of a pod whose pod list names it: its pushed wait profiles carry service_name
    from the pod's pyroscope.io/service_name annotation and its namespace, pod and container (as
    the faithful Pyroscope receiver decodes the push); a process of a pod without the annotation
    goes under namespace/container; the pulled /debug/pprof/wait labels the samples the same way."""
    py12 = pyenv_python(12)
    if not py12:
        pytest.fail("pyenv 3.12 is not installed here (make setup installs it)")
    top = V2 / f"wm-push-{os.getpid()}"
    uids = [str(uuid.uuid4()) for _ in range(2)]
    cgs = [top / "kubepods.slice" / f"kubepods-pod{u.replace('-', '_')}.slice" / f"cri-containerd-{cid(10 + i)}.scope"
           for i, u in enumerate(uids)]
    server = PodListServer()
    server.pods = [pod("shop", "checkout-7d9f8b-x2k4p", uids[0], [("app", cid(10))], {"pyroscope.io/service_name": "checkout"}),
                   pod("data", "ingest-0", uids[1], [("worker", cid(11))])]
    port = free_port()
    holder = ROOT / "tests" / "workloads" / "gil_holder.py"
    try:
        for cg in cgs:
            cg.mkdir(parents=True)
        with pyroscope_receiver.start() as r, Workload(py12, holder, "same") as a, Workload(py12, holder, "same") as b:
            for cg, w in zip(cgs, (a, b)):
                (cg / "cgroup.procs").write_text(str(w.pid))
            agent = subprocess.Popen(
                [str(WAITMETER), "run", "--pid", str(a.pid), "--pid", str(b.pid), "--listen", f"127.0.0.1:{port}",
                 "--pods", server.url, "--pods-refresh", "1", "--pyroscope-url", r.url, "--pyroscope-interval", "2"],
                stderr=subprocess.PIPE, text=True)
            with Guard(agent):
                wait_http(f"http://127.0.0.1:{port}/metrics")
                # the first push may leave before the first list: wait for named ones
                deadline = time.monotonic() + 30
                named = {}
                while time.monotonic() < deadline and len(named) < 2:
                    for series in r.wait_for(1, timeout=30):
                        if "pod" in series.labels:
                            named[series.labels["pid"]] = series.labels
                    time.sleep(0.5)
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/pprof/wait?seconds=2", timeout=30) as resp:
                    pulled = pyroscope_receiver.decode_pprof(resp.read())
    finally:
        server.close()
        remove_cgroups(top)
    comm = named.get(str(a.pid), {}).get("comm")
    assert named.get(str(a.pid)) == {"__name__": "waitmeter_wait", "service_name": "checkout", "pid": str(a.pid), "comm": comm,
                                     "namespace": "shop", "pod": "checkout-7d9f8b-x2k4p", "container": "app"}, named
    assert named.get(str(b.pid)) == {"__name__": "waitmeter_wait", "service_name": "data/worker", "pid": str(b.pid), "comm": comm,
                                     "namespace": "data", "pod": "ingest-0", "container": "worker"}, named
    by_pid = {}
    for smp in pulled["samples"]:
        by_pid.setdefault(smp["labels"].get("pid"), set()).add((smp["labels"].get("namespace"), smp["labels"].get("pod"), smp["labels"].get("container")))
    assert by_pid.get(str(a.pid)) == {("shop", "checkout-7d9f8b-x2k4p", "app")}, by_pid
    assert by_pid.get(str(b.pid)) == {("data", "ingest-0", "worker")}, by_pid


def test_attach_and_dump_name_the_pod_and_container_on_their_header(tmp_path):
    """`attach` and `dump` of a process in a pod's container name the pod and container on their
    header line (JSON: `container`), from the pod list (`--pods URL`); without a list, the
    container's ID and its pod's UID; a host process, nothing."""
    top = V2 / f"wm-attach-{os.getpid()}"
    uid = str(uuid.uuid4())
    cg = top / "kubepods.slice" / f"kubepods-pod{uid.replace('-', '_')}.slice" / f"cri-containerd-{cid(12)}.scope"
    server = PodListServer()
    server.pods = [pod("shop", "checkout-7d9f8b-x2k4p", uid, [("app", cid(12))])]
    sleep = tmp_path / COMM
    shutil.copy("/bin/sleep", sleep)
    inside = subprocess.Popen([str(sleep), "300"])
    host = subprocess.Popen([str(sleep), "300"])

    def run(*args):
        r = subprocess.run([str(WAITMETER), *map(str, args)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout

    def header(*args):
        """The report's header line (attach's live lines before it say "t=")."""
        return next((line for line in run(*args).splitlines() if re.match(r"waitmeter( dump)?: PID ", line)), "")

    try:
        cg.mkdir(parents=True)
        (cg / "cgroup.procs").write_text(str(inside.pid))
        named = f"pod shop/checkout-7d9f8b-x2k4p, container app (containerd {cid(12)[:12]})"
        head = header("attach", "--pid", inside.pid, "--duration", "1", "--pods", server.url)
        assert head.startswith(f"waitmeter: PID {inside.pid} ({COMM}), {named}, "), head
        report = json.loads(run("attach", "--pid", inside.pid, "--duration", "1", "--output", "json", "--pods", server.url))
        assert report["container"] == named, report.get("container")
        head = header("dump", "--pid", inside.pid, "--window", "0.5", "--pods", server.url)
        assert head.startswith(f"waitmeter dump: PID {inside.pid} ({COMM}), {named}, "), head
        # no list: the container's ID and its pod's UID
        head = header("dump", "--pid", inside.pid, "--window", "0.5", "--pods", "off")
        assert f", container {cid(12)[:12]} (containerd) of pod UID {uid}, " in head, head
        head = header("attach", "--pid", host.pid, "--duration", "1", "--pods", server.url)
        assert re.match(rf"waitmeter: PID {host.pid} \({COMM}\), \d+\.\d s, ", head), head
        assert "container" not in json.loads(run("dump", "--pid", host.pid, "--window", "0.5", "--output", "json"))
    finally:
        server.close()
        for p in (inside, host):
            p.kill()
            p.wait()
        remove_cgroups(top)


def test_the_pod_lists_memory_is_what_it_keeps_not_a_multiple_of_its_body():
    """Issue 54: the pod list's memory was 20-30 times its body (500 ordinary pods, 10.9 MB: 289 MB;
    50 pods of 20,000 annotations, 14.5 MB: 208 MB), against a chart limit of 192 MiB. Served as the
    API server serves it (chunked), each list costs the agent at most its body and a half over the
    same agent fetching a one-pod list (its VmHWM, read from /proc), and what is past the bounds is
    counted, not kept."""
    def peak(data):
        return pod_lists.peak_rss_fetching(WAITMETER, os.getpid(), data, free_port())

    base = peak(pod_lists.body("small", 1))
    seen = []
    for shape, pods in [("ordinary", 500), ("annotated", 50), ("small", 240_000)]:
        data = pod_lists.body(shape, pods)
        over = peak(data) - base
        seen.append((shape, pods, len(data) >> 10, over))
        assert over <= 1.5 * (len(data) >> 10) + 16 * 1024, f"{shape} x {pods}: {len(data) >> 10} KiB list, {over} KiB over the base; {seen}"

