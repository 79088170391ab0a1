#!/usr/bin/env python3
"""The waitmeter monitoring mixin: Grafana dashboards, Prometheus recording
rules and alert rules, generated from one place so that they agree.

    python dashboards/mixin.py           regenerate the committed files
    python dashboards/mixin.py --check   exit 1 if a committed file is stale

Thresholds come from dashboards/config.yaml; the generators are the modules of
dashboards/waitmeter_mixin/ (common, rules, one per dashboard). Outputs:
    dashboards/rules/waitmeter-rules.yaml     recording + alert rules (promtool-checked)
    dashboards/json/<uid>.json                Grafana dashboards
    helm/waitmeter/files/...                  the Helm chart's copies of both
"""
import argparse
import sys

from waitmeter_mixin import ROOT, rendered


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is missing or stale")
    args = ap.parse_args()
    files = rendered()
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    # generated directories hold nothing else (a removed dashboard must not linger)
    for d in {p.parent for p in files}:
        if d.exists():
            stale += [p for p in d.iterdir() if p not in files]
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)} (run `make mixin`)", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        if p in files:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(files[p])
        else:
            p.unlink()
        print(f"wrote {p.relative_to(ROOT)}" if p in files else f"removed {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
