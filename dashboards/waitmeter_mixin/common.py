"""What the rules and the dashboards share: the mixin's configuration
(dashboards/config.yaml), the label selectors and the Grafana building blocks.

Dashboards are built with the official grafana-foundation-sdk; queries use the
metrics of docs/metrics.md only, so every panel works without the recording
rules too. The namespace, pod and container variables select processes
through waitmeter_process_info (its labels are the workload's: the node
agent's series carry its own pod's as target labels, or none); the instance,
pid and cgroup variables list the processes they select ("All" is every one of
those, not every value), and every selector carries them. With "All", namespace,
pod and container match ".*", which also matches a process without those labels
(a host process, a Prometheus outside Kubernetes).
"""
import json
import pathlib

import yaml
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat as statb
from grafana_foundation_sdk.builders import table as tableb
from grafana_foundation_sdk.builders import timeseries as tsb
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

HERE = pathlib.Path(__file__).resolve().parent.parent  # dashboards/
CFG = yaml.safe_load((HERE / "config.yaml").read_text())

# the states in which a thread has work and cannot run it
WAITING = "runqueue|throttled|gil_wait"

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
# the workloads chosen, in waitmeter_process_info's labels
W = 'namespace=~"$namespace", pod=~"$pod", container=~"$container"'
# agents (the self metrics), cgroups, processes, threads
K = 'instance=~"$instance"'
CG = K + ', cgroup=~"$cgroup"'
P = K + ', pid=~"$pid"'
T = P + ', thread=~"$thread"'
RATE = "$__rate_interval"


def q(expr, legend, ref, instant=False, table=False):
    b = pb.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    if instant:
        b = b.instant()
    else:
        b = b.range()
    if table:
        b = b.format(pm.PromQueryFormat.TABLE)
    return b


class Layout:
    """Panels left to right, wrapping at 24 columns; unique ids per dashboard."""

    def __init__(self):
        self.x = self.y = self.row_h = 0
        self.next_id = 1

    def place(self, panel, w, h):
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel = panel.id(self.next_id).grid_pos(dm.GridPos(h=h, w=w, x=self.x, y=self.y))
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        return panel

    def row(self, title):
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        r = db.Row(title).id(self.next_id).grid_pos(dm.GridPos(h=1, w=24, x=0, y=self.y))
        self.next_id += 1
        self.y += 1
        return r


def timeseries(title, description, targets, unit, stacked=False, fill=10, max_=None):
    p = (
        tsb.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .fill_opacity(60 if stacked else fill)
        .line_width(1)
        .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE).placement(cm.LegendPlacement.RIGHT).show_legend(True))
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if stacked:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    if max_ is not None:
        p = p.max(max_)
    p = p.min(0)
    for t in targets:
        p = p.with_target(t)
    return p


def table(title, description, targets, unit, matrix=None):
    p = tableb.Panel().title(title).description(description).datasource(DS).unit(unit)
    for t in targets:
        p = p.with_target(t)
    if matrix:
        row, col = matrix
        p = p.with_transformation(
            dm.DataTransformerConfig(id_val="groupingToMatrix", options={"rowField": row, "columnField": col, "valueField": "Value"})
        )
    return p


def stat(title, description, target, unit, thresholds):
    steps = [dm.Threshold(value=None, color="green")] + [dm.Threshold(value=v, color=c) for v, c in thresholds]
    return (
        statb.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .with_target(target)
        .thresholds(db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps))
    )


def variable(name, label, query, multi=True, all_value=".*", hide=False):
    """A multi-value query variable. all_value ".*" matches everything (a series without the
    label too); None: "All" is the options listed, as a regex of them (a filter)."""
    v = (
        db.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": query, "refId": f"{name}-var"})
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(True)
        .current(dm.VariableOption(selected=True, text="All", value="$__all"))
    )
    if all_value is not None:
        v = v.all_value(all_value)
    if hide:
        v = v.hide(dm.VariableHide.HIDE_VARIABLE)
    return v


