"""Writes tandem-alerts.test.yml (promtool test rules): a firing and a non-firing case per alert,
with the annotations the templates render. Add a case here for every new alert (it asserts
all are covered), run it, and read the diff."""
import os, re, yaml
HERE = os.path.dirname(os.path.abspath(__file__))
alerts = {}
for g in yaml.safe_load(open(os.path.join(HERE, '..', 'rules', 'tandem-alerts.yml')))['groups']:
    for r in g['rules']:
        alerts[r['alert']] = r
def render(t, labels, value):
    t = re.sub(r'\{\{ \$labels\.(\w+) \}\}', lambda m: labels.get(m.group(1), ''), t)
    return re.sub(r'\{\{ \$value[^}]*\}\}', value or '', t)
def exp(name, labels, value=None):
    r = alerts[name]
    full = dict(r.get('labels', {})); full.update(labels)
    return {'exp_labels': full,
            'exp_annotations': {k: render(v, full, value) for k, v in r['annotations'].items()}}
G = 'job="tandem-gateway",instance="10.0.0.9:9100",namespace="prod"'
GL = {'job': 'tandem-gateway', 'instance': '10.0.0.9:9100', 'namespace': 'prod'}
tests = []
tested = set()
def case(name, series, evals, promql=None):
    t = {'name': name, 'interval': '1m', 'input_series': [{'series': s, 'values': v} for s, v in series]}
    t['alert_rule_test'] = []
    for at, alert, exps in evals:
        tested.add(alert)
        t['alert_rule_test'].append({'eval_time': at, 'alertname': alert, 'exp_alerts': exps})
    if promql: t['promql_expr_test'] = promql
    tests.append(t)

case('worker and gateway scrapes fail', [
    ('up{job="tandem-worker",instance="10.0.0.1:9101",namespace="prod"}', '1 1 0 0 0 0'),
    ('up{job="tandem-worker",instance="10.0.0.2:9102",namespace="prod"}', '1 1 1 1 1 1'),
    ('up{%s}' % G, '1 0 0 0 1 1')], [
    ('2m', 'TandemWorkerDown', []),   # pending: down for 0m
    ('4m', 'TandemWorkerDown', [exp('TandemWorkerDown', {'job': 'tandem-worker', 'instance': '10.0.0.1:9101', 'namespace': 'prod'})]),
    ('3m', 'TandemGatewayDown', [exp('TandemGatewayDown', GL)]),
    ('5m', 'TandemGatewayDown', []),  # back
])
case('a model loses every ready worker', [
    ('tandem_gateway_ready_workers{%s,model_name="qwen"}' % G, '2 2 0 0 0'),
    ('tandem_gateway_ready_workers{%s,model_name="nemotron"}' % G, '1x5')], [
    ('2m', 'TandemModelPoolEmpty', []),
    ('3m', 'TandemModelPoolEmpty', [exp('TandemModelPoolEmpty', dict(GL, model_name='qwen'))]),
])
case('a breaker stays open while another one recovers between ejections', [
    ('tandem_gateway_endpoint_breaker_state{%s,model_name="qwen",endpoint="10.0.0.1:7101"}' % G, '0 0 1 2 1 1 2 1 1'),
    ('tandem_gateway_endpoint_breaker_state{%s,model_name="nemotron",endpoint="10.0.0.2:7102"}' % G, '0 1 0 1 0 1 0 1 0'),
    ('tandem_gateway_endpoint_breaker_state{%s,model_name="nemotron",endpoint="10.0.0.3:7102"}' % G, '0x8')], [
    ('3m', 'TandemEndpointBreakerOpen', []),
    ('6m', 'TandemEndpointBreakerOpen', [exp('TandemEndpointBreakerOpen', dict(GL, model_name='qwen', endpoint='10.0.0.1:7101'))]),
])
case('an invalid policy is refused, then the window passes', [
    ('tandem_policy_reloads_total{%s,result="error"}' % G, '0 0 1x20'),
    ('tandem_policy_reloads_total{%s,result="ok"}' % G, '0+1x22')], [
    ('1m', 'TandemPolicyReloadFailed', []),
    ('5m', 'TandemPolicyReloadFailed', [exp('TandemPolicyReloadFailed', dict(GL, result='error'))]),
    ('15m', 'TandemPolicyReloadFailed', []),
])
case('an invalid tenants file is refused, then the window passes', [
    ('tandem_gateway_tenants_reloads_total{%s,result="error"}' % G, '0 0 1x20'),
    ('tandem_gateway_tenants_reloads_total{%s,result="ok"}' % G, '0+1x22')], [
    ('1m', 'TandemTenantsReloadFailed', []),
    ('5m', 'TandemTenantsReloadFailed', [exp('TandemTenantsReloadFailed', dict(GL, result='error'))]),
    ('15m', 'TandemTenantsReloadFailed', []),
])
case('a signal goes stale', [
    ('tandem_gateway_signal_stale{%s,signal="nemotron_queue"}' % G, '0 1 1 1'),
    ('tandem_gateway_signal_stale{%s,signal="qwen_queue"}' % G, '0 0 0 0')], [
    ('1m', 'TandemSignalStale', []),
    ('3m', 'TandemSignalStale', [exp('TandemSignalStale', dict(GL, signal='nemotron_queue'))]),
])
for sli, metric, le in (('TTFT', 'tandem_gateway_time_to_first_token_seconds', '1'),
                        ('TPOT', 'tandem_gateway_time_per_output_token_seconds', '0.1')):
    W = 'job="tandem-gateway",instance="10.0.0.9:9100",namespace="prod"'
    series = [
        # nemotron: half the requests miss the SLO (50x the budget): fast burn.
        ('%s_bucket{%s,model_name="nemotron",le="%s"}' % (metric, W, le), '0+50x40'),
        ('%s_count{%s,model_name="nemotron"}' % (metric, W), '0+100x40'),
        # qwen: 5% miss (5x the budget): slow burn only.
        ('%s_bucket{%s,model_name="qwen",le="%s"}' % (metric, W, le), '0+95x40'),
        ('%s_count{%s,model_name="qwen"}' % (metric, W), '0+100x40'),
        # none: no traffic at all (0/0 is NaN): no alert.
        ('%s_bucket{%s,model_name="none",le="%s"}' % (metric, W, le), '0x40'),
        ('%s_count{%s,model_name="none"}' % (metric, W), '0x40'),
    ]
    ml = lambda m: {'namespace': 'prod', 'model_name': m}
    case(f'{sli} SLO budget burns fast on nemotron and slowly on qwen', series, [
        ('1m', f'Tandem{sli}BudgetBurnFast', []),
        ('10m', f'Tandem{sli}BudgetBurnFast', [exp(f'Tandem{sli}BudgetBurnFast', ml('nemotron'), '50%')]),
        ('10m', f'Tandem{sli}BudgetBurnSlow', []),   # pending (for: 15m)
        ('30m', f'Tandem{sli}BudgetBurnSlow', [exp(f'Tandem{sli}BudgetBurnSlow', ml('nemotron'), '50%'),
                                               exp(f'Tandem{sli}BudgetBurnSlow', ml('qwen'), '5%')]),
    ], promql=[{'expr': f'round(namespace_model_name:tandem_gateway_{sli.lower()}_slo_errors:ratio_rate5m, 0.001) >= 0', 'eval_time': '10m',
                'exp_samples': [{'labels': f'{{namespace="prod",model_name="nemotron"}}', 'value': 0.5},
                                {'labels': f'{{namespace="prod",model_name="qwen"}}', 'value': 0.05}]}])
