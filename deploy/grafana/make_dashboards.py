#!/usr/bin/env python3
"""Writes the Tandem Grafana dashboards (dashboards/*.json) from the panel lists below.

    python3 deploy/grafana/make_dashboards.py            # rewrite dashboards/*.json
    python3 deploy/grafana/make_dashboards.py --check    # exit 1 if they are out of date

Every query uses the metric names of docs/operations.md "Metrics" and the recording rules of
deploy/prometheus/rules; `$namespace` and `$model` filter every panel. Checked by
check_dashboards.py (structure) and tests/ops/dashboard_queries_test.py (every query against a
real Prometheus that scraped a live stack).
"""
import json
import os
import sys

DS = {"type": "prometheus", "uid": "tandem-prometheus"}
HERE = os.path.dirname(os.path.abspath(__file__))
NS = 'namespace=~"$namespace"'
NSM = 'namespace=~"$namespace", model_name=~"$model"'
RI = "$__rate_interval"


def variables():
    def query_var(name, label, query, all_value):
        return {
            "name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"{name}-query"}, "definition": query,
            "refresh": 2, "includeAll": True, "multi": True, "allValue": all_value,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "sort": 1, "hide": 0, "options": [], "regex": "",
        }
    return {"list": [
        query_var("namespace", "Namespace", "label_values(tandem_gateway_info, namespace)", ".*"),
        query_var("model", "Model",
                  'label_values(tandem_gateway_ready_workers{namespace=~"$namespace"}, model_name)',
                  ".*"),
    ]}


class Dash:
    def __init__(self, uid, title, description):
        self.uid, self.title, self.description = uid, title, description
        self.panels, self.y, self.next_id = [], 0, 1
        self.row_x, self.row_h = 0, 0

    def row(self, title):
        self._newline()
        self.panels.append({"id": self._id(), "type": "row", "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def panel(self, title, targets, kind="timeseries", unit="short", w=8, h=8,
              description="", thresholds=None, max_value=None, stack=False):
        if self.row_x + w > 24:
            self._newline()
        steps = [{"color": "green", "value": None}]
        for value, color in thresholds or []:
            steps.append({"color": color, "value": value})
        defaults = {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}}
        if max_value is not None:
            defaults["max"] = max_value
        if kind == "timeseries":
            defaults["custom"] = {
                "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10 if stack else 0,
                "showPoints": "never", "spanNulls": True,
                "stacking": {"mode": "normal" if stack else "none", "group": "A"},
                "thresholdsStyle": {"mode": "line+area" if thresholds else "off"},
            }
        p = {
            "id": self._id(), "type": kind, "title": title, "description": description,
            "datasource": DS,
            "gridPos": {"h": h, "w": w, "x": self.row_x, "y": self.y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "targets": [
                {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr,
                 "legendFormat": legend, "range": kind != "table", "instant": kind == "table"}
                for i, (expr, legend) in enumerate(targets)
            ],
        }
        if kind == "timeseries":
            p["options"] = {"legend": {"displayMode": "list", "placement": "bottom"},
                            "tooltip": {"mode": "multi", "sort": "desc"}}
        elif kind == "stat":
            p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "colorMode": "value", "graphMode": "area", "textMode": "auto"}
        elif kind == "table":
            p["options"] = {"showHeader": True}
            p["transformations"] = [{"id": "merge", "options": {}}]
        self.panels.append(p)
        self.row_x += w
        self.row_h = max(self.row_h, h)

    def _newline(self):
        self.y += self.row_h
        self.row_x, self.row_h = 0, 0

    def _id(self):
        self.next_id += 1
        return self.next_id - 1

    def json(self):
        return {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["tandem"], "timezone": "browser", "editable": False,
            "schemaVersion": 38, "version": 1, "refresh": "10s",
            "time": {"from": "now-1h", "to": "now"},
            "templating": variables(),
            "annotations": {"list": []},
            "links": [{"type": "dashboards", "tags": ["tandem"], "asDropdown": True,
                       "title": "Tandem", "includeVars": True, "keepTime": True}],
            "panels": self.panels,
        }


