"""The Helm chart (helm/waitmeter): lint, render, validate offline, and assert what it deploys.

No cluster and no container engine here: every scenario in helm/waitmeter/ci/*-values.yaml is
linted (`helm lint` and `helm lint --strict`), rendered (`helm template`) and each object is
validated against the Kubernetes 1.30 OpenAPI schemas with kubernetes-validate in strict mode
(no unknown fields). The Prometheus Operator kinds are not in those schemas: the
PrometheusRule's spec goes through `promtool check rules`, the ServiceMonitor is checked field
by field. The agent's rendered command line is parsed by the real agent binary.

helm: $HELM, else .tools/bin/helm (`make setup` builds it). A missing helm fails the tests.
"""
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import tomllib
import urllib.request
from functools import lru_cache
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "waitmeter"
HELM = Path(os.environ.get("HELM") or ROOT / ".tools" / "bin" / "helm")
WAITMETER = Path(os.environ.get("WAITMETER_BIN", ROOT / "agent" / "target" / "release" / "waitmeter"))
KUBE_VERSION = "1.30.0"
NAMESPACE = "waitmeter-test"
RELEASE = "wm"

# kubernetes-validate re-reads and parses its multi-megabyte schema files on every call: read
# each once per test run
kubernetes_validate.utils.schema_contents = lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)

SCENARIOS = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
DAEMONSET = ["daemonset-values.yaml", "daemonset-monitoring-values.yaml", "custom-args-values.yaml"]
SIDECAR = ["sidecar-values.yaml", "sidecar-own-workload-values.yaml", "sidecar-podmonitor-networkpolicy-values.yaml"]
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
AGENT_CAPS = {"BPF", "PERFMON", "SYS_PTRACE"}


def values_of(scenario):
    return yaml.safe_load((CHART / "ci" / scenario).read_text())


def enabled(scenario, section):
    """Whether a scenario's values switch `section.enabled` on (the chart's default: off)."""
    return bool(values_of(scenario).get(section, {}).get("enabled"))


def helm_bin():
    if not (HELM.is_file() and os.access(HELM, os.X_OK)):
        pytest.fail(f"helm not found at {HELM}: run `make setup` (builds it with go install) or set HELM=/path/to/helm")
    return str(HELM)


