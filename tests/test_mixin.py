"""The monitoring mixin (dashboards/): generated files are fresh, the rules pass
promtool's checks and unit tests, the dashboards are structurally valid, and,
end to end, a real Prometheus scraping a real `waitmeter run` with the rules
loaded raises the GIL starvation alert for the starving workload and not for
its healthy control, while every dashboard query returns data."""
import json
import re
import subprocess
import sys
import time
import urllib.parse

import pytest
import yaml

from conftest import ROOT, WAITMETER, Guard, Workload, free_port, prometheus, prometheus_api as api, wait_http, which
from test_age import CLIENT, app_python  # noqa: F401  (fixture)
from test_blame import throttled_cgroup  # noqa: F401  (fixture)
from test_gil import STARVE

MIXIN = ROOT / "dashboards"
RULES = MIXIN / "rules" / "waitmeter-rules.yaml"
DASHBOARDS = sorted((MIXIN / "json").glob("*.json"))
CONFIG = yaml.safe_load((MIXIN / "config.yaml").read_text())
DS = {"type": "prometheus", "uid": "${datasource}"}
BUILTIN_VARS = {"__rate_interval", "__range", "__interval"}


def test_generated_files_are_up_to_date():
    cp = subprocess.run([sys.executable, str(MIXIN / "mixin.py"), "--check"], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, f"the mixin is stale, run `make mixin`:\n{cp.stderr}"


def test_rules_pass_promtool_check_and_unit_tests():
    assert which("promtool"), "promtool (Debian prometheus) is installed by make setup"
    cp = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    cp = subprocess.run(["promtool", "test", "rules", str(MIXIN / "tests" / "waitmeter-rules.test.yaml")],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "SUCCESS" in cp.stdout, cp.stdout + cp.stderr


def alerts():
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_has_its_runbook_section_and_a_firing_unit_test():
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", runbook, re.M)}
    tests = (MIXIN / "tests" / "waitmeter-rules.test.yaml").read_text()
    names = [a["alert"] for a in alerts()]
    assert {"WaitmeterGILStarvation", "WaitmeterAgeRisingWhileIdle", "WaitmeterCPUThrottling", "WaitmeterRunqueueSaturation",
            "WaitmeterLockConvoy", "WaitmeterAgentDown", "WaitmeterProbeDetached"} <= set(names)
    for a in alerts():
        ann = a["annotations"]
        assert ann["summary"] and ann["description"], a
        url, _, anchor = ann["runbook_url"].partition("#")
        assert url.endswith("docs/runbook.md") and anchor == a["alert"].lower(), ann["runbook_url"]
        assert anchor in anchors, f"docs/runbook.md has no section for {a['alert']}"
        assert re.search(rf"alertname: {a['alert']}\n\s+exp_alerts:\n\s+- exp_labels", tests), f"no firing test for {a['alert']}"


def catalogue():
    """Metric names served by the agent (docs/metrics.md is generated from its catalogue)."""
    names = set(re.findall(r"^\| `(waitmeter_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text(), re.M))
    hist = {n for n in names if n in ("waitmeter_gil_hold_seconds", "waitmeter_gil_function_hold_seconds",
                                      "waitmeter_thread_stretch_seconds")}
    return names | {f"{n}_{s}" for n in hist for s in ("bucket", "sum", "count")}


def panels(d):
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_structure(path):
    from grafana_foundation_sdk.models.dashboard import Dashboard

    d = json.loads(path.read_text())
    Dashboard.from_json(d)  # the SDK's own model accepts it
    assert d["schemaVersion"] >= 36 and d["uid"] == path.stem and d["title"].startswith("waitmeter / ")
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ["namespace", "pod", "container", "thread"]:
        v = variables[name]
        assert v["type"] == "query" and v["datasource"] == DS and v["includeAll"] and v["allValue"] == ".*", v
    # the processes the workload variables select: "All" is the options listed, not ".*"
    for name in ["instance", "pid", "cgroup"]:
        v = variables[name]
        assert v["type"] == "query" and v["includeAll"] and not v.get("allValue"), v
        assert "waitmeter_process_info{" in v["query"]["query"] and 'namespace=~"$namespace"' in v["query"]["query"], v
    known = catalogue()
    ids, cells = set(), set()
    for p in panels(d):
        assert p["id"] not in ids, f"duplicate panel id {p['id']}"
        ids.add(p["id"])
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, (p["title"], g)
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']!r} overlaps another"
                cells.add((x, y))
        if p["type"] == "row":
            continue
        assert p["datasource"] == DS, p["title"]
        assert len(p.get("description", "")) >= 60, f"panel {p['title']!r} needs a description a person can act on"
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(set(refs)) == len(refs) and all(refs), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DS and t["expr"].strip(), p["title"]
            for var in re.findall(r"\$\{?(\w+)", t["expr"]):
                assert var in variables or var in BUILTIN_VARS, f"{p['title']}: ${var} is not a variable"
            for metric in re.findall(r"\b(waitmeter_[a-z_]+)", t["expr"]):
                assert metric in known, f"{p['title']}: {metric} is not a waitmeter metric"
    assert len(ids) >= 4


def test_profile_links_open_the_clicked_series_wait_profile():
    """The GIL and lock panels' data links: after Grafana fills in the variables and the
    browser decodes the URL, a Pyroscope Explore query of waitmeter's profile type, whose
    label matchers use labels the agent puts in its profiles and take their values from
    labels the panel's series have."""
    profile_labels = {"pid", "comm", "thread", "state", "role", "victim", "service_name"}
    text = (ROOT / "agent" / "src" / "export" / "push.rs").read_text()
    name = re.search(r'PROFILE_NAME: &str = "([a-z_]+)"', text).group(1)
    seen = 0
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        variables = {v["name"]: v for v in d["templating"]["list"]}
        for p in panels(d):
            for link in (p.get("fieldConfig") or {}).get("defaults", {}).get("links", []):
                seen += 1
                assert variables["pyroscope_datasource"]["query"] == "grafana-pyroscope-datasource"
                series_labels = set()
                for t in p["targets"]:
                    for by in re.findall(r"by \(([^)]*)\)", t["expr"]):
                        series_labels |= {x.strip() for x in by.split(",")}
                filled = re.sub(r"\$\{__field\.labels\.(\w+):percentencode\}",
                                lambda m: (m.group(1) in series_labels or pytest.fail(f"{p['title']}: no label {m.group(1)}")) and "v%2F1",
                                link["url"])
                filled = filled.replace("${pyroscope_datasource}", "pyro").replace("${__from}", "1").replace("${__to}", "2")
                assert "$" not in filled, filled
                url = urllib.parse.urlsplit(filled)
                assert url.path == "/explore"
                panes = json.loads(urllib.parse.parse_qs(url.query)["panes"][0])
                q = panes["a"]["queries"][0]
                assert q["profileTypeId"] == f"{name}:wait:nanoseconds:wait:nanoseconds" and q["queryType"] == "profile"
                assert q["datasource"] == {"type": "grafana-pyroscope-datasource", "uid": "pyro"}
                matchers = re.findall(r'(\w+)="([^"]*)"', q["labelSelector"])
                assert matchers and {k for k, _ in matchers} <= profile_labels, q["labelSelector"]
                assert ("role", "victim") in matchers or ("role", "holder") in matchers or ("role", "waker") in matchers
                assert all(v in ("v/1", "victim", "holder", "waker", "gil_wait", "futex_wait") for _, v in matchers), matchers
    assert seen >= 5, seen


def test_the_four_dashboards_of_the_mixin():
    titles = {json.loads(p.read_text())["uid"] for p in DASHBOARDS}
    assert titles == {"waitmeter-overview", "waitmeter-gil", "waitmeter-cpu", "waitmeter-locks"}


# ------------------------------------------------------------------ end to end


def substitute(expr, pids):
    """The variables as Grafana would expand them for 'All' and the selected processes."""
    values = {"namespace": ".*", "pod": ".*", "container": ".*", "instance": ".*", "cgroup": ".*",
              "pid": "|".join(map(str, pids)), "thread": ".*",
              "__rate_interval": "20s", "__range": "30s", "__interval": "2s", "datasource": "prometheus"}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)


@pytest.mark.needs_root
def test_prometheus_with_the_rules_alerts_on_starvation_only_and_every_panel_has_data(
        app_python, throttled_cgroup, workload_bin, tmp_path):  # noqa: F811
    sock = tmp_path / "age.sock"
    env = {"PYTHONPATH": str(CLIENT), "WAITMETER_SOCKET": str(sock)}
    port = free_port()
    with Workload(app_python, STARVE, "same", "--client", env=env) as starving, \
            Workload(app_python, STARVE, "separate", "--client", env=env) as control, \
            Workload(workload_bin, "--busy", 1) as quota, \
            Workload(app_python, ROOT / "tests" / "workloads" / "lock_contend.py") as lock:
        (throttled_cgroup / "cgroup.procs").write_text(str(quota.pid))
        pids = [starving.pid, control.pid, quota.pid, lock.pid]
        agent = subprocess.Popen(
            [str(WAITMETER), "run", *sum((["--pid", str(p)] for p in pids), []), "--listen", f"127.0.0.1:{port}",
             "--gil-probe", "uprobe", "--age-socket", str(sock)],
            stderr=subprocess.PIPE, text=True)
        with Guard(agent):
            wait_http(f"http://127.0.0.1:{port}/metrics")
            # the same rules with their 5m windows shortened to 20s: rate() over a window
            # longer than the data divides by the whole window and would underestimate
            short = tmp_path / "rules.yaml"
            short.write_text(RULES.read_text().replace("[5m]", "[20s]"))
            assert short.read_text().count("[20s]") >= 7
            with prometheus(tmp_path, port, [short]) as base:
                groups = api(base, "/api/v1/rules")["groups"]
                assert {g["name"] for g in groups} == {"waitmeter.rules", "waitmeter.alerts"}
                # the alerts need 5 minutes of rate() but not 5 minutes of data: wait for
                # the starving thread's alert (pending, its `for` is 2m) and the quota's
                deadline = time.monotonic() + 90
                while True:
                    active = api(base, "/api/v1/alerts")["alerts"]
                    gil = [a for a in active if a["labels"]["alertname"] == "WaitmeterGILStarvation"]
                    thr = [a for a in active if a["labels"]["alertname"] == "WaitmeterCPUThrottling"]
                    if (gil and thr and time.monotonic() > deadline - 60) or time.monotonic() > deadline:
                        break
                    time.sleep(1)
                panels_without_data = []
                for path in DASHBOARDS:
                    for p in panels(json.loads(path.read_text())):
                        for t in p.get("targets", []):
                            expr = substitute(t["expr"], pids)
                            if t.get("instant"):
                                result = api(base, "/api/v1/query", query=expr)["result"]
                            else:
                                now = time.time()
                                result = api(base, "/api/v1/query_range", query=expr, start=now - 20, end=now, step=2)["result"]
                            if not result:
                                panels_without_data.append(f"{path.stem}: {p['title']} ({t['refId']}): {expr}")
                recorded = api(base, "/api/v1/query", query="waitmeter:thread_wait_ratio:rate5m")["result"]
                shares = api(base, "/api/v1/query", query='waitmeter:thread_state:rate5m{thread="ingest"} > 0.05')["result"]
    # GIL starvation: the starving process' ingest thread, pending or firing; never the control
    shares = {(r["metric"]["pid"], r["metric"]["state"]): round(float(r["value"][1]), 3) for r in shares}
    assert gil, f"no GIL starvation alert; ingest's states (pid, state): {shares}; active: {active}"
    assert {a["labels"]["pid"] for a in gil} == {str(starving.pid)}, gil
    assert {a["labels"]["thread"] for a in gil} == {"ingest"}, gil
    assert all(a["state"] in ("pending", "firing") for a in gil)
    assert "mostly behind thread processor" in gil[0]["annotations"]["description"], gil[0]
    # the 20% quota cgroup is throttled in nearly every period (and only it)
    assert [a["labels"]["cgroup"] for a in thr] == [f"/{throttled_cgroup.name}"], thr
    # nothing else about the control process
    assert not [a for a in active if a["labels"].get("pid") == str(control.pid)], active
    assert not [a for a in active if a["labels"]["alertname"] in ("WaitmeterAgentDown", "WaitmeterProbeDetached")], active
    # one waiter behind one holder is contention, not a convoy
    assert not [a for a in active if a["labels"]["alertname"] == "WaitmeterLockConvoy"], active
    assert not panels_without_data, "panels without data:\n" + "\n".join(panels_without_data)
    ratios = {(r["metric"]["pid"], r["metric"]["thread"]): float(r["value"][1]) for r in recorded}
    assert ratios[(str(starving.pid), "ingest")] >= 0.5 > ratios[(str(control.pid), "ingest")], ratios