def overview():
    d = Dash("tandem-overview", "Tandem / Overview",
             "Gateway traffic as callers see it: rate, errors, latency, inflight, ready workers.")
    d.row("Traffic")
    d.panel("Requests per second", [(
        f"sum(rate(tandem_gateway_requests_total{{{NSM}}}[{RI}]))", "total")], kind="stat",
        unit="reqps", w=6, h=5)
    d.panel("Error ratio (5m)", [(
        f"sum(namespace_model_name:tandem_gateway_request_errors:rate5m{{{NSM}}})"
        f" / sum(namespace_model_name:tandem_gateway_requests:rate5m{{{NSM}}})", "errors")],
        kind="stat", unit="percentunit", w=6, h=5, thresholds=[(0.01, "orange"), (0.05, "red")],
        description="Server-side codes (not caller errors) over all requests; alert TandemHighErrorRatio at 5%.")
    d.panel("Inflight requests", [(
        f"sum(tandem_gateway_inflight_requests{{{NSM}}})", "inflight")], kind="stat", w=6, h=5)
    d.panel("Ready workers", [(
        f"sum by (model_name) (tandem_gateway_ready_workers{{{NSM}}})", "{{model_name}}")],
        kind="stat", w=6, h=5, thresholds=None,
        description="Per model, as the gateway's health checks see them; 0 fires TandemModelPoolEmpty.")
    d.panel("QPS by model", [(
        f"sum by (model_name) (rate(tandem_gateway_requests_total{{{NSM}}}[{RI}]))",
        "{{model_name}}")], unit="reqps", stack=True)
    d.panel("Requests by code", [(
        f"sum by (code) (rate(tandem_gateway_requests_total{{{NSM}}}[{RI}]))", "{{code}}")],
        unit="reqps", stack=True)
    d.panel("Error ratio by model (5m)", [(
        f"namespace_model_name:tandem_gateway_request_errors:ratio_rate5m{{{NSM}}}",
        "{{model_name}}")], unit="percentunit", thresholds=[(0.05, "red")])
    d.row("Latency (gateway, end to end)")
    for title, metric, unit in (
            ("Request duration", "tandem_gateway_request_duration_seconds", "s"),
            ("Time to first token", "tandem_gateway_time_to_first_token_seconds", "s"),
            ("Time per output token", "tandem_gateway_time_per_output_token_seconds", "s")):
        d.panel(f"{title} p50 / p95 / p99", [
            (f"histogram_quantile({q}, sum by (model_name, le) (rate({metric}_bucket{{{NSM}}}[{RI}])))",
             f"{{{{model_name}}}} p{int(round(float(q) * 100))}") for q in ("0.5", "0.95", "0.99")],
            unit=unit)
    d.row("Load and capacity")
    d.panel("Inflight / queued in the gateway by model", [
        (f"sum by (model_name) (tandem_gateway_inflight_requests{{{NSM}}})", "{{model_name}} inflight"),
        (f"sum by (model_name) (tandem_gateway_queued_requests{{{NSM}}})", "{{model_name}} queued")])
    d.panel("Ready / configured workers", [
        (f"sum by (model_name) (tandem_gateway_ready_workers{{{NSM}}})", "{{model_name}} ready"),
        (f"sum by (model_name) (tandem_gateway_workers{{{NSM}}})", "{{model_name}} configured")])
    d.panel("Tokens per second", [
        (f"sum by (model_name) (rate(tandem_gateway_prompt_tokens_total{{{NSM}}}[{RI}]))",
         "{{model_name}} prompt"),
        (f"sum by (model_name) (rate(tandem_gateway_completion_tokens_total{{{NSM}}}[{RI}]))",
         "{{model_name}} completion")])
    d.panel("SLO error ratio, TTFT > 1 s (5m)", [(
        f"namespace_model_name:tandem_gateway_ttft_slo_errors:ratio_rate5m{{{NSM}}}",
        "{{model_name}}")], unit="percentunit", w=12, thresholds=[(0.01, "red")],
        description="SLO: 99% of requests get a first token within 1 s. Burn-rate alerts: TandemTTFTBudgetBurn*.")
    d.panel("SLO error ratio, TPOT > 100 ms (5m)", [(
        f"namespace_model_name:tandem_gateway_tpot_slo_errors:ratio_rate5m{{{NSM}}}",
        "{{model_name}}")], unit="percentunit", w=12, thresholds=[(0.01, "red")],
        description="SLO: 99% of requests stream at 100 ms per token or faster. Alerts: TandemTPOTBudgetBurn*.")
    d.row("Tenants")
    d.panel("Requests per second by tenant", [(
        f"sum by (tenant) (rate(tandem_gateway_tenant_requests_total{{{NS}}}[{RI}]))", "{{tenant}}")],
        unit="reqps", stack=True,
        description="Label bounded by --max_tenant_labels; later tenants share 'other'. Without a tenants file everyone is 'anonymous'.")
    d.panel("Throttled by tenant and reason", [(
        f"sum by (tenant, reason) (rate(tandem_gateway_tenant_throttled_total{{{NS}}}[{RI}]))",
        "{{tenant}} {{reason}}")], unit="reqps",
        description="RESOURCE_EXHAUSTED from a tenant's quota (requests, tokens, concurrency) or the dispatch queue (queue_full, queue_timeout).")
    d.panel("Tokens per second by tenant", [(
        f"sum by (tenant, kind) (rate(tandem_gateway_tenant_tokens_total{{{NS}}}[{RI}]))",
        "{{tenant}} {{kind}}")])
    d.panel("In flight and queued by tenant", [
        (f"sum by (tenant) (tandem_gateway_tenant_inflight_requests{{{NS}}})", "{{tenant}} in flight"),
        (f"sum by (tenant) (tandem_gateway_tenant_queued_requests{{{NS}}})", "{{tenant}} queued")],
        description="Queued: waiting for one of --max_inflight dispatch slots, shared by priority.")
    # Of requests that passed the tenant's quotas, from arrival (queue waits included).
    for title, metric in (("Request duration p95 by tenant", "request_duration_seconds"),
                          ("Time to first token p95 by tenant", "time_to_first_token_seconds")):
        d.panel(title, [(
            f"histogram_quantile(0.95, sum by (tenant, le) (rate(tandem_gateway_tenant_{metric}_bucket{{{NS}}}[{RI}])))",
            "{{tenant}}")], unit="s",
            description="Requests that passed the tenant's quotas, from arrival (queue waits included).")
    d.panel("Dispatch queue wait p50 / p99", [
        (f"histogram_quantile({q}, sum by (le) (rate(tandem_gateway_queue_wait_seconds_bucket{{{NS}}}[{RI}])))",
         f"p{int(round(float(q) * 100))}") for q in ("0.5", "0.99")], unit="s")
    d.panel("Refused callers by reason", [(
        f"sum by (reason) (rate(tandem_gateway_auth_failures_total{{{NS}}}[{RI}]))", "{{reason}}")],
        unit="reqps",
        description="UNAUTHENTICATED (missing_key, unknown_key) and PERMISSION_DENIED (model_denied, admin_denied).")
    return d


