#!/usr/bin/env python3
"""Structural check of the Tandem Grafana dashboards and provisioning (ctest grafana_dashboards_check).

Grafana is not packaged for Debian, so this checks what Grafana would need: valid JSON, unique
dashboard uids and titles, unique panel ids per dashboard, a datasource with the provisioned uid
on every panel and target, an expr on every target, the `namespace` and `model` variables defined
and used, every $variable referenced defined, panels inside the 24-column grid without overlap,
and dashboards/*.json equal to what make_dashboards.py writes.
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUILTIN_VARS = {"__rate_interval", "__interval", "__range", "__all", "__auto_interval"}


def provisioned_uid(errors):
    path = os.path.join(HERE, "provisioning", "datasources", "tandem.yaml")
    text = open(path).read()
    uids = re.findall(r"^\s+uid:\s*(\S+)\s*$", text, re.M)
    if uids != ["tandem-prometheus"]:
        errors.append(f"{path}: expected one datasource with uid tandem-prometheus, got {uids}")
    prov = os.path.join(HERE, "provisioning", "dashboards", "tandem.yaml")
    if "type: file" not in open(prov).read():
        errors.append(f"{prov}: no file dashboard provider")
    return "tandem-prometheus"


def check_dashboard(path, uid, errors):
    name = os.path.basename(path)
    try:
        d = json.load(open(path))
    except ValueError as e:
        errors.append(f"{name}: invalid JSON: {e}")
        return None
    for key in ("uid", "title", "panels", "templating", "schemaVersion"):
        if key not in d:
            errors.append(f"{name}: missing {key}")
            return None
    variables = {v.get("name"): v for v in d["templating"].get("list", [])}
    for need in ("namespace", "model"):
        v = variables.get(need)
        if v is None:
            errors.append(f"{name}: variable {need} not defined")
            continue
        if v.get("type") != "query" or v.get("datasource", {}).get("uid") != uid:
            errors.append(f"{name}: variable {need} is not a query on datasource {uid}")
        q = v.get("query", {})
        if not (q.get("query") if isinstance(q, dict) else q):
            errors.append(f"{name}: variable {need} has no query")
    ids, boxes, used = set(), [], set()
    for p in d["panels"]:
        pid = p.get("id")
        if pid in ids:
            errors.append(f"{name}: duplicate panel id {pid}")
        ids.add(pid)
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy") or g["x"] + g["w"] > 24:
            errors.append(f"{name}: panel {pid} '{p.get('title')}' has a bad gridPos {g}")
        else:
            for (x, y, w, h, other) in boxes:
                if g["x"] < x + w and x < g["x"] + g["w"] and g["y"] < y + h and y < g["y"] + g["h"]:
                    errors.append(f"{name}: panel {pid} overlaps panel {other}")
            boxes.append((g["x"], g["y"], g["w"], g["h"], pid))
        if p.get("type") == "row":
            continue
        if not p.get("title"):
            errors.append(f"{name}: panel {pid} has no title")
        if p.get("datasource", {}).get("uid") != uid:
            errors.append(f"{name}: panel {pid} '{p.get('title')}' datasource uid is not {uid}")
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"{name}: panel {pid} '{p.get('title')}' has no targets")
        refs = set()
        for t in targets:
            if not t.get("expr", "").strip():
                errors.append(f"{name}: panel {pid} target {t.get('refId')} has no expr")
            if t.get("datasource", {}).get("uid") != uid:
                errors.append(f"{name}: panel {pid} target {t.get('refId')} datasource uid is not {uid}")
            if t.get("refId") in refs:
                errors.append(f"{name}: panel {pid} duplicate refId {t.get('refId')}")
            refs.add(t.get("refId"))
            for var in re.findall(r"\$\{?(\w+)", t.get("expr", "")):
                used.add(var)
                if var not in variables and var not in BUILTIN_VARS:
                    errors.append(f"{name}: panel {pid} uses undefined variable ${var}")
            if t.get("expr") and "namespace=~\"$namespace\"" not in t["expr"]:
                errors.append(f"{name}: panel {pid} target {t.get('refId')} is not filtered by $namespace")
    for need in ("namespace", "model"):
        if need not in used:
            errors.append(f"{name}: variable {need} is used by no panel")
    return d


def main():
    errors = []
    uid = provisioned_uid(errors)
    folder = os.path.join(HERE, "dashboards")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".json"))
    want = {"overview.json", "routing.json", "workers.json", "signals.json"}
    if not want <= set(files):
        errors.append(f"missing dashboards: {sorted(want - set(files))}")
    uids, titles = {}, {}
    for f in files:
        d = check_dashboard(os.path.join(folder, f), uid, errors)
        if d is None:
            continue
        for key, seen in (("uid", uids), ("title", titles)):
            if d[key] in seen:
                errors.append(f"{f}: {key} {d[key]!r} also in {seen[d[key]]}")
            seen[d[key]] = f
    gen = subprocess.run([sys.executable, os.path.join(HERE, "make_dashboards.py"), "--check"],
                         capture_output=True, text=True)
    if gen.returncode != 0:
        errors.append(gen.stdout.strip() or gen.stderr.strip())
    for e in errors:
        print("error:", e)
    n = sum(len([p for p in json.load(open(os.path.join(folder, f)))["panels"] if p["type"] != "row"])
            for f in files)
    print(f"{len(files)} dashboards, {n} panels: {'FAILED' if errors else 'OK'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