def run_helm(*args, cwd=None):
    return subprocess.run([helm_bin(), *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@lru_cache(maxsize=None)
def _template(chart, values, sets, kube=KUBE_VERSION):
    """kube=None: no --kube-version, Helm's own default capabilities (no cluster)."""
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE]
    if kube is not None:
        args += ["--kube-version", kube]
    for v in values:
        args += ["-f", str(v)]
    for s in sets:
        args += ["--set", s]
    p = run_helm(*args)
    return p.returncode, p.stdout, p.stderr


def render(scenario=None, sets=(), chart=CHART, kube=KUBE_VERSION):
    """Rendered objects of a scenario (a ci/ values file) plus --set overrides; fails on error."""
    values = (CHART / "ci" / scenario,) if scenario else ()
    rc, out, err = _template(chart, values, tuple(sets), kube)
    assert rc == 0, f"helm template {scenario} {list(sets)} failed:\n{err}"
    return [d for d in yaml.safe_load_all(out) if d]


def render_error(sets, scenario=None):
    values = (CHART / "ci" / scenario,) if scenario else ()
    rc, out, err = _template(CHART, values, tuple(sets))
    assert rc != 0, f"helm template {list(sets)} should have failed; it rendered:\n{out[:2000]}"
    return err


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def one(objs, kind):
    found = by_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def workload(objs):
    found = [o for o in objs if o["kind"] in ("DaemonSet", "Deployment")]
    assert len(found) == 1, f"expected one workload, got {[o['kind'] for o in found]}"
    return found[0]


def containers(objs):
    return {c["name"]: c for c in workload(objs)["spec"]["template"]["spec"]["containers"]}


def agent(objs):
    return containers(objs)["waitmeter"]


def render_with_agent(scenario, kube=KUBE_VERSION):
    """A scenario's objects; for one whose agent container goes into the user's own workload,
    the same values rendering the chart's example Deployment instead."""
    objs = render(scenario, kube=kube)
    if not [o for o in objs if o["kind"] in ("DaemonSet", "Deployment")]:
        objs = render(scenario, sets=("sidecar.deployment.enabled=true", "sidecar.deployment.app.image=app:1"), kube=kube)
    return objs


def test_scenarios_present():
    names = set(SCENARIOS)
    for required in DAEMONSET + SIDECAR:
        assert required in names, f"helm/waitmeter/ci/{required} is missing"


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "waitmeter"
    cargo = tomllib.loads((ROOT / "agent" / "Cargo.toml").read_text())
    assert chart["appVersion"] == cargo["package"]["version"], "appVersion must follow agent/Cargo.toml"
    for f in ("values.yaml", "values.schema.json", "templates/NOTES.txt", ".helmignore"):
        assert (CHART / f).is_file(), f"helm/waitmeter/{f} is missing"


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("strict, kube", [(False, KUBE_VERSION), (True, KUBE_VERSION), (True, None)],
                         ids=["lint", "lint-strict", "lint-strict-helm-default-kube"])
def test_lint(scenario, strict, kube):
    args = ["lint", str(CHART), "-f", str(CHART / "ci" / scenario), *(["--kube-version", kube] if kube else [])]
    p = run_helm(*args, *(["--strict"] if strict else []))
    assert p.returncode == 0, f"helm {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}"
    # helm lint reports a template's fail() as INFO and still passes: never accept one
    assert "Fail:" not in p.stdout + p.stderr, p.stdout + p.stderr


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_objects_validate_against_kubernetes_schemas(scenario):
    objs = render(scenario)
    assert objs, "nothing rendered"
    for o in objs:
        if o["kind"] in CRD_KINDS:
            continue  # checked by their own tests below
        try:
            kubernetes_validate.validate(o, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(f"{scenario}: {o['kind']}/{o['metadata']['name']} invalid for Kubernetes {KUBE_VERSION}: {path}: {e.message}")
        assert o["metadata"]["namespace"] == NAMESPACE or o["kind"] == "ConfigMap"


def minor(version):
    """"v1.30.2" -> 30"""
    return int(version.lstrip("v").split(".")[1])


@lru_cache(maxsize=None)
def helm_default_kube_version():
    """The Kubernetes version `helm template` assumes without a cluster or --kube-version: a
    constant compiled into the helm binary (v1.20.0 in a `go install` build, which lacks the
    release build's -ldflags), read from .Capabilities by a throwaway chart."""
    with tempfile.TemporaryDirectory() as d:
        chart = Path(d) / "caps"
        (chart / "templates").mkdir(parents=True)
        (chart / "Chart.yaml").write_text("apiVersion: v2\nname: caps\nversion: 0.1.0\n")
        (chart / "templates" / "caps.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: caps\n"
            "data:\n  kube: {{ .Capabilities.KubeVersion.Version | quote }}\n")
        p = run_helm("template", str(chart))
        assert p.returncode == 0, p.stderr
        return yaml.safe_load(p.stdout)["data"]["kube"]


def validate_for(objs, scenario, kube):
    for o in objs:
        if o["kind"] not in CRD_KINDS:
            try:
                kubernetes_validate.validate(o, kube, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{scenario}: {o['kind']} invalid for Kubernetes {kube}: {'.'.join(map(str, e.path))}: {e.message}")


def check_gated_fields(objs, kube):
    """Fields newer than the target cluster are left out: recursiveReadOnly and the
    appArmorProfile field exist from Kubernetes 1.30."""
    cg = mounts(agent(objs)).get("/sys/fs/cgroup")
    if cg:
        assert ("recursiveReadOnly" in cg) == (minor(kube) >= 30), (kube, cg)


@pytest.mark.parametrize("kube", ["1.25.0", "1.29.0", "1.33.0"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_objects_validate_for_other_kubernetes_versions(scenario, kube):
    """Fields newer than the cluster are left out (recursiveReadOnly exists from 1.30)."""
    objs = render_with_agent(scenario, kube=kube)
    validate_for(objs, scenario, kube)
    check_gated_fields(objs, kube)


# the oldest Kubernetes whose OpenAPI schemas kubernetes-validate carries
OLDEST_SCHEMA = "1.25.0"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_renders_without_a_cluster(scenario):
    """`helm template` with no --kube-version (Helm's default capabilities, v1.20.0 for a helm
    built with `go install`) renders every scenario: no kubeVersion constraint in Chart.yaml
    shuts it out, and the fields newer than that default are left out. The objects are
    validated against the default version's schemas, or the oldest kubernetes-validate has."""
    kube = helm_default_kube_version()
    objs = render_with_agent(scenario, kube=None)
    check_gated_fields(objs, kube)
    schema = kube.lstrip("v") if minor(kube) >= minor(OLDEST_SCHEMA) else OLDEST_SCHEMA
    validate_for(objs, scenario, schema)


@pytest.mark.parametrize("profile, annotation", [
    ("type=Unconfined", "unconfined"),
    ("type=RuntimeDefault", "runtime/default"),
    ("type=Localhost,securityContext.appArmorProfile.localhostProfile=waitmeter", "localhost/waitmeter"),
])
@pytest.mark.parametrize("scenario", ["daemonset-values.yaml", "sidecar-values.yaml"])
def test_apparmor_profile_is_a_field_from_1_30_and_the_annotation_before(scenario, profile, annotation):
    sets = (f"securityContext.appArmorProfile.{profile}",)
    key = "container.apparmor.security.beta.kubernetes.io/waitmeter"
    for kube in ("1.29.0", "1.30.0", None):
        objs = render(scenario, sets=sets, kube=kube)
        version = kube or helm_default_kube_version()
        validate_for(objs, scenario, version if minor(version) >= minor(OLDEST_SCHEMA) else OLDEST_SCHEMA)
        sc = agent(objs)["securityContext"]
        annotations = workload(objs)["spec"]["template"]["metadata"].get("annotations", {})
        if minor(version) >= 30:
            assert sc["appArmorProfile"]["type"] == profile.split(",")[0].split("=")[1] and key not in annotations
        else:
            assert "appArmorProfile" not in sc and annotations[key] == annotation, (kube, annotations)
    # podAnnotations stay beside it
    objs = render(scenario, sets=sets + ("podAnnotations.team=fix",), kube="1.29.0")
    assert workload(objs)["spec"]["template"]["metadata"]["annotations"] == {"team": "fix", key: annotation}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_agent_security_context(scenario):
    objs = render_with_agent(scenario)
    sc = agent(objs)["securityContext"]
    assert set(sc["capabilities"]["add"]) == AGENT_CAPS and len(sc["capabilities"]["add"]) == 3
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    # uid 0 with all but three capabilities dropped (a non-root uid would hold them only in
    # its bounding set)
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    pod = workload(objs)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    for key in ("hostNetwork", "hostIPC"):
        assert not pod.get(key), f"{key} must not be set"
    sa = one(objs, "ServiceAccount")
    assert sa["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    # nothing else in the release asks for the API server
    assert not [o for o in objs if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]


@pytest.mark.parametrize("scenario", DAEMONSET)
def test_daemonset_mode_uses_host_pid(scenario):
    objs = render(scenario)
    ds = one(objs, "DaemonSet")
    assert not by_kind(objs, "Deployment")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert "shareProcessNamespace" not in pod
    assert list(containers(objs)) == ["waitmeter"]


@pytest.mark.parametrize("scenario", SIDECAR)
def test_sidecar_mode_shares_the_pod_pid_namespace(scenario):
    objs = render(scenario)
    assert not by_kind(objs, "DaemonSet")
    for d in by_kind(objs, "Deployment"):
        pod = d["spec"]["template"]["spec"]
        assert pod["shareProcessNamespace"] is True
        assert "hostPID" not in pod


def mounts(container):
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def volumes(objs):
    return {v["name"]: v for v in workload(objs)["spec"]["template"]["spec"].get("volumes", [])}


def test_daemonset_mounts_only_the_host_cgroup_tree_read_only():
    objs = render("daemonset-values.yaml")
    m = mounts(agent(objs))
    assert list(m) == ["/sys/fs/cgroup"]
    assert m["/sys/fs/cgroup"]["readOnly"] is True
    assert m["/sys/fs/cgroup"]["recursiveReadOnly"] == "IfPossible"
    vols = volumes(objs)
    assert vols == {"host-cgroup": {"name": "host-cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}}}


def test_no_tracefs_debugfs_or_other_host_paths():
    # tp_btf tracepoints, the task iterator and uprobes through the perf PMU need neither
    # tracefs nor debugfs; BTF and the uprobe PMU are in the container's own /sys
    for scenario in SCENARIOS:
        objs = render_with_agent(scenario)
        for path in mounts(agent(objs)):
            assert not path.startswith(("/sys/kernel", "/proc", "/host")), f"{scenario}: unexpected mount {path}"
        host_paths = [v["hostPath"]["path"] for v in volumes(objs).values() if "hostPath" in v]
        allowed = {"/sys/fs/cgroup"} | ({"/var/lib/btf"} if scenario == "custom-args-values.yaml" else set())
        assert set(host_paths) <= allowed, f"{scenario}: host paths {host_paths}"


def test_sidecar_shares_the_age_socket_directory():
    objs = render("sidecar-values.yaml")
    c = containers(objs)
    assert list(c) == ["fix-gateway", "waitmeter"]
    assert mounts(c["waitmeter"]) == {"/run/waitmeter": {"name": "waitmeter-run", "mountPath": "/run/waitmeter"}}
    assert mounts(c["fix-gateway"])["/run/waitmeter"]["name"] == "waitmeter-run"
    env = {e["name"]: e["value"] for e in c["fix-gateway"]["env"]}
    assert env == {"WAITMETER_SOCKET": "/run/waitmeter/age.sock", "LOG_LEVEL": "info"}
    vols = volumes(objs)
    assert list(vols) == ["waitmeter-run"] and "emptyDir" in vols["waitmeter-run"]
    assert "--age-socket=/run/waitmeter/age.sock" in c["waitmeter"]["args"]
    # the application container is the user's, untouched
    assert c["fix-gateway"]["securityContext"]["runAsUser"] == 10001


def test_sidecar_without_the_socket_mounts_nothing():
    objs = render("sidecar-values.yaml", sets=("age.socket.enabled=false",))
    c = containers(objs)
    assert "volumeMounts" not in c["waitmeter"] and "volumeMounts" not in c["fix-gateway"]
    assert "volumes" not in workload(objs)["spec"]["template"]["spec"]
    assert not [a for a in c["waitmeter"]["args"] if a.startswith("--age-socket")]


def test_host_cgroup_mount_is_a_switch():
    off = render("daemonset-values.yaml", sets=("hostCgroup.mount=false",))
    assert "volumeMounts" not in agent(off) and "volumes" not in workload(off)["spec"]["template"]["spec"]
    on = render("sidecar-values.yaml", sets=("hostCgroup.mount=true",))
    assert mounts(agent(on))["/sys/fs/cgroup"]["readOnly"] is True


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_probes_and_resources(scenario):
    c = agent(render_with_agent(scenario))
    assert c["ports"] == [{"name": "metrics", "containerPort": c["ports"][0]["containerPort"], "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/", "port": "metrics"}
    res = c["resources"]
    for kind in ("requests", "limits"):
        assert set(res[kind]) == {"cpu", "memory"}, res
    assert res["limits"]["memory"].endswith("Mi") and int(res["limits"]["memory"][:-2]) >= int(res["requests"]["memory"][:-2])


DEFAULT_ARGS = ["run", "--all", "--listen=0.0.0.0:9747", "--max-threads=16384", "--max-processes=4096",
                "--max-thread-labels=20", "--gil-probe=futex"]


def test_default_command_line():
    c = agent(render("daemonset-values.yaml"))
    assert c["command"] == ["/usr/bin/waitmeter"]
    assert c["args"] == DEFAULT_ARGS
    assert c["image"] == "waitmeter:0.1.0"


def test_custom_command_line():
    c = agent(render("custom-args-values.yaml"))
    assert c["image"] == "registry.example.com/waitmeter:0.1.0-static"
    assert c["args"] == ["run", "--all", "--listen=0.0.0.0:9800", "--max-threads=65536", "--max-processes=8192",
                         "--max-thread-labels=50", "--gil-probe=uprobe", "--tid-labels", "-v",
                         "--btf=/btf/vmlinux.btf", "-v"]
    assert mounts(c) == {"/btf": {"name": "btf", "mountPath": "/btf", "readOnly": True}}
    ipv6 = agent(render("daemonset-values.yaml", sets=("agent.listenAddress=::",)))
    assert "--listen=[::]:9747" in ipv6["args"]


DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("scenario", ["daemonset-values.yaml", "sidecar-values.yaml"])
def test_image_digest_takes_precedence_over_the_tag(scenario):
    tagged = agent(render(scenario, sets=("image.repository=registry.example.com/waitmeter", "image.tag=0.1.0-static")))
    assert tagged["image"] == "registry.example.com/waitmeter:0.1.0-static"
    pinned = agent(render(scenario, sets=("image.repository=registry.example.com/waitmeter", "image.tag=0.1.0-static",
                                          f"image.digest={DIGEST}")))
    assert pinned["image"] == f"registry.example.com/waitmeter@{DIGEST}"
    assert agent(render(scenario, sets=(f"image.digest={DIGEST}",)))["image"] == f"waitmeter@{DIGEST}"


def test_sidecar_command_line_listens_for_the_age():
    c = agent(render("sidecar-values.yaml"))
    assert c["args"] == DEFAULT_ARGS + ["--age-socket=/run/waitmeter/age.sock"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_agent_accepts_the_rendered_command_line(scenario):
    """clap parses every argument before acting on a trailing --help: exit 0 = all valid."""
    if not WAITMETER.exists():
        pytest.skip(f"skipping: {WAITMETER} not built (make build)")
    args = agent(render_with_agent(scenario))["args"]
    p = subprocess.run([str(WAITMETER), *args, "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, f"waitmeter rejects {args}: {p.stderr}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except OSError:
        return None, ""


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_agent_answers_the_probes_with_the_rendered_command_line(scenario, tmp_path):
    """The real agent (root, real BPF) started with the chart's arguments serves the probes'
    paths. Only what names this pod's environment is replaced: the listen address (loopback,
    a free port), the BTF file (the running kernel's) and the age socket (a tmp path)."""
    if not WAITMETER.exists():
        pytest.skip(f"skipping: {WAITMETER} not built (make build)")
    if os.geteuid() != 0:
        pytest.skip("skipping: needs root (CAP_BPF, CAP_PERFMON)")
    c = agent(render_with_agent(scenario))
    port = free_port()
    local = {"--listen": f"127.0.0.1:{port}", "--btf": "/sys/kernel/btf/vmlinux", "--age-socket": str(tmp_path / "age.sock")}
    args = [f"{a.split('=', 1)[0]}={local[a.split('=', 1)[0]]}" if a.split("=", 1)[0] in local else a for a in c["args"]]
    log = tmp_path / "stderr"  # a file, not a pipe: -v/-vv output would fill a pipe and block the agent
    with open(log, "w") as err:
        proc = subprocess.Popen([str(WAITMETER), *args], stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 15
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            status, body = http_get(f"http://127.0.0.1:{port}{c['readinessProbe']['httpGet']['path']}")
            if status == 200:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"waitmeter {args} exited {proc.returncode}: {log.read_text()[-2000:]}"
        assert status == 200 and "waitmeter_build_info" in body, f"readiness path: {status}"
        assert http_get(f"http://127.0.0.1:{port}{c['livenessProbe']['httpGet']['path']}")[0] == 200
        if "--age-socket" in {a.split("=", 1)[0] for a in args}:
            assert (tmp_path / "age.sock").exists()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_service_selects_the_agent_pods(scenario):
    objs = render(scenario)
    if values_of(scenario).get("service", {}).get("enabled") is False:
        assert not by_kind(objs, "Service")
        return
    svc = one(objs, "Service")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": svc["spec"]["ports"][0]["port"],
                                     "targetPort": "metrics", "protocol": "TCP"}]
    if scenario == "sidecar-own-workload-values.yaml":
        assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "fix-gateway"}
        return
    pod_labels = workload(objs)["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"][0]["port"] == agent(objs)["ports"][0]["containerPort"]


def test_default_port_is_9747():
    objs = render("daemonset-values.yaml")
    assert one(objs, "Service")["spec"]["ports"][0]["port"] == 9747
    assert agent(objs)["ports"][0]["containerPort"] == 9747


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if enabled(s, "serviceMonitor")])
def test_service_monitor(scenario):
    objs = render(scenario)
    sm = one(objs, "ServiceMonitor")
    svc = one(objs, "Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm["spec"]) == {"selector", "namespaceSelector", "endpoints"}
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] in [p["name"] for p in svc["spec"]["ports"]]
    assert ep["path"] == "/metrics" and ep["scheme"] == "http"
    assert ep["interval"] == "30s" and ep["scrapeTimeout"] == "10s"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"} in ep["relabelings"]
    allowed = {"port", "path", "scheme", "interval", "scrapeTimeout", "relabelings", "metricRelabelings"}
    assert set(ep) <= allowed
    if scenario == "daemonset-monitoring-values.yaml":
        assert sm["metadata"]["labels"]["release"] == "prometheus"
    assert not by_kind(objs, "PodMonitor")


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if enabled(s, "podMonitor")])
def test_pod_monitor(scenario):
    values = values_of(scenario)["podMonitor"]
    objs = render(scenario)
    pm = one(objs, "PodMonitor")
    assert not by_kind(objs, "ServiceMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["metadata"]["namespace"] == NAMESPACE
    assert pm["metadata"]["labels"].items() >= values.get("labels", {}).items()
    assert set(pm["spec"]) == {"selector", "namespaceSelector", "podMetricsEndpoints"}
    assert pm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # it selects the pods that carry the agent, by their port name
    pod = workload(render_with_agent(scenario))["spec"]["template"]
    if values_of(scenario)["sidecar"]["deployment"].get("enabled", True):
        assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    else:
        assert pm["spec"]["selector"]["matchLabels"] == values_of(scenario)["sidecar"]["selector"]
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["port"] in [p["name"] for p in agent(objs)["ports"]]
    assert ep["path"] == "/metrics" and ep["scheme"] == "http"
    assert ep["interval"] == values.get("interval", "30s") and ep["scrapeTimeout"] == "10s"
    assert ep["relabelings"][0] == {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
    assert ep.get("metricRelabelings", []) == values.get("metricRelabelings", [])
    assert set(ep) <= {"port", "path", "scheme", "interval", "scrapeTimeout", "relabelings", "metricRelabelings"}


def rule_ports(rule):
    return None if "ports" not in rule else {(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]}


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if enabled(s, "networkPolicy")])
def test_network_policy_opens_the_metrics_port_only_to_the_configured_peers(scenario):
    values = values_of(scenario)
    objs = render(scenario)
    np = one(objs, "NetworkPolicy")
    assert np["apiVersion"] == "networking.k8s.io/v1" and np["metadata"]["namespace"] == NAMESPACE
    spec = np["spec"]
    assert spec["policyTypes"] == ["Ingress"], "egress is not restricted by the chart"
    pods = workload(render_with_agent(scenario))["spec"]["template"]
    assert spec["podSelector"]["matchLabels"].items() <= pods["metadata"]["labels"].items() or \
        spec["podSelector"]["matchLabels"] == values["sidecar"]["selector"]
    port = agent(objs)["ports"][0]["containerPort"]
    peers = values["networkPolicy"]["from"]
    assert peers, "a scenario with a NetworkPolicy names its peers"
    # every rule that admits traffic to the metrics port admits only the configured peers
    admitting = [r for r in spec["ingress"] if rule_ports(r) is None or (port, "TCP") in rule_ports(r)]
    assert admitting, "nothing may scrape the agent"
    for r in admitting:
        assert r.get("from") and all(p in peers for p in r["from"]), f"metrics port {port} opened to {r.get('from', 'everyone')}"
    assert spec["ingress"][0] == {"ports": [{"port": port, "protocol": "TCP"}], "from": peers}
    # in the chart's sidecar Deployment the application's declared ports stay open; extraIngress follows
    rest = spec["ingress"][1:]
    app_ports = values.get("sidecar", {}).get("deployment", {}).get("app", {}).get("ports", [])
    if values["mode"] == "sidecar" and app_ports:
        assert rest[0] == {"ports": [{"port": p["containerPort"], "protocol": p.get("protocol", "TCP")} for p in app_ports]}
        rest = rest[1:]
    assert rest == values["networkPolicy"].get("extraIngress", [])


def test_network_policy_is_off_by_default_and_follows_the_port():
    assert not by_kind(render("daemonset-values.yaml"), "NetworkPolicy")
    objs = render("daemonset-values.yaml", sets=("networkPolicy.enabled=true", "networkPolicy.from[0].namespaceSelector.matchLabels.team=obs",
                                                 "agent.port=9800"))
    np = one(objs, "NetworkPolicy")
    assert np["spec"]["ingress"] == [{"ports": [{"port": 9800, "protocol": "TCP"}],
                                      "from": [{"namespaceSelector": {"matchLabels": {"team": "obs"}}}]}]
    kubernetes_validate.validate(np, KUBE_VERSION, strict=True)


def test_monitoring_objects_are_off_by_default():
    kinds = {o["kind"] for o in render("daemonset-values.yaml")}
    assert kinds == {"ServiceAccount", "Service", "DaemonSet"}


def test_prometheus_rule_holds_the_mixin_rules(tmp_path):
    rules_file = CHART / "files" / "rules" / "waitmeter-rules.yaml"
    assert rules_file.is_file(), f"{rules_file.relative_to(ROOT)} is missing: the mixin (make mixin) generates it"
    objs = render("daemonset-monitoring-values.yaml")
    rule = one(objs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    spec = rule["spec"]
    assert list(spec) == ["groups"] and spec["groups"], "PrometheusRule without rule groups"
    assert spec == yaml.safe_load(rules_file.read_text()), "the PrometheusRule must carry the mixin's rules unchanged"
    for g in spec["groups"]:
        assert g["name"] and g["rules"], f"empty group {g}"
    out = tmp_path / "rules.yaml"
    out.write_text(yaml.safe_dump(spec))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: apt-get install prometheus (make setup)"
    p = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"promtool check rules failed on the PrometheusRule's spec:\n{p.stdout}{p.stderr}"


def test_dashboards_config_map_for_the_grafana_sidecar():
    files = sorted((CHART / "files" / "dashboards").glob("*.json"))
    assert files, "helm/waitmeter/files/dashboards/*.json are missing: the mixin (make mixin) generates them"
    objs = render("daemonset-monitoring-values.yaml")
    (cm,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].endswith("-dashboards")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "waitmeter"}
    keys = sorted(cm["data"])
    assert keys == [f.name for f in files] and len(keys) >= 1
    for k in keys:
        d = json.loads(cm["data"][k])
        assert d == json.loads((CHART / "files" / "dashboards" / k).read_text())
        assert d.get("title") and d.get("panels"), f"{k} is not a Grafana dashboard"
    relabelled = render("daemonset-monitoring-values.yaml", sets=("dashboards.label=dash", "dashboards.labelValue=yes",
                                                                 "dashboards.namespace=monitoring"))
    (cm2,) = [o for o in by_kind(relabelled, "ConfigMap") if o["metadata"]["name"].endswith("-dashboards")]
    assert cm2["metadata"]["labels"]["dash"] == "yes" and "grafana_dashboard" not in cm2["metadata"]["labels"]
    assert cm2["metadata"]["namespace"] == "monitoring"


@pytest.mark.parametrize("sets, message", [
    (["mode=foo"], "mode"),
    (["agent.gilProbe=bar"], "gilProbe"),
    (["agent.maxThreads=8"], "maxThreads"),
    (["agent.verbosity=5"], "verbosity"),
    (["unknownKey=1"], "unknownKey"),
    (["agent.maxThreadz=1"], "maxThreadz"),
    (["securityContext.extraCapabilities={SYS_ADMIN,ALL}"], "extraCapabilities"),
    (["image.pullPolicy=Sometimes"], "pullPolicy"),
    (["image.digest=0.1.0"], "digest"),
    (["image.digest=sha256:abc"], "digest"),
    # the agent refuses --age-url with --all (it joins one --pid): not a chart value
    (["age.url=http://127.0.0.1:8000/metrics"], "url"),
    (["serviceMonitor.interval=often"], "interval"),
    (["podMonitor.interval=often"], "interval"),
    (["podMonitor.selector.app=x"], "selector"),
    (["networkPolicy.from[0].podSelektor.matchLabels.app=x"], "podSelektor"),
    (["networkPolicy.from[0].ipBlock.except[0]=10.0.0.0/24"], "cidr"),
    (["networkPolicy.extraIngress[0].ports[0].protocol=ICMP"], "protocol"),
    (["securityContext.appArmorProfile.type=Localhost"], "localhostProfile"),
    (["securityContext.appArmorProfile.localhostProfile=p"], "type"),
    (["securityContext.seccompProfile.type=Localhost"], "localhostProfile"),
], ids=lambda v: v if isinstance(v, str) else ",".join(v))
def test_schema_rejects_bad_values(sets, message):
    err = render_error(sets)
    assert "schema" in err.lower() and message in err, err


@pytest.mark.parametrize("scenario, sets, message", [
    (None, ["age.socket.enabled=true"], "use mode=sidecar"),
    (None, ["mode=sidecar"], "sidecar.deployment.app.image"),
    (None, ["mode=sidecar", "sidecar.deployment.enabled=false"], "sidecar.selector"),
    (None, ["serviceMonitor.enabled=true", "service.enabled=false"], "needs service.enabled"),
    (None, ["mode=sidecar", "sidecar.deployment.enabled=false", "service.enabled=false", "podMonitor.enabled=true"], "sidecar.selector"),
    (None, ["serviceMonitor.enabled=true", "podMonitor.enabled=true"], "enable one"),
    (None, ["networkPolicy.enabled=true"], "networkPolicy.from"),
], ids=["age-socket-daemonset", "sidecar-without-app", "own-workload-without-selector", "servicemonitor-without-service",
        "podmonitor-own-workload-without-selector", "both-monitors", "networkpolicy-without-peers"])
def test_settings_that_cannot_work_are_refused(scenario, sets, message):
    err = render_error(sets, scenario)
    assert message in err, err


DOCS = ROOT / "docs" / "deployment.md"


def docs_example(name):
    """The fenced YAML block after `<!-- test_helm: NAME -->` in docs/deployment.md."""
    text = DOCS.read_text()
    marker = f"<!-- test_helm: {name} -->"
    assert marker in text, f"docs/deployment.md lost the example marked {marker}"
    block = text.split(marker, 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    return block


def test_docs_manifest_example_is_valid_and_matches_the_chart():
    (d,) = [o for o in yaml.safe_load_all(docs_example("manifest")) if o]
    kubernetes_validate.validate(d, KUBE_VERSION, strict=True)
    pod = d["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    c = {c["name"]: c for c in pod["containers"]}
    chart = agent(render("sidecar-values.yaml"))
    keys = ("runAsUser", "runAsNonRoot", "privileged", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "seccompProfile")
    assert {k: c["waitmeter"]["securityContext"][k] for k in keys} == {k: chart["securityContext"][k] for k in keys}
    assert c["waitmeter"]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON", "SYS_PTRACE"]}
    assert c["waitmeter"]["resources"] == chart["resources"]
    assert mounts(c["waitmeter"]) == mounts(chart)
    assert c["app"]["env"] == [{"name": "WAITMETER_SOCKET", "value": "/run/waitmeter/age.sock"}]
    if WAITMETER.exists():
        p = subprocess.run([str(WAITMETER), *c["waitmeter"]["args"], "--help"], capture_output=True, text=True, timeout=10)
        assert p.returncode == 0, f"waitmeter rejects the documented arguments: {p.stderr}"


def test_named_templates_add_the_sidecar_to_your_own_chart(tmp_path):
    """The documented way to add the sidecar to an existing chart (docs/deployment.md)."""
    parent = tmp_path / "myapp"
    shutil.copytree(CHART, parent / "charts" / "waitmeter", ignore=shutil.ignore_patterns("files"))
    (parent / "templates").mkdir()
    (parent / "Chart.yaml").write_text("apiVersion: v2\nname: myapp\nversion: 1.0.0\n"
                                       "dependencies:\n  - name: waitmeter\n    version: 0.1.0\n")
    (parent / "values.yaml").write_text(yaml.safe_dump({"waitmeter": {
        "mode": "sidecar", "sidecar": {"deployment": {"enabled": False}, "selector": {"app": "myapp"}},
        "age": {"socket": {"enabled": True}}, "serviceMonitor": {"enabled": True}}}))
    (parent / "templates" / "deployment.yaml").write_text(docs_example("parent-template"))
    objs = render(chart=parent)
    for o in objs:
        if o["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(o, KUBE_VERSION, strict=True)
    assert sorted(o["kind"] for o in objs) == ["Deployment", "Service", "ServiceAccount", "ServiceMonitor"]
    c = containers(objs)
    assert list(c) == ["myapp", "waitmeter"]
    sc = c["waitmeter"]["securityContext"]
    assert set(sc["capabilities"]["add"]) == AGENT_CAPS and sc["capabilities"]["drop"] == ["ALL"]
    assert c["waitmeter"]["args"] == DEFAULT_ARGS + ["--age-socket=/run/waitmeter/age.sock"]
    assert c["myapp"]["env"] == [{"name": "WAITMETER_SOCKET", "value": "/run/waitmeter/age.sock"}]
    assert mounts(c["myapp"]) == mounts(c["waitmeter"]) == {"/run/waitmeter": {"name": "waitmeter-run", "mountPath": "/run/waitmeter"}}
    assert list(volumes(objs)) == ["waitmeter-run"]
    assert one(objs, "Service")["spec"]["selector"] == {"app": "myapp"}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_notes_render(scenario, tmp_path):
    """NOTES.txt (not part of `helm template`) rendered through a ConfigMap in a copy of the chart."""
    chart = tmp_path / "waitmeter"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n'
        '  notes: {{ include (print $.Template.BasePath "/NOTES.txt") . | quote }}\n')
    values = yaml.safe_load((CHART / "ci" / scenario).read_text())
    (cm,) = [o for o in render(scenario, chart=chart) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "notes"]
    notes = cm["data"]["notes"]
    assert f"mode: {values['mode']}" in notes
    assert "/metrics" in notes and "docs/deployment.md" in notes
    assert "<no value>" not in notes


def test_package_ships_the_mixin_files_and_leaves_the_scenarios_out(tmp_path):
    p = run_helm("package", str(CHART), "--destination", str(tmp_path))
    assert p.returncode == 0, p.stderr
    (pkg,) = tmp_path.glob("waitmeter-*.tgz")
    names = tarfile.open(pkg).getnames()
    for required in ("waitmeter/Chart.yaml", "waitmeter/values.schema.json", "waitmeter/templates/NOTES.txt",
                     "waitmeter/files/rules/waitmeter-rules.yaml"):
        assert required in names, f"{required} missing from the package"
    assert [n for n in names if n.startswith("waitmeter/files/dashboards/") and n.endswith(".json")]
    assert not [n for n in names if n.startswith("waitmeter/ci/")], "ci/ scenarios belong to the repository only"
