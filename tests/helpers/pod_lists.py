"""Pod lists in the Kubernetes API server's format, at the sizes of issue 54, served over HTTP as the
API server serves a large list (chunked), and the agent's peak RSS while it fetches one.

Shapes (a body generated once, its size measured, not assumed):
- `small`: N small pods, one container each (240,000 pods: 54 MiB, under the agent's 64 MiB bound;
  a cluster's whole list).
- `ordinary`: pods as a real cluster lists them: labels, ownerReferences, managedFields, a spec of two
  containers with env vars, probes, volumes, and a full status (500 pods: about 11 MB).
- `annotated`: pods whose creators gave them 20,000 small annotations each (50 pods: about 14.5 MB;
  anyone who may create a pod controls its annotations).

The truth is outside the agent: its VmHWM from /proc/PID/status, against the same agent's fetching a
one-pod list in the same run (the BPF maps and the rest of its memory are the same in both).
Used by tests/test_identity.py (the bound holds) and bench/bench.py (`pod-list`: peak RSS against
list size)."""
import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def cid(n):
    return f"{n:064x}"


def uid(n):
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def small_pod(i):
    return {"metadata": {"name": f"p-{i}", "namespace": "ns", "uid": uid(i)},
            "status": {"containerStatuses": [{"name": "c", "containerID": f"containerd://{cid(i)}"}]}}


def ordinary_pod(i):
    env = [{"name": f"SETTING_{k}", "value": f"value-{k}-" + "x" * 40} for k in range(60)]
    container = lambda name: {  # noqa: E731
        "name": name, "image": f"registry.example/team/{name}:1.2.3", "imagePullPolicy": "IfNotPresent",
        "args": ["--port=8080", "--log-level=info"], "env": env,
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "250m", "memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
        "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "token", "readOnly": True}],
    }
    fields = {f"f:{k}": {} for k in ("metadata", "spec", "status", "containers", "env", "ports", "resources", "volumes")}
    return {
        "metadata": {
            "name": f"checkout-7d9f8b-{i:05d}", "namespace": "shop", "uid": uid(i), "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-12-01T00:00:00Z", "generateName": "checkout-7d9f8b-",
            "labels": {"app": "checkout", "pod-template-hash": "7d9f8b", "team": "payments"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "checkout-7d9f8b", "uid": uid(i + 1),
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": m, "operation": "Update", "apiVersion": "v1", "time": "2026-12-01T00:00:00Z",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": fields, "f:status": fields}}
                              for m in ("kube-controller-manager", "kubelet", "kubectl")],
        },
        "spec": {"nodeName": "node-1", "serviceAccountName": "checkout", "containers": [container("app"), container("sidecar")],
                 "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.7", "hostIP": "192.168.0.2", "qosClass": "Burstable",
                   "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"}
                                  for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                   "containerStatuses": [{"name": n, "ready": True, "restartCount": 0, "image": f"registry.example/team/{n}:1.2.3",
                                          "imageID": "registry.example/team/app@sha256:" + "ab" * 32,
                                          "containerID": f"containerd://{cid(2 * i + k)}", "started": True,
                                          "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}
                                         for k, n in enumerate(("app", "sidecar"))]},
    }


def annotated_pod(i, annotations=20_000):
    pod = small_pod(i)
    pod["metadata"]["annotations"] = {f"a{k}": "v" for k in range(annotations)}
    return pod


SHAPES = {"small": small_pod, "ordinary": ordinary_pod, "annotated": annotated_pod}


def body(shape, pods):
    """The JSON body of a PodList of `pods` pods of `shape`."""
    items = ",".join(json.dumps(SHAPES[shape](i), separators=(",", ":")) for i in range(pods))
    return ('{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[' + items + "]}").encode()


class Server:
    """Answers every GET with `self.body`, chunked (as the API server answers a large list), 64 KiB a
    chunk; counts the answers it finished."""

    def __init__(self, data):
        self.body = data
        self.served = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                data = outer.body
                try:
                    for at in range(0, len(data), 65536):
                        piece = data[at:at + 65536]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    return  # the agent hung up (a list it refuses): not served
                outer.served += 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/pods"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for {pid}")


def peak_rss_fetching(waitmeter, target_pid, data, port, fetches=3, timeout=120):
    """The agent's peak RSS (KiB) once `run --pid TARGET --pods URL` fetched `data` `fetches` times.
    The agent is started and stopped here (by its PID)."""
    server = Server(data)
    agent = subprocess.Popen([str(waitmeter), "run", "--pid", str(target_pid), "--listen", f"127.0.0.1:{port}",
                              "--pods", server.url, "--pods-refresh", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        # a fetch is parsed whole when the next one starts (the agent parses before it asks again)
        while server.served < fetches + 1:
            if agent.poll() is not None:
                raise RuntimeError(f"the agent exited ({agent.returncode}): {agent.stderr.read()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server.served} fetches in {timeout} s")
            time.sleep(0.1)
        return vm_hwm_kib(agent.pid)
    finally:
        agent.terminate()
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        server.close()
