"""contrib/scrape/: the OpenTelemetry Collector and Grafana Alloy scrape configurations and the
`kubectl debug --custom` container spec, against the chart and the agent (docs/deployment.md,
"Ad-hoc attach inside a pod", "Scraping with the OpenTelemetry Collector", "Scraping with
Grafana Alloy").

No cluster, no collector and no Alloy here: the files are parsed, the Prometheus part of the
collector's receiver goes through `promtool check config`, and the relabel rules of both are
applied to the pods the chart renders (the targets Kubernetes pod discovery would make of them),
so a change of the chart's container name, port name or port, or of the mixin's job selector,
fails here. The chart is rendered with helm ($HELM, else .tools/bin/helm, as tests/test_helm.py
finds it); without helm its templates are read instead. Runs as any user.
"""
import json
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "waitmeter"
SCRAPE = ROOT / "contrib" / "scrape"
DOCS = ROOT / "docs" / "deployment.md"
HELM = Path(os.environ.get("HELM") or ROOT / ".tools" / "bin" / "helm")
WAITMETER = Path(os.environ.get("WAITMETER_BIN", ROOT / "agent" / "target" / "release" / "waitmeter"))
NAMESPACE = "monitoring"
RELEASE = "waitmeter"

OTELCOL = {"kubernetes": SCRAPE / "otelcol.yaml", "host": SCRAPE / "otelcol-host.yaml"}
ALLOY = {"kubernetes": SCRAPE / "waitmeter.alloy", "host": SCRAPE / "waitmeter-host.alloy"}
# Components (and what they export) as Grafana Alloy's reference docs name them (Alloy 1.18)
ALLOY_EXPORTS = {
    "discovery.kubernetes": {"targets"},
    "discovery.relabel": {"output", "rules"},
    "prometheus.scrape": set(),
    "prometheus.remote_write": {"receiver"},
}
# kubectl refuses a custom profile that sets these (kubectl debug --custom)
KUBECTL_CUSTOM_FORBIDDEN = {"name", "image", "command", "lifecycle", "volumeDevices"}


# ---- the chart ----------------------------------------------------------------------------------

def values():
    return yaml.safe_load((CHART / "values.yaml").read_text())


def chart_meta():
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def have_helm():
    return HELM.is_file() and os.access(HELM, os.X_OK)


