"""The Helm chart (helm/waitmeter): lint, render, validate offline, and assert what it deploys.

No cluster and no container engine here: every scenario in helm/waitmeter/ci/*-values.yaml is
linted (`helm lint` and `helm lint --strict`), rendered (`helm template`, also with no
--kube-version, as without a cluster) and each object is validated against the Kubernetes 1.30
OpenAPI schemas with kubernetes-validate in strict mode (no unknown fields). The Prometheus
Operator kinds are not in those schemas: the PrometheusRule's spec goes through `promtool check
rules`, the ServiceMonitor and PodMonitor are checked field by field, the web-config Secret
against the exporter toolkit's format. The real agent runs with each scenario's rendered command
line and Secret volumes (certificates made here with openssl) and answers the probes and the
scrape as the kubelet and Prometheus would make them, over http or https.

helm: $HELM, else .tools/bin/helm (`make setup` builds it). A missing helm fails the tests.
"""
import base64
import contextlib
import http.client
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import tarfile
import tempfile
import time
import tomllib
import urllib.parse
import urllib.request
from functools import lru_cache
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import prometheus, stop
from pki import bcrypt_hash, self_signed, signed_by

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


def own_workload(scenario):
    """The agent goes into the user's own workload (the chart renders no pods)."""
    v = values_of(scenario)
    return v["mode"] == "sidecar" and v.get("sidecar", {}).get("deployment", {}).get("enabled") is False


def web_values(scenario):
    """The scenario's `web` section over the chart's defaults."""
    w = yaml.safe_load((CHART / "values.yaml").read_text())["web"]
    given = values_of(scenario).get("web", {})
    tls = {**w["tls"], **given.get("tls", {})}
    return {**w, **given, "tls": tls, "basicAuth": {**w["basicAuth"], **given.get("basicAuth", {})}}


def uses_web_config(scenario):
    w = web_values(scenario)
    return bool(w["tls"]["enabled"] or w["basicAuth"]["users"] or w["headers"] or w["existingSecret"])


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


def render_with_agent(scenario, kube=KUBE_VERSION, sets=()):
    """A scenario's objects; for one whose agent container goes into the user's own workload,
    the same values rendering the chart's example Deployment instead."""
    objs = render(scenario, sets=sets, kube=kube)
    if not [o for o in objs if o["kind"] in ("DaemonSet", "Deployment")]:
        objs = render(scenario, sets=(*sets, "sidecar.deployment.enabled=true", "sidecar.deployment.app.image=app:1"), kube=kube)
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
    for f in ("values.yaml", "values.schema.json", "templates/NOTES.txt", ".helmignore", "README.md"):
        assert (CHART / f).is_file(), f"helm/waitmeter/{f} is missing"


def test_chart_metadata_for_artifact_hub():
    """home, sources, maintainers and the Artifact Hub annotations, each tied to where the fact
    lives: the repository URL the mixin's runbook links use, the agent's license, the image the
    chart deploys by default."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    runbook_base = yaml.safe_load((ROOT / "dashboards" / "config.yaml").read_text())["runbookBase"]
    repo = runbook_base.split("/blob/", 1)[0]
    assert chart["home"] == repo and repo in chart["sources"]
    assert chart["maintainers"] and all(m.get("name") and (m.get("email") or m.get("url")) for m in chart["maintainers"])
    notes = chart["annotations"]
    cargo = tomllib.loads((ROOT / "agent" / "Cargo.toml").read_text())
    assert notes["artifacthub.io/license"] == cargo["package"]["license"]
    links = yaml.safe_load(notes["artifacthub.io/links"])
    assert links and all(set(link) == {"name", "url"} and link["url"].startswith(repo + "/") for link in links)
    for link in links:
        # links into this repository name files that exist
        path = link["url"].split("/main/", 1)[1]
        assert (ROOT / path).exists(), f"artifacthub.io/links: {link['url']} names no file of the repository"
    images = yaml.safe_load(notes["artifacthub.io/images"])
    assert [i["image"] for i in images] == [agent(render("daemonset-values.yaml"))["image"]], \
        "artifacthub.io/images must list the image the chart deploys by default"
    assert "kubeVersion" not in chart or run_helm("template", str(CHART)).returncode == 0


def value_paths(values, prefix=""):
    """Every value's dotted path; a non-empty map is walked into, anything else is a leaf."""
    for k, v in values.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield path, v
            yield from value_paths(v, path + ".")
        else:
            yield path, v