def routing():
    d = Dash("tandem-routing", "Tandem / Routing",
             "How the policy decides: decisions by model, class and rule, spills, fallbacks, hedges, "
             "failovers, shedding, sessions, thinking, prompt counts, policy version and reloads.")
    d.row("Decisions")
    d.panel("Decisions by model", [(
        f"sum by (model_name) (rate(tandem_gateway_route_decisions_total{{{NSM}}}[{RI}]))",
        "{{model_name}}")], unit="reqps", stack=True)
    d.panel("Decisions by class", [(
        f"sum by (class) (rate(tandem_gateway_route_decisions_total{{{NSM}}}[{RI}]))",
        "{{class}}")], unit="reqps", stack=True)
    d.panel("Decisions by rule", [(
        f"sum by (rule) (rate(tandem_gateway_route_decisions_total{{{NSM}}}[{RI}]))",
        "{{rule}}")], unit="reqps", stack=True)
    d.panel("Traffic share by model", [(
        f"sum by (model_name) (rate(tandem_gateway_route_decisions_total{{{NSM}}}[{RI}]))"
        f" / ignoring(model_name) group_left sum(rate(tandem_gateway_route_decisions_total{{{NSM}}}[{RI}]))",
        "{{model_name}}")], unit="percentunit", max_value=1, stack=True)
    d.panel("Decision latency (admission: validation, features, routing, endpoint pick)", [
        (f"histogram_quantile(0.5, sum by (le) (rate(tandem_gateway_route_decision_duration_seconds_bucket{{{NS}}}[{RI}])))",
         "p50"),
        (f"histogram_quantile(0.99, sum by (le) (rate(tandem_gateway_route_decision_duration_seconds_bucket{{{NS}}}[{RI}])))",
         "p99")], unit="s",
        description="tandem_gateway_route_decision_duration_seconds: the learned classifier included.")
    d.panel("Decisions by policy version", [(
        f"sum by (policy_version) (rate(tandem_gateway_route_decisions_total{{{NSM}}}[{RI}]))",
        "{{policy_version}}")], unit="reqps")
    d.row("Load reactions")
    d.panel("Spills (rules *_spill)", [(
        f"sum by (rule, model_name) (rate(tandem_gateway_route_decisions_total{{{NSM}, rule=~\".*spill.*\"}}[{RI}]))"
        f" or sum by (model_name) (rate(tandem_gateway_route_decisions_total{{{NSM}}}[{RI}])) * 0",
        "{{rule}} -> {{model_name}}")], unit="reqps",
        description="Default policy: latency_spill (to qwen while nemotron is saturated), unsure_accuracy_spill.")
    d.panel("Retries and fallbacks", [
        (f"sum by (model_name, reason) (rate(tandem_gateway_retries_total{{{NSM}}}[{RI}]))",
         "{{model_name}} {{reason}}"),
        (f"sum(rate(tandem_gateway_retry_budget_exhausted_total{{{NS}}}[{RI}]))", "retry budget exhausted"),
        (f"sum by (from_model, to_model) (rate(tandem_gateway_fallbacks_total{{{NS}, from_model=~\"$model\"}}[{RI}]))",
         "fallback {{from_model}} -> {{to_model}}")],
        unit="ops", description="Retries go to another replica, then to the action's fallback models; "
                                "fallbacks: admitted to a fallback model because the decided one had no usable worker.")
    d.panel("Hedges", [(
        f"sum by (model_name, outcome) (rate(tandem_gateway_hedges_total{{{NSM}}}[{RI}]))",
        "{{model_name}} {{outcome}}")], unit="ops")
    d.panel("Mid-stream failovers", [(
        f"sum by (from_model, to_model) (rate(tandem_gateway_midstream_failovers_total{{{NS}, from_model=~\"$model\"}}[{RI}]))",
        "{{from_model}} -> {{to_model}}")], unit="ops")
    d.panel("Shed requests", [(
        f"sum by (class) (rate(tandem_gateway_shed_requests_total{{{NS}}}[{RI}]))", "{{class}}")],
        unit="reqps")
    d.panel("Shadow requests", [(
        f"sum by (model_name, code) (rate(tandem_gateway_shadow_requests_total{{{NSM}}}[{RI}]))"
        f" or sum by (model_name) (rate(tandem_gateway_requests_total{{{NSM}}}[{RI}])) * 0",
        "{{model_name}} {{code}}")], unit="reqps")
    d.panel("Second opinions", [(
        f"sum by (model_name, result) (rate(tandem_gateway_second_opinions_total{{{NSM}}}[{RI}]))"
        f" or sum by (model_name) (rate(tandem_gateway_requests_total{{{NSM}}}[{RI}])) * 0",
        "{{model_name}} {{result}}")], unit="reqps",
        description="Unsure requests whose class the policy asked a model (classifier.second_opinion), "
                    "by result: answered, no_answer, timeout, error, unavailable, cancelled "
                    "(docs/policies.md, The learned classifier).")
    d.row("Sessions, thinking and prompt counts")
    d.panel("Session sticky hit ratio", [(
        f"sum(rate(tandem_gateway_session_turns_total{{{NS}, source=~\"token|table\"}}[{RI}]))"
        f" / sum(rate(tandem_gateway_session_turns_total{{{NS}}}[{RI}]))", "sticky")],
        unit="percentunit", max_value=1, w=6,
        description="Turns of named sessions whose previous model was known (source token or table) "
                    "over all session turns; new = first turns and misses (docs/policies.md, Sessions).")
    d.panel("Session turns by source", [(
        f"sum by (source) (rate(tandem_gateway_session_turns_total{{{NS}}}[{RI}]))", "{{source}}")],
        unit="ops", w=6, stack=True,
        description="token: the caller echoed its route token; table: this replica remembered the "
                    "session; new: a first turn, or a miss (no token and another replica, a restart, "
                    "an expired session).")
    d.panel("Model switches per session turn", [(
        f"sum(rate(tandem_gateway_session_model_switches_total{{{NS}}}[{RI}]))"
        f" / sum(rate(tandem_gateway_session_turns_total{{{NS}}}[{RI}]))", "switches / turn")],
        unit="percentunit", max_value=1, w=6,
        description="Turns sent to another model than the session's previous turn: a rule above the "
                    "session rules moved it (pin, shedding, images, a long document) or its model "
                    "had no usable worker.")
    d.panel("Sessions remembered", [
        (f"sum by (instance) (tandem_gateway_sessions{{{NS}}})", "{{instance}}"),
        (f"sum by (reason) (rate(tandem_gateway_session_evictions_total{{{NS}}}[{RI}]))",
         "evicted/s {{reason}}")], unit="short", w=6,
        description="Per replica, bounded by --max_sessions; evictions: ttl (idle past "
                    "--session_ttl) or capacity (least recently used past --max_sessions).")
    d.panel("Decisions by reasoning", [(
        f"sum by (reasoning) (rate(tandem_gateway_route_decisions_total{{{NSM}}}[{RI}]))",
        "{{reasoning}}")], unit="reqps", w=12, stack=True,
        description="The decided thinking: on, off, or default (the model's own; shed decisions too).")
    d.panel("Prompt sizes by source", [(
        f"sum by (source) (rate(tandem_gateway_prompt_token_counts_total{{{NS}}}[{RI}]))",
        "{{source}}")], unit="reqps", w=12, stack=True,
        description="tokenizer: counted exactly because the estimate was near a threshold "
                    "(--tokenizer, --exact_token_band); estimate: the rest.")
    d.row("Policy")
    d.panel("Live policy", [(
        f"max by (instance, version, sha256) (tandem_policy_info{{{NS}}})", "")], kind="table", w=12,
        h=6)
    d.panel("Policy reloads", [(
        f"sum by (result) (increase(tandem_policy_reloads_total{{{NS}}}[5m]))", "{{result}}")],
        unit="short", w=12, h=6, description="An error means the previous policy stays live (alert TandemPolicyReloadFailed).")
    d.panel("Decision log records", [(
        f"sum by (outcome) (rate(tandem_gateway_decision_log_records_total{{{NS}}}[{RI}]))",
        "{{outcome}}")], unit="ops", w=12, h=6)
    return d