WK = lambda i, m: 'job="tandem-worker",instance="10.0.0.%d:910%d",namespace="prod",model_name="%s"' % (i, i, m)
case('nemotron backs up in its workers\' queues, qwen in the gateway\'s; qwen clears', [
    ('tandem_worker_num_requests_waiting{%s}' % WK(1, 'nemotron'), '12x10'),
    ('tandem_worker_num_requests_waiting{%s}' % WK(2, 'nemotron'), '10x10'),
    ('tandem_worker_num_requests_waiting{%s}' % WK(3, 'qwen'), '1x10'),
    ('tandem_gateway_queued_requests{%s,model_name="qwen"}' % G, '8x4 0x6')], [
    ('3m', 'TandemQueueSaturated', []),
    ('6m', 'TandemQueueSaturated', [exp('TandemQueueSaturated', {'namespace': 'prod', 'model_name': 'nemotron'}, '11.0')]),
], promql=[{'expr': 'namespace_model_name:tandem_requests_waiting_per_worker:avg', 'eval_time': '1m',
            'exp_samples': [{'labels': 'namespace_model_name:tandem_requests_waiting_per_worker:avg{namespace="prod",model_name="nemotron"}', 'value': 11},
                            {'labels': 'namespace_model_name:tandem_requests_waiting_per_worker:avg{namespace="prod",model_name="qwen"}', 'value': 9}]},
           {'expr': 'namespace_model_name:tandem_worker_num_requests_waiting:avg', 'eval_time': '1m',
            'exp_samples': [{'labels': 'namespace_model_name:tandem_worker_num_requests_waiting:avg{namespace="prod",model_name="nemotron"}', 'value': 11},
                            {'labels': 'namespace_model_name:tandem_worker_num_requests_waiting:avg{namespace="prod",model_name="qwen"}', 'value': 1}]}])