def dashboard(uid, title, description, panels):
    """A waitmeter dashboard as Grafana's JSON model: the shared variables and links, then
    `panels`, a list of row titles and (panel, width, height) laid out left to right."""
    d = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["waitmeter"])
        .editable()
        .timezone("browser")
        .time("now-1h", "now")
        .refresh("30s")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(variable("namespace", "Namespace", "label_values(waitmeter_process_info, namespace)"))
        .with_variable(variable("pod", "Pod", 'label_values(waitmeter_process_info{namespace=~"$namespace"}, pod)'))
        .with_variable(variable("container", "Container", 'label_values(waitmeter_process_info{namespace=~"$namespace", pod=~"$pod"}, container)'))
        .with_variable(variable("instance", "Agent", f"label_values(waitmeter_process_info{{{W}}}, instance)", all_value=None))
        .with_variable(variable("pid", "Process (pid)", f"label_values(waitmeter_process_info{{{W}, {K}}}, pid)", all_value=None))
        .with_variable(variable("cgroup", "Cgroup", f"label_values(waitmeter_process_info{{{W}, {P}}}, cgroup)", all_value=None, hide=True))
        .with_variable(variable("thread", "Thread", f"label_values(waitmeter_thread_seconds_total{{{P}}}, thread)"))
        .link(
            db.DashboardLink("waitmeter").type(dm.DashboardLinkType.DASHBOARDS).tags(["waitmeter"]).as_dropdown(True)
            .include_vars(True).keep_time(True)
        )
    )
    lay = Layout()
    for item in panels:
        if isinstance(item, str):
            d = d.with_row(lay.row(item))
        else:
            panel, w, h = item
            d = d.with_panel(lay.place(panel, w, h))
    return grafana_json(d.build())


# wait profiles in Pyroscope (docs/profiles.md): their profile type, and the data source variable
PROFILE_TYPE = "waitmeter_wait:wait:nanoseconds:wait:nanoseconds"
PYROSCOPE_DS = "pyroscope_datasource"


def profile_link(title, selector):
    """A data link to Grafana Explore showing the wait profile of `selector` (Pyroscope label
    matchers; `${__field.labels.X}` is the clicked series' label X) over the panel's time range."""
    from urllib.parse import quote

    query = {
        "refId": "A",
        "datasource": {"type": "grafana-pyroscope-datasource", "uid": "${%s}" % PYROSCOPE_DS},
        "queryType": "profile",
        "profileTypeId": PROFILE_TYPE,
        "labelSelector": "{" + selector + "}",
        "groupBy": [],
    }
    panes = {"a": {"datasource": "${%s}" % PYROSCOPE_DS, "queries": [query], "range": {"from": "${__from}", "to": "${__to}"}}}
    # Grafana fills the ${...} variables in, then the browser decodes the rest
    encoded = quote(json.dumps(panes, separators=(",", ":")), safe="${}:.,=_")
    return {"title": title, "url": f"/explore?schemaVersion=1&panes={encoded}", "targetBlank": True}


def label(name):
    """The clicked series' label `name`, percent-encoded for a link."""
    return "${__field.labels.%s:percentencode}" % name


def with_profile_links(obj, links):
    """Add the data links `links` ({panel title: [(link title, selector)]}) to a dashboard's
    panels, and the Pyroscope data source variable they use."""
    for p in obj["panels"]:
        for title, selector in links.get(p.get("title"), []):
            p.setdefault("fieldConfig", {}).setdefault("defaults", {}).setdefault("links", []).append(profile_link(title, selector))
    missing = set(links) - {p.get("title") for p in obj["panels"]}
    assert not missing, f"no panel titled {missing}"
    obj["templating"]["list"].append(
        {
            "name": PYROSCOPE_DS,
            "label": "Profiles (Pyroscope)",
            "type": "datasource",
            "query": "grafana-pyroscope-datasource",
            "description": "The Pyroscope data source holding waitmeter's wait profiles (docs/profiles.md); the GIL and lock panels link to them",
            "hide": 0,
            "includeAll": False,
            "multi": False,
            "options": [],
            "refresh": 1,
            "regex": "",
        }
    )
    return obj


def grafana_json(built):
    """The SDK's dashboard as Grafana's JSON model (a dict), completed with what the SDK cannot say."""
    obj = json.loads(JSONEncoder(sort_keys=True, indent=2).encode(built))
    # alert annotations (the SDK's annotation builder has no Prometheus title/text formats)
    obj["annotations"] = {
        "list": [
            {
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "enable": True,
                "expr": 'ALERTS{alertname=~"Waitmeter.*", alertstate="firing", ' + K + "}",
                "iconColor": "red",
                "name": "waitmeter alerts",
                "step": "60s",
                "textFormat": "{{alertname}} pid {{pid}} {{thread}}",
                "titleFormat": "{{alertname}}",
                "useValueForTime": False,
            }
        ]
    }
    # the SDK leaves unset panel options as null; Grafana expects objects
    for p in obj["panels"]:
        if p.get("options") is None and p.get("type") != "row":
            p["options"] = {}
    return obj
