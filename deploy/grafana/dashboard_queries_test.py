#!/usr/bin/env python3
"""Runs every Grafana panel query against a real Prometheus that scraped a live Tandem stack.

ctest grafana_dashboard_queries_live (label integration). Starts two synthetic workers (qwen,
nemotron), a gateway with policies/default.yaml, and Debian's Prometheus scraping all three every
200 ms with deploy/prometheus/rules loaded (group intervals shortened to 1 s); drives mixed load
through tandemctl; then requires that
  - every rule in deploy/prometheus/rules loaded and evaluates without error, and no alert is
    pending or firing on this healthy stack (with --allow_slo_misses, for sanitizer builds, an
    SLO alert may be pending where requests of this run did miss the objective),
  - every dashboard variable's label_values() query returns values, and
  - every panel target ($namespace, $model, $__rate_interval substituted) parses and returns data.

usage: dashboard_queries_test.py --worker=BIN --gateway=BIN --ctl=BIN --prometheus=BIN
                                 [--allow_slo_misses]
"""
import argparse
import ctypes
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _child_setup():
    # Own session (a Ctrl-C at the terminal is for this script, which stops the children in
    # order), and killed with the script even when the script itself is SIGKILLed (a ctest
    # timeout), so no worker or Prometheus outlives the test.
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


SUBST = {"$namespace": "local", "$model": "qwen|nemotron", "$__rate_interval": "1m"}


class Proc:
    """A child whose output goes to a log file; wait_for() polls the file for a regex."""

    def __init__(self, name, argv, tmp):
        self.name, self.log = name, os.path.join(tmp, name + ".log")
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(argv, stdout=self.f, stderr=subprocess.STDOUT,
                                  preexec_fn=_child_setup)

    def wait_for(self, pattern, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, open(self.log, errors="replace").read())
            if m:
                return m
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: no /{pattern}/ in its output:\n" + open(self.log).read()[-3000:])

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.f.close()


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def query(prom, expr):
    try:
        return get(f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}") or {"status": "error", "error": str(e)}


# Each SLO's histogram and its objective's bucket (deploy/prometheus/rules/tandem-recording.yml).
SLO_BUCKETS = {"ttft": ("tandem_gateway_time_to_first_token_seconds", "1"),
               "tpot": ("tandem_gateway_time_per_output_token_seconds", "0.1")}


def slo_misses(prom):
    """{(slo, model_name): requests over the objective}, from the gateway's raw histograms."""
    missed = {}
    for slo, (metric, le) in SLO_BUCKETS.items():
        expr = (f"sum by (model_name) ({metric}_count) - "
                f"sum by (model_name) ({metric}_bucket{{le=\"{le}\"}})")
        for r in query(prom, expr).get("data", {}).get("result", []):
            missed[(slo, r["metric"].get("model_name"))] = float(r["value"][1])
    return missed