case('qwen backs up in the gateway for 5m', [
    ('tandem_worker_num_requests_waiting{%s}' % WK(3, 'qwen'), '0x10'),
    ('tandem_worker_num_requests_waiting{%s}' % WK(4, 'qwen'), '2x10'),
    ('tandem_gateway_queued_requests{%s,model_name="qwen"}' % G, '20x10')], [
    ('6m', 'TandemQueueSaturated', [exp('TandemQueueSaturated', {'namespace': 'prod', 'model_name': 'qwen'}, '11.0')]),
])
case('qwen workers refuse requests with a full queue', [
    ('tandem_worker_rejected_requests_total{%s,reason="queue_full"}' % WK(1, 'qwen'), '0+60x10'),
    ('tandem_worker_rejected_requests_total{%s,reason="draining"}' % WK(2, 'nemotron'), '0+60x10')], [
    ('1m', 'TandemWorkerQueueFull', []),
    ('6m', 'TandemWorkerQueueFull', [exp('TandemWorkerQueueFull', {'namespace': 'prod', 'model_name': 'qwen'}, '1.00')]),
])
case('the gateway sheds both classes', [
    ('tandem_gateway_shed_requests_total{%s,class="latency_critical"}' % G, '0+30x12'),
    ('tandem_gateway_shed_requests_total{%s,class="accuracy_critical"}' % G, '0+30x12')], [
    ('3m', 'TandemRequestsShed', []),
    ('11m', 'TandemRequestsShed', [exp('TandemRequestsShed', {'namespace': 'prod', 'instance': '10.0.0.9:9100'}, '1.00')]),
])
case('server errors count, caller errors do not', [
    ('tandem_gateway_requests_total{%s,model_name="qwen",class="accuracy_critical",code="OK"}' % G, '0+60x12'),
    ('tandem_gateway_requests_total{%s,model_name="qwen",class="accuracy_critical",code="UNAVAILABLE"}' % G, '0+20x12'),
    ('tandem_gateway_requests_total{%s,model_name="qwen",class="accuracy_critical",code="INVALID_ARGUMENT"}' % G, '0+20x12'),
    ('tandem_gateway_requests_total{%s,model_name="nemotron",class="latency_critical",code="OK"}' % G, '0+100x12'),
    ('tandem_gateway_requests_total{%s,model_name="nemotron",class="latency_critical",code="INVALID_ARGUMENT"}' % G, '0+50x12'),
    ('tandem_gateway_requests_total{%s,model_name="nemotron",class="latency_critical",code="CANCELLED"}' % G, '0+50x12')], [
    ('3m', 'TandemHighErrorRatio', []),
    ('10m', 'TandemHighErrorRatio', [exp('TandemHighErrorRatio', {'namespace': 'prod', 'model_name': 'qwen'}, '20%')]),
], promql=[{'expr': 'round(namespace_model_name:tandem_gateway_request_errors:ratio_rate5m, 0.001)', 'eval_time': '10m',
            'exp_samples': [{'labels': '{namespace="prod",model_name="nemotron"}', 'value': 0},
                            {'labels': '{namespace="prod",model_name="qwen"}', 'value': 0.2}]}])
case('policy signal recording: nemotron TTFT p95 from worker buckets', [
    ('tandem_worker_time_to_first_token_seconds_bucket{%s,le="0.1"}' % WK(2, 'nemotron'), '0+90x5'),
    ('tandem_worker_time_to_first_token_seconds_bucket{%s,le="0.25"}' % WK(2, 'nemotron'), '0+100x5'),
    ('tandem_worker_time_to_first_token_seconds_bucket{%s,le="+Inf"}' % WK(2, 'nemotron'), '0+100x5')], [],
    promql=[{'expr': 'round(namespace_model_name:tandem_worker_time_to_first_token_seconds:p95_rate1m, 0.001)', 'eval_time': '3m',
             # 95th of 100: halfway through the (0.1, 0.25] bucket's 10 observations.
             'exp_samples': [{'labels': '{namespace="prod",model_name="nemotron"}', 'value': 0.175}]}])
tests[-1].pop('alert_rule_test')
missing = set(alerts) - tested
assert not missing, missing
doc = {'rule_files': ['../rules/tandem-recording.yml', '../rules/tandem-alerts.yml'],
       'evaluation_interval': '1m', 'tests': tests}
hdr = ("# Unit tests for deploy/prometheus/rules (promtool test rules; ctest prometheus_rules_test).\n"
       "# Every alert has a case that fires and one that does not; exp_annotations pin the rendered\n"
       "# summary and runbook. Series are written as the gateway and workers export them.\n"
       "# Generated by make_alert_tests.py (python3 deploy/prometheus/tests/make_alert_tests.py).\n")
open(os.path.join(HERE, 'tandem-alerts.test.yml'), 'w').write(hdr + yaml.safe_dump(doc, sort_keys=False, width=100))