WJOIN = f" * on (instance) group_left (device) max by (instance, device) (tandem_worker_info{{{NSM}}})"


def workers():
    d = Dash("tandem-workers", "Tandem / Workers",
             "Each worker process (one per GPU), per model and device.")
    d.row("Batch")
    d.panel("Running", [(
        f"max by (model_name, instance) (tandem_worker_num_requests_running{{{NSM}}}){WJOIN}",
        "{{model_name}} {{device}} {{instance}}")])
    d.panel("Waiting", [(
        f"max by (model_name, instance) (tandem_worker_num_requests_waiting{{{NSM}}}){WJOIN}",
        "{{model_name}} {{device}} {{instance}}")], thresholds=[(8, "red")],
        description="Default policy saturation trigger: above 8 on average (exit below 2).")
    d.panel("Batch size (mean per step)", [(
        f"sum by (model_name, instance) (rate(tandem_worker_batch_size_sum{{{NSM}}}[{RI}]))"
        f" / sum by (model_name, instance) (rate(tandem_worker_batch_size_count{{{NSM}}}[{RI}]))",
        "{{model_name}} {{instance}}")])
    d.row("Latency (worker side)")
    for title, metric in (("TTFT", "tandem_worker_time_to_first_token_seconds"),
                          ("TPOT", "tandem_worker_time_per_output_token_seconds"),
                          ("Queue time", "tandem_worker_request_queue_time_seconds"),
                          ("Step duration", "tandem_worker_step_duration_seconds")):
        d.panel(f"{title} p50 / p95", [
            (f"histogram_quantile({q}, sum by (model_name, instance, le) (rate({metric}_bucket{{{NSM}}}[{RI}])))",
             f"{{{{model_name}}}} {{{{instance}}}} p{p}") for q, p in (("0.5", "50"), ("0.95", "95"))],
            unit="s", w=6)
    d.row("Throughput")
    d.panel("Tokens per second", [
        (f"sum by (model_name, instance) (rate(tandem_worker_generation_tokens_total{{{NSM}}}[{RI}]))",
         "{{model_name}} {{instance}} generated"),
        (f"sum by (model_name, instance) (rate(tandem_worker_prompt_tokens_total{{{NSM}}}[{RI}]))",
         "{{model_name}} {{instance}} prompt")])
    d.panel("Finished requests by reason", [(
        f"sum by (model_name, finish_reason) (rate(tandem_worker_requests_total{{{NSM}}}[{RI}]))",
        "{{model_name}} {{finish_reason}}")], unit="reqps", stack=True)
    d.panel("Rejected requests", [(
        f"sum by (model_name, reason) (rate(tandem_worker_rejected_requests_total{{{NSM}}}[{RI}]))",
        "{{model_name}} {{reason}}")], unit="reqps")
    d.row("Prefix cache")
    d.panel("Prompt tokens from the cache (share)", [(
        f"sum by (model_name, instance) (rate(tandem_worker_prefix_cache_tokens_saved_total{{{NSM}}}[{RI}]))"
        f" / sum by (model_name, instance) (rate(tandem_worker_prompt_tokens_total{{{NSM}}}[{RI}]))",
        "{{model_name}} {{instance}}")], unit="percentunit", max_value=1,
        description="Prompt tokens resumed from a snapshot instead of computed, over all prompt tokens.")
    d.panel("Lookups: hits / misses per second", [
        (f"sum by (model_name, instance) (rate(tandem_worker_prefix_cache_hits_total{{{NSM}}}[{RI}]))",
         "{{model_name}} {{instance}} hits"),
        (f"sum by (model_name, instance) (rate(tandem_worker_prefix_cache_misses_total{{{NSM}}}[{RI}]))",
         "{{model_name}} {{instance}} misses")], unit="reqps")
    d.panel("Snapshots held / evicted", [
        (f"max by (model_name, instance) (tandem_worker_prefix_cache_bytes{{{NSM}}})",
         "{{model_name}} {{instance}} bytes"),
        (f"sum by (model_name, instance) (rate(tandem_worker_prefix_cache_evictions_total{{{NSM}}}[{RI}]))",
         "{{model_name}} {{instance}} evictions/s")], unit="bytes")
    d.panel("Gateway picks by rule", [(
        f"sum by (model_name, rule) (rate(tandem_gateway_endpoint_picks_total{{{NSM}}}[{RI}]))",
        "{{model_name}} {{rule}}")], unit="reqps", stack=True,
        description="prefix: the worker expected to hold the prompt's prefix; load: the least loaded.")
    d.row("Memory and health")
    d.panel("Device memory used", [
        (f"max by (model_name, device, instance) (tandem_worker_device_memory_used_bytes{{{NSM}}})",
         "{{model_name}} {{device}} {{instance}} used"),
        (f"max by (model_name, device, instance) (tandem_worker_device_memory_total_bytes{{{NSM}}})",
         "{{model_name}} {{device}} {{instance}} total")], unit="bytes")
    d.panel("KV / sequence memory reserved", [(
        f"max by (model_name, instance) (tandem_worker_sequence_memory_reserved_bytes{{{NSM}}})"
        f" / max by (model_name, instance) (tandem_worker_sequence_memory_budget_bytes{{{NSM}}})",
        "{{model_name}} {{instance}}")], unit="percentunit", max_value=1,
        thresholds=[(0.9, "red")], description="Reserved recurrent state + KV over --memory_budget.")
    d.panel("Breaker state (0 closed, 1 open, 2 half-open)", [(
        f"max by (model_name, endpoint) (tandem_gateway_endpoint_breaker_state{{{NSM}}})",
        "{{model_name}} {{endpoint}}")], thresholds=[(1, "red")])
    d.panel("Ready (worker / gateway view)", [
        (f"max by (model_name, instance) (tandem_worker_ready{{{NSM}}})", "{{model_name}} {{instance}} worker"),
        (f"max by (model_name, endpoint) (tandem_gateway_endpoint_ready{{{NSM}}})",
         "{{model_name}} {{endpoint}} gateway")])
    d.panel("Ejections", [(
        f"sum by (model_name, endpoint) (increase(tandem_gateway_endpoint_ejections_total{{{NSM}}}[5m]))",
        "{{model_name}} {{endpoint}}")])
    d.panel("Workers", [(
        f"max by (model_name, model_id, engine, device, device_name, instance) (tandem_worker_info{{{NSM}}})",
        "")], kind="table")
    return d