def main():
    ap = argparse.ArgumentParser()
    for flag in ("worker", "gateway", "ctl", "prometheus"):
        ap.add_argument("--" + flag, required=True)
    ap.add_argument("--load_seconds", type=float, default=8)
    ap.add_argument("--allow_slo_misses", action="store_true")
    args = ap.parse_args()
    # SIGTERM (ctest, a CI runner) unwinds through the finally below, which stops the children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="tandem-dash-")
    procs = []
    failures = []
    try:
        workers = {}
        for model in ("qwen", "nemotron"):
            w = Proc("worker-" + model, [args.worker, "--model=" + model, "--engine=synthetic",
                                          "--device=cpu", "--listen=127.0.0.1:0",
                                          "--metrics_listen=127.0.0.1:0",
                                          "--synthetic_output_tokens=24", "--plaintext"], tmp)
            procs.append(w)
            m = w.wait_for(r"listening grpc=(\S+) metrics=(\S+)")
            workers[model] = (m.group(1), m.group(2))
        gw = Proc("gateway", [args.gateway,
                              "--workers=" + ",".join(f"{k}={v[0]}" for k, v in workers.items()),
                              "--policy=" + os.path.join(ROOT, "policies", "default.yaml"),
                              "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                              "--plaintext", "--worker_plaintext", "--allow_unauthenticated"], tmp)
        procs.append(gw)
        m = gw.wait_for(r"listening grpc=(\S+) metrics=(\S+)")
        gateway, gateway_metrics = m.group(1), m.group(2)

        # The shipped rules, with every group evaluated each second so the recording rules the
        # dashboards use have values within the run.
        rules_dir = os.path.join(tmp, "rules")
        os.makedirs(rules_dir)
        for path in glob.glob(os.path.join(ROOT, "deploy", "prometheus", "rules", "*.yml")):
            text = re.sub(r"^(\s+)interval: \S+$", r"\1interval: 1s", open(path).read(), flags=re.M)
            open(os.path.join(rules_dir, os.path.basename(path)), "w").write(text)
        config = os.path.join(tmp, "prometheus.yml")
        open(config, "w").write(
            "global: {scrape_interval: 200ms, scrape_timeout: 200ms, evaluation_interval: 1s}\n"
            f"rule_files: ['{rules_dir}/*.yml']\n"
            "scrape_configs:\n"
            f"  - job_name: tandem-gateway\n    static_configs: [{{targets: ['{gateway_metrics}'], labels: {{namespace: local}}}}]\n"
            f"  - job_name: tandem-worker\n    static_configs: [{{targets: ['{workers['qwen'][1]}', '{workers['nemotron'][1]}'], labels: {{namespace: local}}}}]\n")
        pr = Proc("prometheus", [args.prometheus, "--config.file=" + config,
                                 "--storage.tsdb.path=" + os.path.join(tmp, "data"),
                                 "--web.listen-address=127.0.0.1:0"], tmp)
        procs.append(pr)
        prom = pr.wait_for(r'msg="Listening on" address=(\S+)').group(1)

        # Mixed load: accuracy and latency work, streams, pins, and caller errors.
        stop_at = time.time() + args.load_seconds
        counts = {"ok": 0, "failed": 0}
        unexpected = []
        lock = threading.Lock()

        def client(i):
            kinds = [["generate", "Explain why the sky is blue"],
                     ["--objective=latency", "stream", "hi there"],
                     ["--objective=accuracy", "generate", "def f(x): return x*2 # fix this"],
                     ["--model=nemotron", "stream", "summarise this"],
                     ["--model=gpt-9", "generate", "unknown pin: a caller error"]]
            n = i
            while time.time() < stop_at:
                argv = [args.ctl, "--plaintext", "--gateway=" + gateway,
                        "--max_tokens=24"] + kinds[n % len(kinds)]
                r = subprocess.run(argv, capture_output=True, timeout=60)
                caller_error = n % len(kinds) == len(kinds) - 1
                with lock:
                    counts["ok" if r.returncode == 0 else "failed"] += 1
                    if (r.returncode == 0) == caller_error:
                        unexpected.append(f"{argv[2:]}: exit {r.returncode}: {r.stderr[-300:]!r}")
                n += 1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"load: {counts['ok']} ok, {counts['failed']} refused or failed (the gpt-9 pins, expected)")
        if counts["ok"] < 10:
            failures.append(f"too little load got through: {counts}")
        failures += [f"unexpected outcome: {u}" for u in unexpected[:5]]
        time.sleep(2.5)  # two more rule evaluations after the last request

        # Every target up, every rule healthy.
        targets = get(f"http://{prom}/api/v1/targets")["data"]["activeTargets"]
        for t in targets:
            if t["health"] != "up":
                failures.append(f"target {t['scrapeUrl']} is {t['health']}: {t.get('lastError')}")
        nrules = 0
        for g in get(f"http://{prom}/api/v1/rules")["data"]["groups"]:
            for r in g["rules"]:
                nrules += 1
                if r.get("health") != "ok":
                    failures.append(f"rule {r.get('name')} health {r.get('health')}: {r.get('lastError')}")
        if nrules < 40:
            failures.append(f"only {nrules} rules loaded")
        # A healthy stack under this load trips no alert, not even pending; but with
        # --allow_slo_misses (a sanitizer build on a loaded machine can take over 1 s to a first
        # token), an SLO alert on a model whose requests did miss the objective here is right.
        missed = slo_misses(prom) if args.allow_slo_misses else {}
        for a in get(f"http://{prom}/api/v1/alerts")["data"]["alerts"]:
            labels = a["labels"]
            slo, model = labels.get("slo"), labels.get("model_name")
            if slo in SLO_BUCKETS and missed.get((slo, model), 0) > 0:
                print(f"alert {labels.get('alertname')} {a['state']} for {model}: "
                      f"{missed[(slo, model)]:g} requests missed the {slo} objective in this run")
                continue
            failures.append(f"alert {labels.get('alertname')} is {a['state']} on a healthy stack: {labels}")

        # Dashboards.
        nq = 0
        for path in sorted(glob.glob(os.path.join(HERE, "dashboards", "*.json"))):
            d = json.load(open(path))
            name = os.path.basename(path)
            for v in d["templating"]["list"]:
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
                if not m:
                    failures.append(f"{name}: variable {v['name']}: not label_values(): {q}")
                    continue
                sel = m.group(1)
                for k, val in SUBST.items():
                    sel = sel.replace(k, val)
                values = get(f"http://{prom}/api/v1/label/{m.group(2)}/values?" +
                             urllib.parse.urlencode({"match[]": sel}))["data"]
                if not values:
                    failures.append(f"{name}: variable {v['name']}: {q} has no values")
            for p in d["panels"]:
                for t in p.get("targets", []):
                    expr = t["expr"]
                    for k, val in SUBST.items():
                        expr = expr.replace(k, val)
                    nq += 1
                    r = query(prom, expr)
                    where = f"{name}: panel '{p['title']}' {t['refId']}"
                    if r.get("status") != "success":
                        failures.append(f"{where}: {r.get('errorType')}: {r.get('error')}\n    {expr}")
                    elif not r["data"]["result"]:
                        failures.append(f"{where}: no data\n    {expr}")
        print(f"{nq} panel queries, {nrules} rules, {len(targets)} targets checked")
    finally:
        for p in reversed(procs):
            p.stop()
        if failures:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
