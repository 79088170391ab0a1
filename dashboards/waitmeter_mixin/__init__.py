"""The waitmeter monitoring mixin, one module per output, as kubernetes-mixin
lays out its libsonnet:

    common.py     config.yaml, the label selectors, the Grafana building blocks
    rules.py      recording + alert rules
    overview.py   gil.py   cpu.py   locks.py      one module per dashboard

dashboards/mixin.py writes what rendered() returns (or checks it with --check).
"""
import json

from . import cpu, gil, locks, overview, rules
from .common import HERE

ROOT = HERE.parent
CHART_FILES = ROOT / "helm" / "waitmeter" / "files"

DASHBOARDS = [overview, gil, cpu, locks]


def rendered():
    """{path: content} of every generated file: each is written twice, for dashboards/ and for the chart."""
    text = rules.render()
    out = {
        HERE / "rules" / "waitmeter-rules.yaml": text,
        CHART_FILES / "rules" / "waitmeter-rules.yaml": text,
    }
    for module in DASHBOARDS:
        obj = module.build()
        text = json.dumps(obj, sort_keys=True, indent=2) + "\n"
        out[HERE / "json" / f"{obj['uid']}.json"] = text
        out[CHART_FILES / "dashboards" / f"{obj['uid']}.json"] = text
    return out