def test_readme_documents_every_value_with_its_default():
    """The chart README's values table against values.yaml: every value documented (itself or
    a map that holds it), every documented key a value, every default as in values.yaml."""
    values = dict(value_paths(yaml.safe_load((CHART / "values.yaml").read_text())))
    rows = {}
    for line in (CHART / "README.md").read_text().splitlines():
        m = re.fullmatch(r"\| `([^`]+)` \| `(.*?)` \| (.*) \|", line)
        if m:
            assert m[1] not in rows, f"README.md documents {m[1]} twice"
            rows[m[1]] = json.loads(m[2])
    assert rows, "helm/waitmeter/README.md has no values table"
    for key, default in rows.items():
        assert key in values, f"README.md documents {key}, which values.yaml does not have"
        assert default == values[key], f"README.md: the default of {key} is {values[key]!r} in values.yaml"
    for path, v in values.items():
        if not (isinstance(v, dict) and v):  # a leaf
            assert any(path == k or path.startswith(k + ".") for k in rows), f"README.md does not document {path}"
    # and the schema knows every documented value (it rejects unknown keys)
    schema = json.loads((CHART / "values.schema.json").read_text())
    for key in rows:
        node = schema
        for part in key.split("."):
            if "$ref" in node:
                node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
            assert part in node.get("properties", {}), f"values.schema.json has no {key}"
            node = node["properties"][part]


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
        assert o["kind"] in ("ConfigMap", "ClusterRole", "ClusterRoleBinding") or o["metadata"]["namespace"] == NAMESPACE


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
    # the node agent's token lists its node's pods (podNames, on by default); a sidecar has none
    node_agent = workload(objs)["kind"] == "DaemonSet"
    assert pod["automountServiceAccountToken"] is node_agent
    for key in ("hostNetwork", "hostIPC"):
        assert not pod.get(key), f"{key} must not be set"
    sa = one(objs, "ServiceAccount")
    assert sa["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    # nothing else in the release asks for the API server: the node agent's list of pods only
    rbac = sorted(o["kind"] for o in objs if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"))
    assert rbac == (["ClusterRole", "ClusterRoleBinding"] if node_agent else []), rbac


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


def test_sidecar_age_socket_mode_and_group_let_a_non_root_application_send():
    """The application of sidecar-values.yaml runs as uid 10001: the socket (0660) gets group
    10001, which the pod gives every container (supplementalGroups); the application container
    stays as written."""
    objs = render("sidecar-values.yaml")
    args = agent(objs)["args"]
    assert args[-3:] == ["--age-socket=/run/waitmeter/age.sock", "--age-socket-mode=0660", "--age-socket-group=10001"], args
    pod = workload(objs)["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"supplementalGroups": [10001]}
    assert containers(objs)["fix-gateway"]["securityContext"] == values_of("sidecar-values.yaml")["sidecar"]["deployment"]["app"]["securityContext"]
    # another mode (quoted, as a string); root's group given explicitly
    objs = render("sidecar-values.yaml", sets=("age.socket.mode=0620", "age.socket.group=0"))
    assert agent(objs)["args"][-2:] == ["--age-socket-mode=0620", "--age-socket-group=0"]
    assert workload(objs)["spec"]["template"]["spec"]["securityContext"] == {"supplementalGroups": [0]}
    # no group: the agent's, and the pod's security context is left alone
    objs = render("sidecar-values.yaml", sets=("age.socket.group=null",))
    assert agent(objs)["args"][-2:] == ["--age-socket=/run/waitmeter/age.sock", "--age-socket-mode=0660"]
    assert "securityContext" not in workload(objs)["spec"]["template"]["spec"]
    # without the socket, neither
    objs = render("sidecar-values.yaml", sets=("age.socket.enabled=false",))
    assert not [a for a in agent(objs)["args"] if a.startswith("--age-")]
    assert "securityContext" not in workload(objs)["spec"]["template"]["spec"]


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
    """Both probes ask /healthz (never behind basic auth); over HTTPS when TLS is on; a TCP check
    of the port when client certificates are required (the kubelet has none to present)."""
    c = agent(render_with_agent(scenario))
    assert c["ports"] == [{"name": "metrics", "containerPort": c["ports"][0]["containerPort"], "protocol": "TCP"}]
    tls = web_values(scenario)["tls"]
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        if tls.get("enabled") and tls.get("clientCA", {}).get("secretName"):
            assert probe["tcpSocket"] == {"port": "metrics"} and "httpGet" not in probe
        elif tls.get("enabled"):
            assert probe["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}
        else:
            assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert probe["periodSeconds"] >= 10 and probe["timeoutSeconds"] >= 1
    res = c["resources"]
    for kind in ("requests", "limits"):
        assert set(res[kind]) == {"cpu", "memory"}, res
    assert res["limits"]["memory"].endswith("Mi") and int(res["limits"]["memory"][:-2]) >= int(res["requests"]["memory"][:-2])


# The exporter toolkit's web-config format (docs/web-configuration.md of
# prometheus/exporter-toolkit), strictly: an unknown key is an error there too.
TOOLKIT_TLS_VERSIONS = ["TLS10", "TLS11", "TLS12", "TLS13"]
TOOLKIT_WEB_CONFIG = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "tls_server_config": {
            "type": "object", "additionalProperties": False, "required": ["cert_file", "key_file"],
            "properties": {
                "cert_file": {"type": "string"}, "key_file": {"type": "string"},
                "client_auth_type": {"enum": ["NoClientCert", "RequestClientCert", "RequireAnyClientCert",
                                              "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]},
                "client_ca_file": {"type": "string"},
                "client_allowed_sans": {"type": "array", "items": {"type": "string"}},
                "min_version": {"enum": TOOLKIT_TLS_VERSIONS}, "max_version": {"enum": TOOLKIT_TLS_VERSIONS},
                "cipher_suites": {"type": "array", "items": {"type": "string"}},
                "prefer_server_cipher_suites": {"type": "boolean"},
                "curve_preferences": {"type": "array", "items": {"type": "string"}},
            },
        },
        "http_server_config": {
            "type": "object", "additionalProperties": False,
            "properties": {"http2": {"type": "boolean"},
                           "headers": {"type": "object", "additionalProperties": {"type": "string"}}},
        },
        "basic_auth_users": {"type": "object", "additionalProperties": {"type": "string", "pattern": r"^\$2[abxy]\$\d\d\$[./A-Za-z0-9]{53}$"}},
    },
}
WEB_SCENARIOS = [s for s in SCENARIOS if uses_web_config(s)]


def secret_data(objs, name):
    (sec,) = [o for o in by_kind(objs, "Secret") if o["metadata"]["name"] == name]
    return {k: base64.b64decode(v) for k, v in sec["data"].items()}


def mounted_file(objs, container, path):
    """(Secret name, key) that the kubelet puts at `path` in the container, from its
    volumeMounts and the pod's Secret volumes (their items)."""
    vols = volumes(objs)
    for m in container.get("volumeMounts", []):
        prefix = m["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            assert m.get("readOnly") is True, f"{m['mountPath']} must be mounted read-only"
            secret = vols[m["name"]]["secret"]
            rel = path[len(prefix):]
            items = {i["path"]: i["key"] for i in secret.get("items", [])} or None
            key = items[rel] if items else rel
            return secret["secretName"], key
    pytest.fail(f"{path} is on no volume of the agent container")


def web_config_of(objs):
    """The agent's --web.config.file: path, rendered content (parsed), Secret name."""
    c = agent(objs)
    (arg,) = [a for a in c["args"] if a.startswith("--web.config.file=")]
    path = arg.split("=", 1)[1]
    name, key = mounted_file(objs, c, path)
    text = secret_data(objs, name)[key].decode()
    return path, yaml.safe_load(text), name


@pytest.mark.parametrize("scenario", WEB_SCENARIOS)
def test_web_config_secret_in_the_toolkit_format(scenario):
    import jsonschema

    web = web_values(scenario)
    objs = render(scenario)
    c = agent(render_with_agent(scenario))
    path, cfg, name = web_config_of(render_with_agent(scenario))
    (sec,) = [o for o in by_kind(objs, "Secret") if o["metadata"]["name"] == name]
    assert sec["type"] == "Opaque" and sec["metadata"]["namespace"] == NAMESPACE and list(sec["data"]) == ["web-config.yml"]
    jsonschema.validate(cfg, TOOLKIT_WEB_CONFIG)
    assert cfg.get("basic_auth_users", {}) == web["basicAuth"]["users"]
    assert cfg.get("http_server_config", {}).get("headers", {}) == web["headers"]
    tls = web["tls"]
    if not tls["enabled"]:
        assert "tls_server_config" not in cfg
    else:
        t = cfg["tls_server_config"]
        # every file it names is mounted read-only from the Secret the values name
        assert mounted_file(objs, c, t["cert_file"]) == (tls["secretName"], "tls.crt")
        assert mounted_file(objs, c, t["key_file"]) == (tls["secretName"], "tls.key")
        assert t.get("min_version", "TLS12") == tls["minVersion"]
        assert t.get("max_version", "TLS13") == (tls["maxVersion"] or "TLS13")
        if tls["clientCA"]["secretName"]:
            assert mounted_file(objs, c, t["client_ca_file"]) == (tls["clientCA"]["secretName"], tls["clientCA"]["key"])
            assert t["client_auth_type"] == (tls["clientAuthType"] or "RequireAndVerifyClientCert")
        else:
            assert "client_ca_file" not in t and t.get("client_auth_type", "NoClientCert") == "NoClientCert"
    # every Secret volume of the agent is mounted read-only, nothing else of the web config is writable
    web_mounts = [m for m in c["volumeMounts"] if m["mountPath"].startswith("/etc/waitmeter")]
    assert web_mounts and all(m["readOnly"] is True for m in web_mounts)
    for v in volumes(objs).values():
        if "secret" in v:
            assert v["secret"]["defaultMode"] == 0o400


def test_no_web_config_by_default():
    for scenario in (s for s in SCENARIOS if s not in WEB_SCENARIOS):
        objs = render_with_agent(scenario)
        assert not by_kind(objs, "Secret")
        assert not [a for a in agent(objs)["args"] if a.startswith("--web")]
        assert not [m for m in agent(objs).get("volumeMounts", []) if m["mountPath"].startswith("/etc/waitmeter")]


def test_web_config_from_an_existing_secret():
    objs = render("daemonset-values.yaml", sets=("web.existingSecret=my-web-config", "web.tls.enabled=true",
                                                 "web.tls.secretName=my-tls"))
    assert not by_kind(objs, "Secret"), "the chart renders no web config of its own"
    c = agent(objs)
    assert "--web.config.file=/etc/waitmeter/web/web-config.yml" in c["args"]
    assert mounted_file(objs, c, "/etc/waitmeter/web/web-config.yml") == ("my-web-config", "web-config.yml")
    assert mounted_file(objs, c, "/etc/waitmeter/tls/tls.crt") == ("my-tls", "tls.crt")
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_web_headers_and_auth_over_http():
    objs = render("daemonset-values.yaml", sets=("web.headers.X-Frame-Options=DENY",))
    _, cfg, _ = web_config_of(objs)
    assert cfg == {"http_server_config": {"headers": {"X-Frame-Options": "DENY"}}}
    assert "scheme" not in agent(objs)["livenessProbe"]["httpGet"]


@pytest.mark.parametrize("auth_type", ["VerifyClientCertIfGiven", "RequireAndVerifyClientCert"])
def test_client_auth_type_decides_the_probes(auth_type):
    objs = render("sidecar-mtls-values.yaml", sets=(f"web.tls.clientAuthType={auth_type}",))
    _, cfg, _ = web_config_of(objs)
    assert cfg["tls_server_config"]["client_auth_type"] == auth_type
    probe = agent(objs)["livenessProbe"]
    if auth_type == "VerifyClientCertIfGiven":
        # a client without a certificate (the kubelet) still gets through TLS
        assert probe["httpGet"]["scheme"] == "HTTPS" and "tcpSocket" not in probe
    else:
        assert probe["tcpSocket"] == {"port": "metrics"} and "httpGet" not in probe


DEFAULT_ARGS = ["run", "--all", "--listen=0.0.0.0:9747", "--max-threads=16384", "--max-processes=4096", "--exit-buffer-kib=4096",
                "--max-thread-labels=20", "--gil-probe=futex"]
# the node agent's (podNames: on by default); a sidecar has none
POD_NAMES_ARGS = ["--pods=auto", "--pods-refresh=30"]


def test_default_command_line():
    c = agent(render("daemonset-values.yaml"))
    assert c["command"] == ["/usr/bin/waitmeter"]
    assert c["args"] == DEFAULT_ARGS + POD_NAMES_ARGS
    assert c["image"] == "waitmeter:0.1.0"


def test_the_node_agent_lists_its_nodes_pods_with_the_narrowest_rights():
    """podNames (on by default): the DaemonSet's agent gets its node's name and its service
    account's token, and a ClusterRole with `list` on pods, bound to that account, and nothing
    more; off: `--pods=off`, no token, no RBAC. A sidecar never gets either."""
    objs = render("daemonset-values.yaml")
    c = agent(objs)
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]
    assert workload(objs)["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    role = one(objs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    binding = one(objs, "ClusterRoleBinding")
    sa = one(objs, "ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    # the service account itself mounts no token: only the agent's pod asks for it
    assert sa["automountServiceAccountToken"] is False
    # the process' namespace, pod and container win over the agent pod's target labels
    monitored = render("daemonset-monitoring-values.yaml")
    endpoints = [e for o in monitored if o["kind"] in ("ServiceMonitor", "PodMonitor")
                 for e in o["spec"].get("endpoints", o["spec"].get("podMetricsEndpoints", []))]
    assert endpoints and all(e.get("honorLabels") is True for e in endpoints), endpoints
    for scenario in SIDECAR:
        for o in render(scenario):
            if o["kind"] in ("ServiceMonitor", "PodMonitor"):
                assert not [e for e in o["spec"].get("endpoints", o["spec"].get("podMetricsEndpoints", [])) if e.get("honorLabels")], scenario
    off = render("daemonset-values.yaml", sets=("podNames.enabled=false",))
    assert agent(off)["args"] == DEFAULT_ARGS + ["--pods=off"]
    assert "env" not in agent(off)
    assert workload(off)["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert not [o for o in off if "Role" in o["kind"]]
    assert "--pods-refresh=120" in agent(render("daemonset-values.yaml", sets=("podNames.refreshSeconds=120",)))["args"]
    for scenario in SIDECAR:
        objs = render_with_agent(scenario)
        assert not [a for a in agent(objs)["args"] if a.startswith("--pods")], scenario
        assert not [e for e in agent(objs).get("env", []) if e["name"] == "NODE_NAME"], scenario
        assert not [o for o in objs if "Role" in o["kind"]], scenario


def test_custom_command_line():
    c = agent(render("custom-args-values.yaml"))
    assert c["image"] == "registry.example.com/waitmeter:0.1.0-static"
    assert c["args"] == ["run", "--all", "--listen=0.0.0.0:9800", "--max-threads=65536", "--max-processes=8192",
                         "--exit-buffer-kib=16384", "--max-thread-labels=50", "--gil-probe=uprobe", *POD_NAMES_ARGS, "--stacks=python", "--syscalls=on", "--tid-labels", "-v",
                         "--btf=/btf/vmlinux.btf", "--pyroscope-url=http://pyroscope.monitoring:4040",
                         "--pyroscope-interval=30", "--pyroscope-service=checkout", "--pyroscope-tenant=team-a",
                         "--pyroscope-label=cluster=prod", "-v"]
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
    assert c["args"] == DEFAULT_ARGS + ["--age-socket=/run/waitmeter/age.sock", "--age-socket-mode=0660", "--age-socket-group=10001"]


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


def fetch(port, path, method="GET", tls=None, auth=None):
    """One request to the agent on 127.0.0.1: over TLS with the ssl.SSLContext `tls`, with basic
    auth (user, password). (status, body, headers), or (None, the error, {}) when no HTTP answer
    comes (refused, TLS handshake failed, not HTTP)."""
    conn = (http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=3) if tls
            else http.client.HTTPConnection("127.0.0.1", port, timeout=3))
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    try:
        conn.request(method, path, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace"), {k.lower(): v for k, v in r.getheaders()}
    except (OSError, http.client.HTTPException) as e:  # ssl.SSLError is an OSError
        return None, repr(e), {}
    finally:
        conn.close()


def lay_out_secret_volumes(objs, container, root, user_secrets):
    """The container's Secret volumes written under `root` (standing for the container's /) as
    the kubelet mounts them: the Secrets the chart renders from the rendered objects, the
    user's own (the TLS certificate, the client CA) from user_secrets {name: {key: bytes}};
    the volume's items and defaultMode."""
    data = {o["metadata"]["name"]: {k: base64.b64decode(v) for k, v in o["data"].items()} for o in by_kind(objs, "Secret")}
    data.update(user_secrets)
    vols = volumes(objs)
    for m in container.get("volumeMounts", []):
        secret = vols[m["name"]].get("secret")
        if not secret:
            continue
        assert secret["secretName"] in data, f"Secret {secret['secretName']} is neither rendered nor provided by the test"
        content = data[secret["secretName"]]
        d = root / m["mountPath"].lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        for item in secret.get("items") or [{"key": k, "path": k} for k in content]:
            f = d / item["path"]
            f.write_bytes(content[item["key"]])
            f.chmod(secret.get("defaultMode", 0o644))


class RunningAgent:
    """What a test needs to talk to an agent started by running_agent()."""
    port: int
    container: dict  # the rendered agent container
    web: dict  # the scenario's web values
    user: tuple  # (name, password) of the basic-auth user, or None
    kubelet: ssl.SSLContext  # TLS as the kubelet connects (no client certificate), or None
    scraper: ssl.SSLContext  # TLS as the monitors connect (with the client certificate), or None
    pki: Path  # the certificates made for the run
    args: list  # the agent's command line as run
    log: Path  # its stderr


@contextlib.contextmanager
def running_agent(scenario, tmp_path, user="waitmeter-test", dns_names=("localhost",)):
    """The real agent (root, real BPF) started with a scenario's rendered command line. Only
    what names the pod's environment is replaced: the listen address (loopback, a free port),
    the BTF file (the running kernel's), the age socket (a tmp path), and the container's / for
    the Secret volumes (tmp_path/root, where they are laid out from the rendered objects; the
    web config's absolute paths get the same prefix). The Secrets the user provides are made
    here: a self-signed server certificate for 127.0.0.1 and `dns_names`, a client CA and a
    client certificate it signed; the basic-auth `user` is set to a fresh password's bcrypt
    hash. Yields a RunningAgent once /healthz answers 200; stops the agent on exit. The tests
    that use it are marked needs_root."""
    run = RunningAgent()
    run.web = web = web_values(scenario)
    run.user, sets = None, ()
    if web["basicAuth"]["users"]:
        run.user = (user, secrets.token_urlsafe(18))
        sets = (f"web.basicAuth.users.{user}={bcrypt_hash(run.user[1])}",)
    objs = render_with_agent(scenario, sets=sets)
    run.container = c = agent(objs)
    run.port = port = free_port()
    root, run.pki = tmp_path / "root", tmp_path / "pki"
    pki = run.pki
    pki.mkdir()
    provided = {}
    run.kubelet = run.scraper = None
    tls, client_ca = web["tls"]["enabled"], web["tls"]["clientCA"]["secretName"]
    if tls:
        self_signed(pki, "server", san=",".join([*(f"DNS:{n}" for n in dns_names), "IP:127.0.0.1"]))
        provided[web["tls"]["secretName"]] = {"tls.crt": (pki / "server.crt").read_bytes(), "tls.key": (pki / "server.key").read_bytes()}
        run.kubelet = ssl.create_default_context(cafile=pki / "server.crt")
        run.scraper = ssl.create_default_context(cafile=pki / "server.crt")
        if client_ca:
            self_signed(pki, "client-ca")
            signed_by(pki, "prometheus", "client-ca", "clientAuth")
            provided[client_ca] = {web["tls"]["clientCA"]["key"]: (pki / "client-ca.crt").read_bytes()}
            run.scraper.load_cert_chain(pki / "prometheus.crt", pki / "prometheus.key")
    lay_out_secret_volumes(objs, c, root, provided)
    local = {"--listen": f"127.0.0.1:{port}", "--btf": "/sys/kernel/btf/vmlinux", "--age-socket": str(tmp_path / "age.sock")}
    if uses_web_config(scenario):
        path, cfg, _ = web_config_of(objs)
        for k in ("cert_file", "key_file", "client_ca_file"):
            if k in cfg.get("tls_server_config", {}):
                cfg["tls_server_config"][k] = str(root / cfg["tls_server_config"][k].lstrip("/"))
        local["--web.config.file"] = root / path.lstrip("/")
        local["--web.config.file"].write_text(yaml.safe_dump(cfg))
    run.args = args = [f"{a.split('=', 1)[0]}={local[a.split('=', 1)[0]]}" if a.split("=", 1)[0] in local else a for a in c["args"]]
    run.log = log = tmp_path / "stderr"  # a file, not a pipe: -v/-vv output would fill a pipe and block the agent
    with open(log, "w") as err:
        proc = subprocess.Popen([str(WAITMETER), *args], stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 15
        status = body = None
        while time.monotonic() < deadline and proc.poll() is None:
            status, body, _ = fetch(port, "/healthz", tls=run.scraper)
            if status == 200:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"waitmeter {args} exited {proc.returncode}: {log.read_text()[-2000:]}"
        assert status == 200, f"/healthz: {status} {body[:200]}; log: {log.read_text()[-2000:]}"
        yield run
        assert proc.poll() is None, f"waitmeter exited {proc.returncode}: {log.read_text()[-2000:]}"
    finally:
        stop(proc, grace=10)


@pytest.mark.needs_root
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_agent_answers_the_probes_with_the_rendered_command_line(scenario, tmp_path):
    """The real agent with the chart's arguments and Secrets (running_agent) serves the probes'
    paths as the kubelet asks them and /metrics as the monitors scrape it, and refuses what the
    web config shuts out."""
    with running_agent(scenario, tmp_path) as run:
        c, port, web, user = run.container, run.port, run.web, run.user
        tls, client_ca = web["tls"]["enabled"], web["tls"]["clientCA"]["secretName"]
        # the probes as the kubelet makes them: no user, no client certificate
        for kind in ("readinessProbe", "livenessProbe"):
            probe = c[kind]
            if "httpGet" in probe:
                g = probe["httpGet"]
                assert (g.get("scheme") == "HTTPS") == tls
                ctx = run.kubelet if g.get("scheme") == "HTTPS" else None
                status, body, _ = fetch(port, g["path"], tls=ctx)
                assert status == 200 and body.strip() == "ok", f"{kind} GET {g['path']}: {status} {body[:200]}"
                assert fetch(port, g["path"], method="HEAD", tls=ctx)[0] == 200, f"{kind} HEAD {g['path']}"
            else:
                socket.create_connection(("127.0.0.1", port), timeout=3).close()
        # the scrape as the ServiceMonitor/PodMonitor makes it
        status, body, headers = fetch(port, "/metrics", tls=run.scraper, auth=user)
        assert status == 200 and "waitmeter_build_info" in body, f"/metrics: {status} {body[:200]}"
        for name, value in web["headers"].items():
            assert headers.get(name.lower()) == value, f"header {name}: {headers}"
        if user:
            assert fetch(port, "/metrics", tls=run.scraper)[0] == 401, "/metrics without a user"
            assert fetch(port, "/metrics", tls=run.scraper, auth=(user[0], user[1] + "x"))[0] == 401, "/metrics with a wrong password"
            assert fetch(port, "/healthz", tls=run.scraper)[0] == 200, "/healthz must not ask for a user"
        if tls:
            assert fetch(port, "/healthz")[0] != 200, "plain HTTP served on the TLS port"
            if web["tls"]["minVersion"] == "TLS13":
                old = ssl.create_default_context(cafile=run.pki / "server.crt")
                old.maximum_version = ssl.TLSVersion.TLSv1_2
                assert fetch(port, "/healthz", tls=old)[0] != 200, "TLS 1.2 served with minVersion TLS13"
        if client_ca:
            assert fetch(port, "/healthz", tls=run.kubelet)[0] != 200, "a client without a certificate was served"
        flags = dict(a.split("=", 1) for a in run.args if a.startswith("--age-socket"))
        if "--age-socket" in flags:
            st = os.stat(tmp_path / "age.sock")
            assert oct(st.st_mode & 0o777) == oct(int(flags["--age-socket-mode"], 8)), oct(st.st_mode)
            assert st.st_gid == int(flags.get("--age-socket-group", 0)), st.st_gid


@pytest.mark.needs_root
def test_prometheus_scrapes_the_agent_over_https_with_basic_auth(tmp_path):
    """A real Prometheus with the scrape job of docs/deployment.md (scheme, tls_config,
    basic_auth verbatim; only the files' paths and the target made local) scrapes the real agent
    run with the TLS + basic auth scenario: up == 1 and the agent's series arrive."""
    (job,) = yaml.safe_load(docs_example("prometheus-scrape"))["scrape_configs"]
    auth = job["basic_auth"]
    with running_agent("daemonset-web-tls-auth-values.yaml", tmp_path, user=auth["username"],
                       dns_names=(job["tls_config"]["server_name"],)) as run:
        (tmp_path / "password").write_text(run.user[1])
        local = {"scheme": job["scheme"],
                 "tls_config": {**job["tls_config"], "ca_file": str(run.pki / "server.crt")},
                 "basic_auth": {**auth, "password_file": str(tmp_path / "password")}}
        with prometheus(tmp_path, run.port, job=local) as base:
            deadline = time.monotonic() + 30
            while True:
                with urllib.request.urlopen(f"{base}/api/v1/targets", timeout=5) as r:
                    targets = json.load(r)["data"]["activeTargets"]  # empty until discovered
                if (targets and targets[0]["health"] == "up") or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            (target,) = targets
            assert target["health"] == "up" and target["scrapeUrl"].startswith("https://"), target
            q = urllib.parse.quote('waitmeter_build_info{job="waitmeter"}')
            with urllib.request.urlopen(f"{base}/api/v1/query?query={q}", timeout=5) as r:
                assert json.load(r)["data"]["result"], "no waitmeter_build_info scraped"


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
    assert ep["path"] == "/metrics"
    check_scrape_security(scenario, "serviceMonitor", ep)
    assert ep["interval"] == "30s" and ep["scrapeTimeout"] == "10s"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"} in ep["relabelings"]
    allowed = {"port", "path", "scheme", "interval", "scrapeTimeout", "relabelings", "metricRelabelings", "tlsConfig", "basicAuth",
               "honorLabels"}
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
    if own_workload(scenario):
        assert pm["spec"]["selector"]["matchLabels"] == values_of(scenario)["sidecar"]["selector"]
    else:
        assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["port"] in [p["name"] for p in agent(objs)["ports"]]
    assert ep["path"] == "/metrics"
    check_scrape_security(scenario, "podMonitor", ep)
    assert ep["interval"] == values.get("interval", "30s") and ep["scrapeTimeout"] == "10s"
    assert ep["relabelings"][0] == {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
    assert ep.get("metricRelabelings", []) == values.get("metricRelabelings", [])
    assert set(ep) <= {"port", "path", "scheme", "interval", "scrapeTimeout", "relabelings", "metricRelabelings", "tlsConfig", "basicAuth", "honorLabels"}


SECRET_KEY_SELECTOR = {"name", "key", "optional"}


def check_scrape_security(scenario, section, ep):
    """https when the agent serves TLS; tlsConfig and basicAuth as prometheus-operator's CRDs
    define them (SafeTLSConfig: CA and client certificate from Secrets or ConfigMaps, the key
    from a Secret; BasicAuth: username and password Secret keys); required where the agent
    needs them."""
    web = web_values(scenario)
    given = values_of(scenario)[section]
    assert ep["scheme"] == ("https" if web["tls"]["enabled"] else "http")
    assert ep.get("tlsConfig", {}) == given.get("tlsConfig", {})
    assert ep.get("basicAuth", {}) == given.get("basicAuth", {})
    tls = ep.get("tlsConfig", {})
    assert set(tls) <= {"ca", "cert", "keySecret", "serverName", "insecureSkipVerify", "minVersion", "maxVersion"}
    for k in ("ca", "cert"):
        if k in tls:
            (kind, ref), = tls[k].items()
            assert kind in ("secret", "configMap") and {"name", "key"} <= set(ref) <= SECRET_KEY_SELECTOR
    if "keySecret" in tls:
        assert {"name", "key"} <= set(tls["keySecret"]) <= SECRET_KEY_SELECTOR
    if web["tls"]["enabled"]:
        assert tls.get("ca") or tls.get("insecureSkipVerify"), "https without a CA to verify the agent"
    if web["tls"]["clientCA"]["secretName"]:
        assert tls.get("cert") and tls.get("keySecret"), "client certificates required: the monitor presents one"
    if web["basicAuth"]["users"]:
        auth = ep["basicAuth"]
        assert set(auth) == {"username", "password"}
        for ref in auth.values():
            assert {"name", "key"} <= set(ref) <= SECRET_KEY_SELECTOR


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
    if own_workload(scenario):
        assert spec["podSelector"]["matchLabels"] == values["sidecar"]["selector"]
    else:
        assert spec["podSelector"]["matchLabels"].items() <= pods["metadata"]["labels"].items()
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
    assert kinds == {"ServiceAccount", "Service", "DaemonSet", "ClusterRole", "ClusterRoleBinding"}


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
    (["age.socket.mode=999"], "mode"),
    (["age.socket.mode=4660"], "mode"),
    (["age.socket.mode=rw-rw----"], "mode"),
    # the agent's image has no /etc/group: a gid
    (["age.socket.group=wheel"], "group"),
    (["age.socket.group=-1"], "group"),
    # the agent refuses --age-url with --all (it joins one --pid): not a chart value
    (["age.url=http://127.0.0.1:8000/metrics"], "url"),
    (["serviceMonitor.interval=often"], "interval"),
    (["podMonitor.interval=often"], "interval"),
    (["podMonitor.selector.app=x"], "selector"),
    (["networkPolicy.from[0].podSelektor.matchLabels.app=x"], "podSelektor"),
    (["networkPolicy.from[0].ipBlock.except[0]=10.0.0.0/24"], "cidr"),
    (["networkPolicy.extraIngress[0].ports[0].protocol=ICMP"], "protocol"),
    # a plain password where a bcrypt hash belongs
    (["web.basicAuth.users.prometheus=s3cret"], "users"),
    (["web.basicAuth.users.prome:theus=$2b$10$5.iXW3GWzaNeqpNFI8Ks2O/WW6Vixgd6WOnb9cMg3.cmwSP0fC0rq"], "users"),
    (["web.headers.Content-Type=text/plain"], "headers"),
    (["web.tls.minVersion=TLS11"], "minVersion"),
    (["web.tls.clientAuthType=RequireAnyClientCert"], "clientAuthType"),
    (["web.tls.secretName=My_Secret"], "secretName"),
    (["web.tls.certFile=/x"], "certFile"),
    (["serviceMonitor.tlsConfig.ca.secret.name=ca", "serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
      "serviceMonitor.tlsConfig.ca.configMap.name=ca", "serviceMonitor.tlsConfig.ca.configMap.key=ca.crt"], "ca"),
    (["podMonitor.tlsConfig.caFile=/etc/ca.crt"], "caFile"),
    (["podMonitor.basicAuth.username.name=s", "podMonitor.basicAuth.username.key=u"], "password"),
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
    (None, ["web.tls.enabled=true"], "web.tls.secretName"),
    (None, ["web.tls.secretName=tls"], "web.tls.enabled=true"),
    (None, ["web.tls.clientCA.secretName=ca"], "web.tls.enabled=true"),
    (None, ["web.tls.enabled=true", "web.tls.secretName=tls", "web.tls.clientAuthType=VerifyClientCertIfGiven"], "clientCA.secretName"),
    (None, ["web.tls.enabled=true", "web.tls.secretName=tls", "web.tls.minVersion=TLS13", "web.tls.maxVersion=TLS12"], "above"),
    (None, ["web.existingSecret=w", "web.headers.X-Frame-Options=DENY"], "web.existingSecret"),
    ("daemonset-web-tls-auth-values.yaml", ["serviceMonitor.tlsConfig=null"], "serviceMonitor.tlsConfig"),
    ("daemonset-web-tls-auth-values.yaml", ["serviceMonitor.basicAuth=null"], "serviceMonitor.basicAuth"),
    (None, ["mode=sidecar", "sidecar.deployment.app.image=app:1", "web.tls.enabled=true", "web.tls.secretName=tls",
            "web.tls.clientCA.secretName=ca", "podMonitor.enabled=true", "podMonitor.tlsConfig.ca.secret.name=ca",
            "podMonitor.tlsConfig.ca.secret.key=ca.crt"], "podMonitor.tlsConfig.cert and keySecret"),
    ("daemonset-basic-auth-values.yaml", ["podMonitor.basicAuth=null"], "podMonitor.basicAuth"),
], ids=["age-socket-daemonset", "sidecar-without-app", "own-workload-without-selector", "servicemonitor-without-service",
        "podmonitor-own-workload-without-selector", "both-monitors", "networkpolicy-without-peers",
        "tls-without-secret", "tls-secret-without-tls", "client-ca-without-tls", "client-auth-without-ca", "tls-min-above-max",
        "existing-secret-and-headers", "https-monitor-without-tls-config", "monitor-without-basic-auth",
        "mtls-monitor-without-client-cert", "podmonitor-without-basic-auth"])
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
    for probe in ("readinessProbe", "livenessProbe"):
        assert c["waitmeter"][probe]["httpGet"] == chart[probe]["httpGet"]
    assert mounts(c["waitmeter"]) == mounts(chart)
    assert c["app"]["env"] == [{"name": "WAITMETER_SOCKET", "value": "/run/waitmeter/age.sock"}]
    if WAITMETER.exists():
        p = subprocess.run([str(WAITMETER), *c["waitmeter"]["args"], "--help"], capture_output=True, text=True, timeout=10)
        assert p.returncode == 0, f"waitmeter rejects the documented arguments: {p.stderr}"


def test_docs_endpoint_security_values_render_as_described(tmp_path):
    """The values example of docs/deployment.md ("Endpoint security") renders: the web config
    Secret, HTTPS probes, the ServiceMonitor scraping https with the CA and the credentials."""
    values = tmp_path / "web-values.yaml"
    values.write_text(docs_example("web-values"))
    rc, out, err = _template(CHART, (values,), ())
    assert rc == 0, err
    objs = [d for d in yaml.safe_load_all(out) if d]
    validate_for(objs, "docs web-values", KUBE_VERSION)
    given = yaml.safe_load(values.read_text())
    _, cfg, _ = web_config_of(objs)
    assert cfg["basic_auth_users"] == given["web"]["basicAuth"]["users"]
    assert cfg["http_server_config"]["headers"] == given["web"]["headers"]
    assert mounted_file(objs, agent(objs), cfg["tls_server_config"]["cert_file"]) == (given["web"]["tls"]["secretName"], "tls.crt")
    assert agent(objs)["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (ep,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert ep["scheme"] == "https"
    assert ep["tlsConfig"] == given["serviceMonitor"]["tlsConfig"] and ep["basicAuth"] == given["serviceMonitor"]["basicAuth"]


def parent_chart(tmp_path, values):
    """A chart of your own with waitmeter as a dependency and the documented pod template."""
    parent = tmp_path / "myapp"
    shutil.copytree(CHART, parent / "charts" / "waitmeter", ignore=shutil.ignore_patterns("files"))
    (parent / "templates").mkdir()
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    (parent / "Chart.yaml").write_text("apiVersion: v2\nname: myapp\nversion: 1.0.0\n"
                                       f"dependencies:\n  - name: waitmeter\n    version: {version}\n")
    (parent / "values.yaml").write_text(yaml.safe_dump({"waitmeter": {
        "mode": "sidecar", "sidecar": {"deployment": {"enabled": False}, "selector": {"app": "myapp"}},
        "age": {"socket": {"enabled": True}}, "serviceMonitor": {"enabled": True}, **values}}))
    (parent / "templates" / "deployment.yaml").write_text(docs_example("parent-template"))
    return parent


def test_named_templates_add_the_sidecar_to_your_own_chart(tmp_path):
    """The documented way to add the sidecar to an existing chart (docs/deployment.md)."""
    objs = render(chart=parent_chart(tmp_path, {}))
    for o in objs:
        if o["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(o, KUBE_VERSION, strict=True)
    assert sorted(o["kind"] for o in objs) == ["Deployment", "Service", "ServiceAccount", "ServiceMonitor"]
    c = containers(objs)
    assert list(c) == ["myapp", "waitmeter"]
    sc = c["waitmeter"]["securityContext"]
    assert set(sc["capabilities"]["add"]) == AGENT_CAPS and sc["capabilities"]["drop"] == ["ALL"]
    assert c["waitmeter"]["args"] == DEFAULT_ARGS + ["--age-socket=/run/waitmeter/age.sock", "--age-socket-mode=0660"]
    assert c["myapp"]["env"] == [{"name": "WAITMETER_SOCKET", "value": "/run/waitmeter/age.sock"}]
    assert mounts(c["myapp"]) == mounts(c["waitmeter"]) == {"/run/waitmeter": {"name": "waitmeter-run", "mountPath": "/run/waitmeter"}}
    assert list(volumes(objs)) == ["waitmeter-run"]
    assert one(objs, "Service")["spec"]["selector"] == {"app": "myapp"}


def test_named_templates_carry_the_endpoint_security(tmp_path):
    """With web.* set, the same documented template gets the web config's Secret (rendered by
    the subchart), its mounts and volumes, the flag and the HTTPS probes."""
    web = yaml.safe_load((CHART / "ci" / "daemonset-web-tls-auth-values.yaml").read_text())
    objs = render(chart=parent_chart(tmp_path, {"web": web["web"], "serviceMonitor": web["serviceMonitor"]}))
    for o in objs:
        if o["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(o, KUBE_VERSION, strict=True)
    assert sorted(o["kind"] for o in objs) == ["Deployment", "Secret", "Service", "ServiceAccount", "ServiceMonitor"]
    c = agent(objs)
    path, cfg, _ = web_config_of(objs)
    assert f"--web.config.file={path}" in c["args"]
    assert cfg["basic_auth_users"] == web["web"]["basicAuth"]["users"]
    assert mounted_file(objs, c, cfg["tls_server_config"]["cert_file"]) == (web["web"]["tls"]["secretName"], "tls.crt")
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (ep,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert ep["scheme"] == "https" and ep["basicAuth"] == web["serviceMonitor"]["basicAuth"]


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
    for required in ("waitmeter/Chart.yaml", "waitmeter/values.schema.json", "waitmeter/templates/NOTES.txt", "waitmeter/README.md",
                     "waitmeter/files/rules/waitmeter-rules.yaml"):
        assert required in names, f"{required} missing from the package"
    assert [n for n in names if n.startswith("waitmeter/files/dashboards/") and n.endswith(".json")]
    assert not [n for n in names if n.startswith("waitmeter/ci/")], "ci/ scenarios belong to the repository only"