def signals():
    d = Dash("tandem-signals", "Tandem / Signals",
             "Every live policy signal against the thresholds of the triggers on it (default "
             "policy: saturated above 8 waiting per worker, clear below 2), and its freshness.")
    d.row("Default policy signals")
    for sig, model in (("qwen_queue", "qwen"), ("nemotron_queue", "nemotron")):
        d.panel(f"{sig} (enter > 8, exit < 2)", [
            (f"max by (signal) (tandem_gateway_signal_value{{{NS}, signal=\"{sig}\"}})", "gateway: {{signal}}"),
            (f"namespace_model_name:tandem_requests_waiting_per_worker:avg{{{NS}, model_name=\"{model}\"}}",
             "prometheus: waiting per worker (gateways + workers)"),
            (f"namespace_model_name:tandem_worker_num_requests_waiting:avg{{{NS}, model_name=\"{model}\"}}",
             "prometheus: avg waiting in workers"),
            ("8 + 0 * sum(tandem_gateway_info{%s})" % NS, "enter (gt 8)"),
            ("2 + 0 * sum(tandem_gateway_info{%s})" % NS, "exit (lt 2)"),
            (f"max(tandem_gateway_trigger_active{{{NS}, trigger=\"{model}_saturated\"}})",
             f"{model}_saturated on")],
            thresholds=[(2, "yellow"), (8, "red")], w=8)
    d.panel("nemotron_ttft_p95 (hedge delay, clamped 50 ms - 2 s)", [
        (f"max by (signal) (tandem_gateway_signal_value{{{NS}, signal=\"nemotron_ttft_p95\"}})",
         "gateway: {{signal}}"),
        (f"namespace_model_name:tandem_worker_time_to_first_token_seconds:p95_rate1m{{{NS}, model_name=\"nemotron\"}}",
         "prometheus: p95 (1m)"),
        ("0.05 + 0 * sum(tandem_gateway_info{%s})" % NS, "hedge min"),
        ("2 + 0 * sum(tandem_gateway_info{%s})" % NS, "hedge max")], unit="s", w=8)
    d.row("Every signal and trigger")
    d.panel("Signal values", [(
        f"max by (signal) (tandem_gateway_signal_value{{{NS}}})", "{{signal}}")], w=12)
    d.panel("Trigger states (1 on)", [(
        f"max by (trigger) (tandem_gateway_trigger_active{{{NS}}})", "{{trigger}}")], w=12,
        max_value=1)
    d.panel("Signal age", [(
        f"max by (signal) (tandem_gateway_signal_age_seconds{{{NS}}})", "{{signal}}")], unit="s")
    d.panel("Stale signals (1 stale)", [(
        f"max by (signal) (tandem_gateway_signal_stale{{{NS}}})", "{{signal}}")],
        thresholds=[(1, "red")], description="Alert TandemSignalStale after 1m.")
    d.panel("Refresh errors and failed scrapes", [
        (f"sum by (signal) (rate(tandem_gateway_signal_refresh_errors_total{{{NS}}}[{RI}]))", "{{signal}}"),
        (f"sum by (model_name) (rate(tandem_gateway_worker_scrapes_total{{{NSM}, result=\"error\"}}[{RI}]))",
         "scrape errors {{model_name}}")], unit="ops")
    d.panel("Trigger transitions", [(
        f"sum by (trigger) (increase(tandem_gateway_trigger_transitions_total{{{NS}}}[5m]))",
        "{{trigger}}")], w=12)
    d.panel("Worker scrapes by the gateway", [(
        f"sum by (model_name, result) (rate(tandem_gateway_worker_scrapes_total{{{NSM}}}[{RI}]))",
        "{{model_name}} {{result}}")], unit="ops", w=12)
    return d


DASHBOARDS = {"overview.json": overview, "routing.json": routing, "workers.json": workers,
              "signals.json": signals}


def render():
    return {name: json.dumps(make().json(), indent=2, sort_keys=False) + "\n"
            for name, make in DASHBOARDS.items()}


def main():
    check = "--check" in sys.argv[1:]
    out = os.path.join(HERE, "dashboards")
    stale = []
    for name, text in render().items():
        path = os.path.join(out, name)
        if check:
            try:
                with open(path) as f:
                    if f.read() != text:
                        stale.append(name)
            except FileNotFoundError:
                stale.append(name)
        else:
            os.makedirs(out, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
    if stale:
        print("out of date (run python3 deploy/grafana/make_dashboards.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