@lru_cache(maxsize=None)
def render(*args):
    """The chart's objects (`helm template`), with extra helm arguments."""
    p = subprocess.run([str(HELM), "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                        "--kube-version", "1.30.0", *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def helpers():
    return (CHART / "templates" / "_helpers.tpl").read_text()


def define(name):
    """The body of a named template of _helpers.tpl."""
    text = helpers()
    start = text.index(f'{{{{- define "{name}" -}}}}')
    return text[start:text.index("{{- end }}\n\n", start)]


def agent_container_from_templates():
    """The agent container's name, metrics port name and added capabilities, read from the
    `waitmeter.container` template (for when helm is missing, and to check the reading)."""
    body = define("waitmeter.container")
    name = re.search(r"^- name: (\S+)$", body, re.M).group(1)
    port = re.search(r"ports:\n\s+- name: (\S+)\n\s+containerPort: \{\{ \$v\.agent\.port \}\}", body).group(1)
    caps = re.search(r"add:\n((?:\s+- [A-Z_]+\n)+)", body).group(1).split()
    return {"name": name, "port": port, "caps": [c for c in caps if c != "-"]}


def agent_container():
    """The agent container of the chart's DaemonSet: rendered, or as the templates say."""
    if have_helm():
        (ds,) = [o for o in render() if o["kind"] == "DaemonSet"]
        (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "waitmeter"]
        return c
    t = agent_container_from_templates()
    return {"name": t["name"], "ports": [{"name": t["port"], "containerPort": values()["agent"]["port"]}],
            "securityContext": {"capabilities": {"drop": ["ALL"], "add": t["caps"]}}}


def scrape_endpoint():
    """(path, scheme) the chart's monitors scrape by default."""
    if have_helm():
        (sm,) = [o for o in render("--set", "serviceMonitor.enabled=true") if o["kind"] == "ServiceMonitor"]
        (ep,) = sm["spec"]["endpoints"]
        return ep["path"], ep["scheme"]
    body = define("waitmeter.scrapeEndpoint")
    path = re.search(r"^path: (\S+)$", body, re.M).group(1)
    return path, "https" if values()["web"]["tls"]["enabled"] else "http"


def docs_manifest():
    """The plain sidecar manifest of docs/deployment.md (a Deployment)."""
    text = DOCS.read_text()
    block = text.split("<!-- test_helm: manifest -->", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


def chart_pods():
    """Pods (metadata + spec) that carry the agent: the chart's DaemonSet and sidecar Deployment
    (rendered, or built from the templates without helm) and the docs' plain manifest."""
    pods = []
    if have_helm():
        for args in ((), ("-f", str(CHART / "ci" / "sidecar-values.yaml"))):
            for o in render(*args):
                if o["kind"] in ("DaemonSet", "Deployment"):
                    pods.append((f"chart {o['kind']}", o["metadata"]["name"], o["spec"]["template"]))
    else:
        sel = {"app.kubernetes.io/name": chart_meta()["name"], "app.kubernetes.io/instance": RELEASE}
        pods.append(("chart templates", RELEASE, {"metadata": {"labels": sel}, "spec": {"containers": [agent_container()]}}))
    d = docs_manifest()
    pods.append(("docs manifest", d["metadata"]["name"], d["spec"]["template"]))
    return pods


def decoy_pods():
    """Pods that must not be scraped: an application with its own port named `metrics`, and a
    `waitmeter` container declaring only another port."""
    return [
        ("decoy app", "shop", {"metadata": {"labels": {"app": "shop"}}, "spec": {"containers": [
            {"name": "shop", "ports": [{"name": "metrics", "containerPort": 9090}]}]}}),
        ("decoy port", "other", {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [
            {"name": "waitmeter", "ports": [{"name": "debug", "containerPort": 6060}]}]}}),
    ]


def mixin_job_regex():
    """The job the mixin's WaitmeterAgentDown selects (dashboards/config.yaml agentSelector)."""
    sel = yaml.safe_load((ROOT / "dashboards" / "config.yaml").read_text())["agentSelector"]
    return re.fullmatch(r'job=~"(.*)"', sel).group(1)


def default_listen():
    """`waitmeter run`'s default --listen (agent/src/export/http.rs)."""
    src = (ROOT / "agent" / "src" / "export" / "http.rs").read_text()
    return re.search(r'pub const DEFAULT_LISTEN: &str = "([^"]+)";', src).group(1)


# ---- Kubernetes pod discovery and Prometheus relabeling, simulated -------------------------------

def sanitize(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_targets(name, template, *, namespace="shop", node="node-1", ip="10.1.2.3", phase="Running"):
    """The targets Prometheus' Kubernetes discovery (role: pod) makes of one pod: one per declared
    container port, one without a port for a container that declares none."""
    meta = template.get("metadata") or {}
    base = {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_name": f"{name}-x7k2p",
            "__meta_kubernetes_pod_node_name": node, "__meta_kubernetes_pod_ip": ip,
            "__meta_kubernetes_pod_phase": phase, "__meta_kubernetes_pod_ready": "true"}
    for k, v in (meta.get("labels") or {}).items():
        base[f"__meta_kubernetes_pod_label_{sanitize(k)}"] = str(v)
        base[f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"] = "true"
    for k, v in (meta.get("annotations") or {}).items():
        base[f"__meta_kubernetes_pod_annotation_{sanitize(k)}"] = str(v)
        base[f"__meta_kubernetes_pod_annotationpresent_{sanitize(k)}"] = "true"
    out = []
    for c in template["spec"]["containers"]:
        common = {**base, "__meta_kubernetes_pod_container_name": c["name"],
                  "__meta_kubernetes_pod_container_init": "false"}
        if not c.get("ports"):
            out.append({**common, "__address__": ip})
        for p in c.get("ports") or []:
            out.append({**common, "__address__": f"{ip}:{p['containerPort']}",
                        "__meta_kubernetes_pod_container_port_name": p.get("name", ""),
                        "__meta_kubernetes_pod_container_port_number": str(p["containerPort"]),
                        "__meta_kubernetes_pod_container_port_protocol": p.get("protocol", "TCP")})
    return out


def expand(m, template):
    """Go's regexp Expand, as Prometheus applies a replacement: $1, ${1}, $name; $$ is a `$`."""
    def one(t):
        if t.group(0) == "$$":
            return "$"
        ref = t.group(1) or t.group(2)
        if ref.isdigit():
            return (m.group(int(ref)) or "") if int(ref) <= m.re.groups else ""
        return m.groupdict().get(ref) or ""
    return re.sub(r"\$\$|\$\{(\w+)\}|\$(\w+)", one, template)


def relabel(labels, rules):
    """Prometheus' target relabeling (the actions these files use); None: the target is dropped."""
    labels = dict(labels)
    for r in rules:
        action = r.get("action", "replace").lower()
        regex = re.compile(f"(?s:{r.get('regex', '(.*)')})")
        value = r.get("separator", ";").join(labels.get(s, "") for s in r.get("source_labels", []))
        m = regex.fullmatch(value)
        if action == "keep":
            if not m:
                return None
        elif action == "drop":
            if m:
                return None
        elif action == "replace":
            if m:
                target, result = expand(m, r["target_label"]), expand(m, r.get("replacement", "$1"))
                if result:
                    labels[target] = result
                else:
                    labels.pop(target, None)
        else:
            raise AssertionError(f"relabel action {action} is not simulated here: extend relabel()")
    return labels


def check_pod_selection(rules, job):
    """The rules keep exactly the agent's metrics port of every pod that carries the agent, with
    namespace, pod and node labels, and nothing of other pods or containers, nor finished pods."""
    agent = agent_container()
    (port,) = agent["ports"]
    assert re.fullmatch(mixin_job_regex(), job), f"job {job!r} escapes the mixin's job selector"
    for what, name, template in chart_pods():
        targets = pod_targets(name, template)
        kept = [t for t in (relabel(t, rules) for t in targets) if t]
        wanted = [t for t in targets if t["__meta_kubernetes_pod_container_name"] == agent["name"]
                  and t.get("__meta_kubernetes_pod_container_port_name") == port["name"]]
        assert wanted, f"{what}: no container {agent['name']} with a port {port['name']}: the chart changed"
        assert len(kept) == 1, f"{what}: {len(kept)} targets kept of {[t['__address__'] for t in targets]}"
        (t,) = kept
        assert t["__address__"].endswith(f":{port['containerPort']}") and port["containerPort"] == values()["agent"]["port"]
        assert {k: t.get(k) for k in ("namespace", "pod", "node")} == {
            "namespace": "shop", "pod": f"{name}-x7k2p", "node": "node-1"}, what
        done = [relabel(t, rules) for t in pod_targets(name, template, phase="Succeeded")]
        assert not any(done), f"{what}: a finished pod is still scraped"
    for what, name, template in decoy_pods():
        assert not any(relabel(t, rules) for t in pod_targets(name, template)), f"{what} is scraped"


# ---- the kubectl debug container ------------------------------------------------------------

def test_debug_container_adds_exactly_the_agents_capabilities():
    spec = json.loads((SCRAPE / "debug-container.json").read_text())
    assert not set(spec) & KUBECTL_CUSTOM_FORBIDDEN, "kubectl debug --custom refuses these fields"
    sc = spec["securityContext"]
    chart = agent_container()["securityContext"]
    assert sorted(sc["capabilities"]["add"]) == sorted(chart["capabilities"]["add"])
    assert sc["capabilities"]["drop"] == chart["capabilities"]["drop"] == ["ALL"]
    assert sc["runAsUser"] == 0 and sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    if have_helm():
        assert sc == chart, "the debug container's security context is not the chart's agent's"


def test_template_reading_matches_the_rendered_chart():
    """The fallback without helm reads the templates: it must read what helm renders."""
    if not have_helm():
        pytest.skip(f"no helm at {HELM} (make setup, or HELM=): the templates are read instead")
    t, c = agent_container_from_templates(), agent_container()
    assert (t["name"], t["port"], t["caps"]) == (
        c["name"], c["ports"][0]["name"], c["securityContext"]["capabilities"]["add"])


def section(title):
    text = DOCS.read_text()
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def shell_commands(text, program):
    """The commands of the ```sh blocks of `text` that start with `program`, continuation lines joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            cmd = cmd.split("  #", 1)[0].strip()
            if cmd.startswith(program):
                out.append(cmd)
    return out


def attach_options():
    """The long options of `waitmeter attach`: its --help, or agent/src/cli.rs."""
    if WAITMETER.exists():
        p = subprocess.run([str(WAITMETER), "attach", "--help"], capture_output=True, text=True, timeout=10)
        assert p.returncode == 0, p.stderr
        return set(re.findall(r"--[a-z][a-z0-9.-]*", p.stdout))
    src = (ROOT / "agent" / "src" / "cli.rs").read_text()
    return {"--" + f.replace("_", "-") for f in re.findall(r"pub (\w+):", src)}


def test_docs_kubectl_debug_recipes():
    text = section("Ad-hoc attach inside a pod")
    cmds = shell_commands(text, "kubectl debug")
    assert len(cmds) >= 4, cmds
    binary = values()["image"]["command"][0]
    options = attach_options()
    custom = 0
    for cmd in cmds:
        target, _, inner = cmd.partition(" -- ")
        assert "--image=$IMAGE" in target, cmd
        assert inner.split()[:2] == [binary, "attach"], f"{cmd}: the image's binary is {binary}"
        for opt in re.findall(r"(?<!\S)--[a-z][a-z0-9.-]*", inner):
            assert opt in options, f"{cmd}: waitmeter attach has no {opt}"
        profile = re.search(r"--profile=(\w+)", target).group(1)
        if "--custom=" in target:
            custom += 1
            path = re.search(r"--custom=(\S+)", target).group(1)
            assert (ROOT / path).is_file(), path
            assert profile == "general", cmd
        else:
            assert profile == "sysadmin", f"{cmd}: only sysadmin grants CAP_BPF and CAP_PERFMON"
        assert ("node/" in target) != ("--target=" in target), cmd
    assert custom, "no --custom variant"
    # the image placeholder is the chart's image at its appVersion
    image = re.search(r"^IMAGE=(\S+)$", text, re.M).group(1)
    repo, tag = image.rsplit(":", 1)
    assert tag == chart_meta()["appVersion"] and repo.rsplit("/", 1)[-1] == values()["image"]["repository"], image


def test_docs_name_every_snippet():
    text = DOCS.read_text()
    named = set(re.findall(r"contrib/scrape/[\w.-]+", text))
    present = {f"contrib/scrape/{p.name}" for p in SCRAPE.iterdir()}
    assert named == present, f"documented {sorted(named)}, present {sorted(present)}"


# ---- OpenTelemetry Collector ----------------------------------------------------------------

def otelcol(kind):
    return yaml.safe_load(OTELCOL[kind].read_text())


def bare_dollars(obj, path="config"):
    """Strings with a `$` the collector would expand or mangle: every `$` must be `$$` (a
    literal `$`) or open `${...}` (the collector's own expansion)."""
    if isinstance(obj, dict):
        return [b for k, v in obj.items() for b in bare_dollars(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [b for i, v in enumerate(obj) for b in bare_dollars(v, f"{path}[{i}]")]
    if isinstance(obj, str):
        rest = obj.replace("$$", "")
        if re.search(r"\$(?!\{)", rest):
            return [f"{path}: {obj!r}"]
    return []


def collector_expand(obj):
    """What the receiver sees after the collector's expansion: `$$` is `$`, ${env:X} a value."""
    if isinstance(obj, dict):
        return {k: collector_expand(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [collector_expand(v) for v in obj]
    if isinstance(obj, str):
        return re.sub(r"\$\$|\$\{(?:env:)?(\w+)\}", lambda m: "$" if m.group(0) == "$$" else f"value-of-{m.group(1)}", obj)
    return obj


def scrape_configs(kind):
    return collector_expand(otelcol(kind)["receivers"]["prometheus"]["config"])["scrape_configs"]


@pytest.mark.parametrize("kind", sorted(OTELCOL))
def test_otelcol_pipeline_names_existing_components(kind):
    cfg = otelcol(kind)
    pipelines = cfg["service"]["pipelines"]
    assert "metrics" in pipelines
    for pipeline in pipelines.values():
        for section_ in ("receivers", "processors", "exporters"):
            for name in pipeline.get(section_, []):
                assert name in (cfg.get(section_) or {}), f"{name} is in the pipeline but not under {section_}"
    assert "prometheus" in pipelines["metrics"]["receivers"]
    assert pipelines["metrics"]["exporters"]
    # no component left out of the pipelines
    for section_ in ("receivers", "processors", "exporters"):
        used = {n for p in pipelines.values() for n in p.get(section_, [])}
        assert set(cfg.get(section_) or {}) == used, section_


@pytest.mark.parametrize("kind", sorted(OTELCOL))
def test_otelcol_dollars_are_escaped_and_regexes_compile(kind):
    assert bare_dollars({"replacement": "$1"}) and not bare_dollars({"replacement": "$$1", "f": "${env:X}"})
    raw = otelcol(kind)["receivers"]["prometheus"]["config"]
    assert not bare_dollars(raw), bare_dollars(raw)
    for job in scrape_configs(kind):
        for rule in job.get("relabel_configs", []) + job.get("metric_relabel_configs", []):
            re.compile(rule.get("regex", "(.*)"))
            for field in ("replacement", "target_label"):
                if field in rule:
                    expand(re.fullmatch("(.*)", "x"), rule[field])  # a valid template


@pytest.mark.parametrize("kind", sorted(OTELCOL))
def test_otelcol_scrape_configs_pass_promtool(kind, tmp_path):
    """The receiver's Prometheus configuration, as the receiver sees it, through promtool.
    Debian's Prometheus is built without Kubernetes discovery: that block is swapped for a static
    one here, and checked by test_otelcol_kubernetes_job_selects_the_agent_pods."""
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.fail("promtool not found: make setup installs it (Debian's prometheus)")
    jobs = scrape_configs(kind)
    for job in jobs:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": ["10.1.2.3:9747"]}]
    f = tmp_path / "prometheus.yml"
    f.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    p = subprocess.run([promtool, "check", "config", str(f)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr


def test_otelcol_kubernetes_job_selects_the_agent_pods():
    (job,) = scrape_configs("kubernetes")
    assert [sd["role"] for sd in job["kubernetes_sd_configs"]] == ["pod"]
    assert (job["metrics_path"], job.get("scheme", "http")) == scrape_endpoint()
    check_pod_selection(job["relabel_configs"], job["job_name"])


def test_otelcol_host_job_scrapes_the_default_listen_address():
    (job,) = scrape_configs("host")
    (static,) = job["static_configs"]
    assert static["targets"] == [default_listen()]
    assert default_listen().endswith(f":{values()['agent']['port']}")
    unit = (ROOT / "contrib" / "systemd" / "waitmeter.service").read_text()
    assert f"WAITMETER_LISTEN={default_listen()}" in unit
    assert (job["metrics_path"], job.get("scheme", "http")) == scrape_endpoint()
    assert re.fullmatch(mixin_job_regex(), job["job_name"])


# ---- Grafana Alloy ------------------------------------------------------------------------------

STRING = r'"(?:[^"\\\n]|\\.)*"'


def strip_comments(text):
    """Alloy source without // and /* */ comments (string literals kept)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == '"':
            m = re.compile(STRING).match(text, i)
            assert m, f"unterminated string at {text[i:i + 40]!r}"
            out.append(m.group(0))
            i = m.end()
        elif text[i] == "`":
            j = text.index("`", i + 1)
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def blocks(text):
    """The top-level blocks of Alloy source without comments: [(header, body)]; asserts that
    brackets balance and that nothing but blocks sits at the top level."""
    out, start, head_from = [], None, 0
    pairs = {"}": "{", "]": "[", ")": "("}
    stack = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = re.compile(STRING).match(text, i).end()
            continue
        if ch == "`":
            i = text.index("`", i + 1) + 1
            continue
        if ch in "{[(":
            if not stack and ch == "{":
                start = i
            stack.append(ch)
        elif ch in "}])":
            assert stack and stack[-1] == pairs[ch], f"unbalanced {ch!r} at {text[max(0, i - 60):i + 1]!r}"
            stack.pop()
            if not stack and ch == "}":
                out.append((text[head_from:start].strip(), text[start + 1:i]))
                head_from = i + 1
        i += 1
    assert not stack, f"unclosed {stack}"
    assert not text[head_from:].strip(), f"stray text at the top level: {text[head_from:].strip()!r}"
    return out


def components(path):
    """{(kind, label): body} of an Alloy file; every top-level block is `kind.name "label" {`."""
    found = {}
    for header, body in blocks(strip_comments(path.read_text())):
        m = re.fullmatch(r'([a-z_]+(?:\.[a-z_]+)+)\s+"([A-Za-z0-9_]+)"', header)
        assert m, f"{path.name}: not a component block: {header!r}"
        assert m.group(1) in ALLOY_EXPORTS, f"{path.name}: component {m.group(1)} was not checked against the docs"
        assert (m.group(1), m.group(2)) not in found, f"{path.name}: {header} twice"
        found[(m.group(1), m.group(2))] = body
    return found


def attribute(body, name):
    """An attribute of a block body: a string, a list of strings, or the expression's text."""
    m = re.search(rf"^\s*{name}\s*=\s*(.+)$", body, re.M)
    if not m:
        return None
    value = m.group(1).strip()
    if re.fullmatch(STRING, value):
        return json.loads(value)
    if re.fullmatch(rf"\[\s*(?:{STRING}\s*,\s*)*(?:{STRING}\s*)?\]", value):
        return [json.loads(s) for s in re.findall(STRING, value)]
    return value


def rules(body):
    """The `rule` blocks of a discovery.relabel body, as Prometheus relabel configs."""
    out = []
    for b in re.findall(r"\brule\s*\{(.*?)\n\s*\}", body, re.S):
        r = {}
        for field in ("source_labels", "regex", "action", "target_label", "replacement", "separator"):
            v = attribute(b, field)
            if v is not None:
                r[field] = v
        out.append(r)
    return out


@pytest.mark.parametrize("kind", sorted(ALLOY))
def test_alloy_structure_and_references(kind):
    comps = components(ALLOY[kind])
    text = strip_comments(ALLOY[kind].read_text())
    refs = re.findall(r"\b(discovery\.[a-z_]+|prometheus\.[a-z_]+)\.([A-Za-z0-9_]+)\.([a-z_]+)\b", text)
    assert refs, "no component refers to another"
    for comp, label, export in refs:
        assert (comp, label) in comps, f"{comp}.{label} is referred to but not defined"
        assert export in ALLOY_EXPORTS[comp], f"{comp} exports no {export}"
    scrapes = {label: body for (comp, label), body in comps.items() if comp == "prometheus.scrape"}
    assert scrapes
    for label, body in scrapes.items():
        forward = attribute(body, "forward_to")
        dest = re.fullmatch(r"\[\s*prometheus\.remote_write\.([A-Za-z0-9_]+)\.receiver\s*\]", forward)
        assert dest and ("prometheus.remote_write", dest.group(1)) in comps, forward
        assert attribute(body, "targets"), label
        assert re.fullmatch(mixin_job_regex(), attribute(body, "job_name")), "the mixin's job selector"
        assert (attribute(body, "metrics_path"), attribute(body, "scheme")) == scrape_endpoint()
    for (comp, label), body in comps.items():
        if comp == "prometheus.remote_write":
            assert re.search(rf"endpoint\s*\{{[^}}]*\burl\s*=\s*{STRING}", body), f"{label}: no endpoint url"


def test_alloy_kubernetes_rules_select_the_agent_pods():
    comps = components(ALLOY["kubernetes"])
    (disc,) = [b for (c, _), b in comps.items() if c == "discovery.kubernetes"]
    assert attribute(disc, "role") == "pod"
    (scrape,) = [b for (c, _), b in comps.items() if c == "prometheus.scrape"]
    relabel_label = re.fullmatch(r"discovery\.relabel\.(\w+)\.output", attribute(scrape, "targets")).group(1)
    body = comps[("discovery.relabel", relabel_label)]
    assert re.fullmatch(r"discovery\.kubernetes\.(\w+)\.targets", attribute(body, "targets"))
    check_pod_selection(rules(body), attribute(scrape, "job_name"))


def test_alloy_and_collector_select_alike():
    """The two Kubernetes setups keep the same targets with the same labels."""
    comps = components(ALLOY["kubernetes"])
    (body,) = [b for (c, _), b in comps.items() if c == "discovery.relabel"]
    (job,) = scrape_configs("kubernetes")
    for _, name, template in chart_pods() + decoy_pods():
        for t in pod_targets(name, template):
            assert relabel(t, rules(body)) == relabel(t, job["relabel_configs"]), name


def test_alloy_host_scrapes_the_default_listen_address():
    comps = components(ALLOY["host"])
    (scrape,) = [b for (c, _), b in comps.items() if c == "prometheus.scrape"]
    targets = attribute(scrape, "targets")
    assert re.fullmatch(r'\[\s*\{\s*"__address__"\s*=\s*"' + re.escape(default_listen()) + r'"\s*\}\s*\]', targets), targets
