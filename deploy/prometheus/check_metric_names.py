#!/usr/bin/env python3
"""ctest prometheus_metric_names_check: every tandem_* metric named in a YAML or JSON file under
deploy/ (rules, rule tests, dashboards, compose and Kubernetes objects) is one the binaries export
(a CounterFamily/GaugeFamily/HistogramFamily(r, "NAME", ...) in gateway/metrics/gateway_metrics.cc or
workers/worker_metrics.cc, histograms with their _bucket, _sum and _count series) or a recording rule of deploy/prometheus/rules.
"""
import glob
import os
import re
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.path.dirname(HERE)
ROOT = os.path.dirname(DEPLOY)
SOURCES = ["gateway/metrics/gateway_metrics.cc", "workers/worker_metrics.cc"]


def exported():
    names = set()
    for src in SOURCES:
        text = open(os.path.join(ROOT, src)).read()
        for m in re.finditer(r'(Counter|Gauge|Histogram)Family\(\s*r,\s*"(\w+)"', text):
            kind, name = m.groups()
            names.add(name)
            if kind == "Histogram":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


def recorded():
    names = set()
    for path in glob.glob(os.path.join(HERE, "rules", "*.yml")):
        for g in yaml.safe_load(open(path))["groups"]:
            names |= {r["record"] for r in g["rules"] if "record" in r}
    return names


def main():
    known = exported() | recorded()
    if len(known) < 60:
        print(f"only {len(known)} metric names found in {SOURCES}: the parser needs updating")
        return 1
    errors, seen = [], set()
    files = [p for p in glob.glob(os.path.join(DEPLOY, "**", "*"), recursive=True)
             if os.path.isfile(p) and p.endswith((".yml", ".yaml", ".json"))]
    for path in files:
        text = open(path, errors="replace").read()
        # Metric-like tokens: tandem_ followed by a name, not part of a longer identifier
        # (skips e.g. tandem_worker_bin, python names, file names).
        for m in re.finditer(r"(?<![\w./-])((?:[a-z_]+:)?tandem_[a-z0-9_]+(?::[a-z0-9_]+)?)", text):
            name = m.group(1)
            if ":" not in name and not name.startswith(("tandem_gateway_", "tandem_worker_", "tandem_policy_")):
                continue
            seen.add(name)
            if name not in known:
                line = text.count("\n", 0, m.start()) + 1
                errors.append(f"{os.path.relpath(path, ROOT)}:{line}: {name} is not exported or recorded")
    for e in sorted(set(errors)):
        print("error:", e)
    print(f"{len(seen)} metric names used under deploy/, {len(known)} known: {'FAILED' if errors else 'OK'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
