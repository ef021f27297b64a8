#!/usr/bin/env python3
"""ctest k8s_manifests_check: renders every overlay with `kubectl kustomize` and checks the objects.

  - every object has apiVersion, kind, metadata.name and the overlay's namespace;
  - the gateway Deployment has >= 2 replicas, a PodDisruptionBudget and an HPA (min >= 2) that
    select it; its --workers name each model's headless Service and gRPC port;
  - a headless Service tandem-gateway-headless (clusterIP: None) selects the gateway pods and
    maps the gRPC port, for clients balancing with round_robin over dns:///;
  - one StatefulSet per model, `nvidia.com/gpu: 1` in limits and --device=0 (dev: CPU, no GPU;
    upstream-*: the engine's sidecar container holds the GPU, the worker runs --device=cpu);
  - no worker runs the load simulator by default: each names --engine; outside dev it is native
    with --checkpoint in a mounted PersistentVolumeClaim (dev says --engine=synthetic), and so
    is the base rendered alone; upstream-* overlays run --engine=upstream with a profile, in front
    of a sidecar in the same pod (--upstream_url on 127.0.0.1 at one of its container ports) that
    serves the --upstream_model from the models PersistentVolumeClaim;
  - startup, readiness and liveness probes exist; native gRPC ones (on the --listen port) only
    where that port is plaintext, since kubelet's gRPC probes cannot speak TLS; the others probe
    the --listen port by TCP or the --metrics_listen port (httpGet, or exec on 127.0.0.1:PORT);
  - TLS by default: outside the dev overlay no --plaintext, --worker_plaintext or
    --allow_unauthenticated; every TLS file flag names ca.crt / tls.crt / tls.key in a Secret
    volume mounted as a directory (no subPath, so rotations apply); the workers require client
    certs (--tls_client_ca); the gateway presents one to them, checks --worker_tls_server_name
    (the name ../cert-manager puts in the workers' cert) and reads --tenants from a mounted
    ConfigMap or Secret that holds it; outside dev it reads --session_key_file from a mounted
    Secret (one key for every replica); the gateway and the workers agree on plaintext or TLS;
  - ../cert-manager, added to each TLS overlay (and to base + models under another namespace),
    issues exactly the Secrets the pods mount, and the gateway's certificate names every
    Service in front of the gateway pods as clients dial it (NAME, NAME.NS, NAME.NS.svc,
    NAME.NS.svc.cluster.local) in the rendered namespace; rendered without a namespace it fails;
  - selectors match the pod template labels; every Service selects pods and maps its ports onto
    container ports, which equal the ports in the --listen / --metrics_listen (/ --http_listen)
    flags;
  - every flag in args is one the binary defines (ABSL_FLAG in its main.cc and *_flags.cc);
  - the policy ConfigMap is mounted as a directory (no subPath, so hot reload sees updates) and
    holds the file --policy names;
  - ServiceMonitors select the Services by labels and name their ports; the job label they set
    is what the alerts use; PrometheusRule, dashboard and datasource ConfigMaps are present;
  - production: a KEDA ScaledObject and a PodDisruptionBudget per worker StatefulSet;
  - deploy/k8s/base/generated is up to date (sync.py --check).

usage: check_manifests.py KUBECTL
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OVERLAYS = {"dev": "tandem-dev", "single-node": "tandem", "production": "tandem",
            "upstream-vllm": "tandem"}
MODELS = ("qwen", "nemotron")
CLUSTER_SCOPED = {"Namespace"}
GATEWAY_HEADLESS = "tandem-gateway-headless"   # the name docs/operations.md tells clients to dial


def flags_of(path):
    return set(re.findall(r"ABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)\s*,", open(os.path.join(ROOT, path)).read()))


# Flag files linked into both servers besides their main.cc (TLS, request limits).
COMMON_FLAGS = flags_of("common/server_tls_flags.cc") | flags_of("common/limit_flags.cc")
GATEWAY_FLAGS = flags_of("gateway/main.cc") | flags_of("gateway/flags.cc") | COMMON_FLAGS
WORKER_FLAGS = flags_of("workers/main.cc") | flags_of("workers/worker_flags.cc") | COMMON_FLAGS
INSECURE_FLAGS = ("plaintext", "worker_plaintext", "allow_unauthenticated")
SECRET_KEYS = {"ca.crt", "tls.crt", "tls.key"}   # cert-manager's (and kubernetes.io/tls's) names


def flag(args, name):
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def on(args, name):
    """A boolean flag given as --NAME or --NAME=true."""
    return f"--{name}" in args or flag(args, name) in ("true", "1")


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Checker:
    def __init__(self, overlay, objs):
        self.overlay, self.objs, self.errors = overlay, objs, []

    def err(self, msg):
        self.errors.append(f"{self.overlay}: {msg}")

    def of(self, kind):
        return [o for o in self.objs if o["kind"] == kind]

    def get(self, kind, name):
        for o in self.of(kind):
            if o["metadata"]["name"] == name:
                return o
        return None

    def container_checks(self, what, pod, flags_known):
        c = pod["spec"]["containers"][0]
        args = c.get("args", [])
        for a in args:
            m = re.match(r"--(\w+)(=|$)", a)
            if not m or m.group(1) not in flags_known:
                self.err(f"{what}: unknown flag {a!r}")
        listen, metrics = flag(args, "listen"), flag(args, "metrics_listen")
        if not listen or not metrics:
            self.err(f"{what}: --listen and --metrics_listen must be set")
            return c, {}
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        want = {"grpc": port_of(listen), "metrics": port_of(metrics)}
        http = flag(args, "http_listen")  # the gateway's OpenAI-compatible front, when served
        if http:
            want["https"] = port_of(http)
        if ports != want:
            self.err(f"{what}: container ports {ports} do not match --listen={listen} "
                     f"--metrics_listen={metrics}" + (f" --http_listen={http}" if http else ""))
        plaintext = on(args, "plaintext")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = c.get(probe)
            if not p:
                self.err(f"{what}: no {probe}")
            elif "grpc" in p:
                if not plaintext:
                    self.err(f"{what}: {probe} is a native gRPC probe on a TLS port (kubelet cannot speak TLS)")
                elif p["grpc"].get("port") != port_of(listen):
                    self.err(f"{what}: {probe} on port {p['grpc'].get('port')}, --listen is {listen}")
            elif "tcpSocket" in p:
                if p["tcpSocket"].get("port") not in (port_of(listen), port_of(metrics), "grpc", "metrics"):
                    self.err(f"{what}: {probe} probes port {p['tcpSocket'].get('port')}, not --listen or --metrics_listen")
            elif "httpGet" in p:
                if p["httpGet"].get("port") not in (port_of(metrics), "metrics"):
                    self.err(f"{what}: {probe} HTTP on port {p['httpGet'].get('port')}, --metrics_listen is {metrics}")
            elif "exec" in p:
                if f"127.0.0.1:{port_of(metrics)}/" not in " ".join(p["exec"].get("command", [])):
                    self.err(f"{what}: {probe} exec does not query 127.0.0.1:{port_of(metrics)}")
            else:
                self.err(f"{what}: {probe} has no handler")
        vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        if self.overlay != "dev":
            for f in INSECURE_FLAGS:
                if on(args, f):
                    self.err(f"{what}: --{f} outside the dev overlay")
        for vm in c.get("volumeMounts", []):
            v = vols.get(vm["name"])
            if v is None:
                self.err(f"{what}: volumeMount {vm['name']} has no volume")
            elif "configMap" in v and not self.get("ConfigMap", v["configMap"]["name"]):
                self.err(f"{what}: ConfigMap {v['configMap']['name']} missing")
            elif "persistentVolumeClaim" in v and not self.get(
                    "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]):
                self.err(f"{what}: PVC {v['persistentVolumeClaim']['claimName']} missing")
        return c, ports

    def mounted_file(self, what, pod, c, path, kinds):
        """The volume holding PATH, which must be a directory mount (no subPath) of one of KINDS
        (secret, configMap); returns (kind, the volume source) or None after an error."""
        mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == os.path.dirname(path)]
        if len(mounts) != 1 or "subPath" in mounts[0]:
            self.err(f"{what}: {path} is not in a volume mounted as a directory (no subPath)")
            return None
        vol = {v["name"]: v for v in pod["spec"].get("volumes", [])}.get(mounts[0]["name"], {})
        for k in kinds:
            if k in vol:
                return k, vol[k]
        self.err(f"{what}: {path} is in volume {mounts[0]['name']}, not a {' or '.join(kinds)}")
        return None

    def engine_checks(self, what, pod, c, dev):
        """The engine is named, never left to the binary's default (synthetic, the load
        simulator); only dev runs the simulator, the others the native engine on a checkpoint
        from the models volume."""
        args = c.get("args", [])
        engine = flag(args, "engine")
        if engine is None:
            self.err(f"{what}: no --engine: the worker would run the load simulator (the default)")
        elif dev:
            if engine != "synthetic":
                self.err(f"{what}: dev runs --engine=synthetic, has {engine}")
        elif self.overlay.startswith("upstream-"):
            self.upstream_checks(what, pod, c)
        elif engine != "native":
            self.err(f"{what}: --engine={engine}: outside dev the workers run the native engine")
        else:
            ckpt = flag(args, "checkpoint")
            mounts = [m for m in c.get("volumeMounts", [])
                      if ckpt and (ckpt + "/").startswith(m["mountPath"].rstrip("/") + "/")]
            vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
            if not ckpt:
                self.err(f"{what}: --engine=native without --checkpoint")
            elif not mounts or "persistentVolumeClaim" not in vols.get(mounts[0]["name"], {}):
                self.err(f"{what}: --checkpoint={ckpt} is not on a mounted PersistentVolumeClaim")

    def upstream_checks(self, what, pod, c):
        """--engine=upstream in front of a sidecar of the same pod that holds the GPU and serves
        --upstream_model from the models PersistentVolumeClaim."""
        args = c.get("args", [])
        if flag(args, "engine") != "upstream" or not flag(args, "upstream_profile"):
            self.err(f"{what}: {self.overlay} runs --engine=upstream with an --upstream_profile")
            return
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", flag(args, "upstream_url") or "")
        model = flag(args, "upstream_model")
        sidecars = [s for s in pod["spec"]["containers"][1:]
                    if m and int(m.group(1)) in [p["containerPort"] for p in s.get("ports", [])]]
        if len(sidecars) != 1:
            self.err(f"{what}: --upstream_url={flag(args, 'upstream_url')} is not a port of one "
                     "sidecar container in the pod")
            return
        e = sidecars[0]
        if not model or not any(model in a for a in e.get("args", [])):
            self.err(f"{what}: the engine container does not serve --upstream_model={model}")
        vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        if not any("persistentVolumeClaim" in vols.get(vm["name"], {}) for vm in e.get("volumeMounts", [])):
            self.err(f"{what}: the engine container mounts no PersistentVolumeClaim (the weights)")
        if str(e.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")) != "1":
            self.err(f"{what}: the engine container wants nvidia.com/gpu: 1 in limits")

    def tls_checks(self, what, pod, c, file_flags):
        """Each TLS file flag set and in a mounted Secret under a cert-manager key name;
        returns the Secret names."""
        args, secrets = c.get("args", []), set()
        for f in file_flags:
            path = flag(args, f)
            if not path:
                self.err(f"{what}: --{f} missing (TLS is the default)")
                continue
            if os.path.basename(path) not in SECRET_KEYS:
                self.err(f"{what}: --{f}={path} is not one of the Secret keys {sorted(SECRET_KEYS)}")
            found = self.mounted_file(what, pod, c, path, ("secret",))
            if found:
                secrets.add(found[1].get("secretName"))
        return secrets

    def service_checks(self, svc, pod_labels, ports):
        if not selects(svc["spec"].get("selector"), pod_labels):
            self.err(f"Service {svc['metadata']['name']}: selector {svc['spec'].get('selector')} does not match the pods")
        for sp in svc["spec"]["ports"]:
            tp = sp.get("targetPort", sp["port"])
            target = ports.get(tp) if isinstance(tp, str) else tp
            if target is None or target != sp["port"]:
                self.err(f"Service {svc['metadata']['name']}: port {sp['name']} {sp['port']} -> {tp} is not the container's")

    def run(self):
        ns = OVERLAYS[self.overlay]
        for o in self.objs:
            md = o.get("metadata", {})
            if not o.get("apiVersion") or not o.get("kind") or not md.get("name"):
                self.err(f"object without apiVersion/kind/name: {str(o)[:120]}")
            elif o["kind"] not in CLUSTER_SCOPED and md.get("namespace") != ns:
                self.err(f"{o['kind']}/{md['name']} in namespace {md.get('namespace')}, want {ns}")
        if [n["metadata"]["name"] for n in self.of("Namespace")] != [ns]:
            self.err(f"want exactly the Namespace {ns}")

        # Gateway.
        gw = self.get("Deployment", "tandem-gateway")
        if gw is None:
            self.err("no Deployment tandem-gateway")
            return
        tl = gw["spec"]["template"]["metadata"]["labels"]
        if not selects(gw["spec"]["selector"]["matchLabels"], tl):
            self.err("gateway selector does not match its template labels")
        if gw["spec"].get("replicas", 1) < 2:
            self.err("gateway has fewer than 2 replicas")
        if not any(selects(p["spec"]["selector"]["matchLabels"], tl) for p in self.of("PodDisruptionBudget")):
            self.err("no PodDisruptionBudget selects the gateway")
        hpas = [h for h in self.of("HorizontalPodAutoscaler")
                if h["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "tandem-gateway"}]
        if len(hpas) != 1 or hpas[0]["spec"].get("minReplicas", 1) < 2 or \
                hpas[0]["spec"]["maxReplicas"] < hpas[0]["spec"]["minReplicas"]:
            self.err("want one HPA on the gateway with 2 <= minReplicas <= maxReplicas")
        gpod = gw["spec"]["template"]
        c, gports = self.container_checks("gateway", gpod, GATEWAY_FLAGS)
        env = {e["name"]: e for e in c.get("env", [])}
        args = c.get("args", [])
        policy = flag(args, "policy")
        mounts = [m for m in c.get("volumeMounts", []) if policy and m["mountPath"] == os.path.dirname(policy)]
        if not policy or len(mounts) != 1 or "subPath" in mounts[0]:
            self.err(f"--policy={policy} must be in a ConfigMap mounted as a directory (no subPath)")
        else:
            vol = {v["name"]: v for v in gpod["spec"]["volumes"]}[mounts[0]["name"]]
            cm = self.get("ConfigMap", vol.get("configMap", {}).get("name", ""))
            if not cm or os.path.basename(policy) not in cm.get("data", {}):
                self.err(f"policy ConfigMap lacks {os.path.basename(policy)}")
        self.secrets, self.worker_server_name = set(), None
        gw_worker_plaintext = on(args, "worker_plaintext")
        if not on(args, "plaintext"):
            self.secrets |= self.tls_checks("gateway", gpod, c, ("tls_cert", "tls_key"))
        if not gw_worker_plaintext:
            self.secrets |= self.tls_checks("gateway", gpod, c,
                                            ("worker_tls_ca", "worker_tls_cert", "worker_tls_key"))
            # Workers are dialled by pod IP from DNS: the name to check must be given.
            self.worker_server_name = flag(args, "worker_tls_server_name")
            if not self.worker_server_name:
                self.err("gateway: --worker_tls_server_name missing (workers are reached by pod IP)")
        tenants = flag(args, "tenants")
        if tenants:
            found = self.mounted_file("gateway", gpod, c, tenants, ("configMap", "secret"))
            if found:
                kind, src = found
                obj = self.get("ConfigMap", src.get("name", "")) if kind == "configMap" else None
                if kind == "configMap" and (not obj or os.path.basename(tenants) not in obj.get("data", {})):
                    self.err(f"gateway: ConfigMap {src.get('name')} lacks {os.path.basename(tenants)}")
                elif obj:
                    doc = yaml.safe_load(obj["data"][os.path.basename(tenants)]) or {}
                    if not isinstance(doc.get("tenants"), list) or not doc["tenants"]:
                        self.err(f"gateway: {tenants} has no tenants")
        elif not on(args, "allow_unauthenticated"):
            self.err("gateway: neither --tenants nor --allow_unauthenticated (it would not start)")
        # Several replicas share the session token key, so that any of them honours a session.
        key = flag(args, "session_key_file")
        if key:
            self.mounted_file("gateway", gpod, c, key, ("secret",))
        elif self.overlay != "dev":
            self.err("gateway: no --session_key_file: replicas would not honour each other's "
                     "session tokens")
        gsvc = self.get("Service", "tandem-gateway")
        if gsvc is None:
            self.err("no Service tandem-gateway")
        else:
            self.service_checks(gsvc, tl, gports)
        # gRPC clients balance per call only over a name that resolves to every pod.
        hsvc = self.get("Service", GATEWAY_HEADLESS)
        if hsvc is None or hsvc["spec"].get("clusterIP") != "None":
            self.err(f"no headless Service {GATEWAY_HEADLESS} (clusterIP: None) for round_robin clients")
        else:
            self.service_checks(hsvc, tl, gports)
            if "grpc" not in {p["name"] for p in hsvc["spec"]["ports"]}:
                self.err(f"Service {GATEWAY_HEADLESS} has no grpc port")
            if hsvc["spec"].get("publishNotReadyAddresses"):
                self.err(f"Service {GATEWAY_HEADLESS} publishes pods that are not ready")
        workers = {}
        for entry in (flag(args, "workers") or "").split(","):
            m = re.fullmatch(r"(\w+)=dns:///([\w-]+)\.\$\(POD_NAMESPACE\)\.svc\.cluster\.local:(\d+)", entry)
            if not m:
                self.err(f"gateway --workers entry {entry!r} is not MODEL=dns:///SERVICE.$(POD_NAMESPACE).svc.cluster.local:PORT")
                continue
            workers[m.group(1)] = (m.group(2), int(m.group(3)))
        if "$(POD_NAMESPACE)" in flag(args, "workers") or "":
            if env.get("POD_NAMESPACE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "metadata.namespace":
                self.err("gateway uses $(POD_NAMESPACE) without the fieldRef env")
        if set(workers) != set(MODELS):
            self.err(f"gateway --workers models {sorted(workers)}, want {MODELS}")

        # Workers.
        for model in MODELS:
            sts = [s for s in self.of("StatefulSet")
                   if s["spec"]["template"]["metadata"]["labels"].get("tandem.dev/model") == model]
            if len(sts) != 1:
                self.err(f"want one StatefulSet for {model}, have {len(sts)}")
                continue
            s = sts[0]
            name = s["metadata"]["name"]
            pl = s["spec"]["template"]["metadata"]["labels"]
            if not selects(s["spec"]["selector"]["matchLabels"], pl):
                self.err(f"{name}: selector does not match its template labels")
            c, ports = self.container_checks(name, s["spec"]["template"], WORKER_FLAGS)
            args = c.get("args", [])
            if flag(args, "model") != model:
                self.err(f"{name}: --model={flag(args, 'model')}, labelled {model}")
            self.engine_checks(name, s["spec"]["template"], c, self.overlay == "dev")
            if on(args, "plaintext") != gw_worker_plaintext:
                self.err(f"{name}: --plaintext is {on(args, 'plaintext')}, the gateway's "
                         f"--worker_plaintext {gw_worker_plaintext}")
            if not on(args, "plaintext"):
                # Mutual TLS: --tls_client_ca makes the worker demand the gateway's client cert.
                self.secrets |= self.tls_checks(name, s["spec"]["template"], c,
                                                ("tls_cert", "tls_key", "tls_client_ca"))
            gpu = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
            if self.overlay == "dev" or self.overlay.startswith("upstream-"):
                if gpu is not None or flag(args, "device") != "cpu":
                    self.err(f"{name}: the worker runs on the CPU without a GPU limit in {self.overlay}")
            elif str(gpu) != "1" or flag(args, "device") != "0":
                self.err(f"{name}: want nvidia.com/gpu: 1 in limits and --device=0, have {gpu} and {flag(args, 'device')}")
            svc = self.get("Service", s["spec"]["serviceName"])
            if svc is None or svc["spec"].get("clusterIP") != "None":
                self.err(f"{name}: serviceName {s['spec']['serviceName']} is not a headless Service")
                continue
            self.service_checks(svc, pl, ports)
            svc_name, port = workers.get(model, (None, None))
            if svc_name != svc["metadata"]["name"] or port != ports.get("grpc"):
                self.err(f"gateway reaches {model} at {svc_name}:{port}, the pods are behind "
                         f"{svc['metadata']['name']}:{ports.get('grpc')}")
            if self.overlay == "production":
                so = [o for o in self.of("ScaledObject") if o["spec"]["scaleTargetRef"].get("name") == name]
                if len(so) != 1 or so[0]["spec"]["scaleTargetRef"].get("kind") != "StatefulSet":
                    self.err(f"{name}: want one KEDA ScaledObject")
                elif not any(model in t["metadata"].get("query", "") and ns in t["metadata"].get("query", "")
                             for t in so[0]["spec"]["triggers"]):
                    self.err(f"{name}: ScaledObject query does not name the model and namespace")
                if not any(selects(p["spec"]["selector"]["matchLabels"], pl) for p in self.of("PodDisruptionBudget")):
                    self.err(f"{name}: no PodDisruptionBudget")

        # Monitoring.
        services = self.of("Service")
        jobs = set()
        for sm in self.of("ServiceMonitor"):
            matched = [s for s in services if selects(sm["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))]
            if not matched:
                self.err(f"ServiceMonitor {sm['metadata']['name']} selects no Service")
            for s in matched:
                names = {p["name"] for p in s["spec"]["ports"]}
                for ep in sm["spec"]["endpoints"]:
                    if ep["port"] not in names:
                        self.err(f"ServiceMonitor {sm['metadata']['name']}: Service {s['metadata']['name']} has no port {ep['port']}")
                jobs.add(s["metadata"].get("labels", {}).get(sm["spec"].get("jobLabel", ""), s["metadata"]["name"]))
        if jobs != {"tandem-gateway", "tandem-worker"}:
            self.err(f"scrape jobs {sorted(jobs)}, the alerts expect tandem-gateway and tandem-worker")
        rules = self.of("PrometheusRule")
        alerts = [r["alert"] for pr in rules for g in pr["spec"]["groups"] for r in g["rules"] if "alert" in r]
        if len(alerts) < 14:
            self.err(f"PrometheusRule has {len(alerts)} alerts")
        dash = [c for c in self.of("ConfigMap") if c["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
        if len(dash) != 4:
            self.err(f"{len(dash)} dashboard ConfigMaps, want 4")
        if not any(c["metadata"].get("labels", {}).get("grafana_datasource") == "1" for c in self.of("ConfigMap")):
            self.err("no Grafana datasource ConfigMap")
        return self.errors


def kustomize(kubectl, path):
    """(objects, error) of `kubectl kustomize PATH`."""
    r = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [o for o in yaml.safe_load_all(r.stdout) if o], None


def with_cert_manager(kubectl, namespace, bases):
    """Renders BASES (directories under deploy/k8s) plus ../cert-manager in a scratch overlay
    that sets NAMESPACE, as an operator adding cert-manager to an overlay's bases would."""
    tmp = tempfile.mkdtemp(prefix="tandem-k8s-")
    try:
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
            yaml.safe_dump({"namespace": namespace,
                            "bases": [os.path.relpath(os.path.join(HERE, b), tmp)
                                      for b in bases + ["cert-manager"]]}, f)
        return kustomize(kubectl, tmp)
    finally:
        shutil.rmtree(tmp)


def check_cert_manager(kubectl, secrets, worker_server_name):
    """../cert-manager, added to each TLS overlay (and to base + models under another
    namespace), issues exactly the Secrets the base mounts, the workers' carrying the name the
    gateway checks, the gateway's every name a client dials in the rendered namespace."""
    errors = []
    cases = [(OVERLAYS[o], [f"overlays/{o}"]) for o in OVERLAYS if o != "dev"]
    cases.append(("team-a", ["base", "models"]))         # any namespace, not just the overlays'
    cases.append(("team-b", ["overlays/production"]))    # an overlay's overlay moving it again
    for ns, bases in cases:
        what = f"cert-manager in {'+'.join(bases)} (namespace {ns})"
        objs, err = with_cert_manager(kubectl, ns, bases)
        if err:
            errors.append(f"{what}: kubectl kustomize failed: {err}")
            continue
        certs = {o["spec"]["secretName"]: o for o in objs
                 if o["kind"] == "Certificate" and not o["spec"].get("isCA")}
        if set(certs) != secrets:
            errors.append(f"{what}: Certificates issue {sorted(certs)}, the pods mount {sorted(secrets)}")
        for c in certs.values():
            if c["metadata"].get("namespace") != ns:
                errors.append(f"{what}: Certificate {c['metadata']['name']} in namespace {c['metadata'].get('namespace')}")
        worker = certs.get("tandem-worker-tls", {}).get("spec", {})
        if worker_server_name not in worker.get("dnsNames", []):
            errors.append(f"{what}: tandem-worker-tls lacks {worker_server_name} (--worker_tls_server_name)")
        if "client auth" not in certs.get("tandem-gateway-client-tls", {}).get("spec", {}).get("usages", []):
            errors.append(f"{what}: tandem-gateway-client-tls is not a client certificate")
        # Every Service in front of the gateway's gRPC port, by each name a client may dial.
        gw = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "tandem-gateway"]
        labels = gw[0]["spec"]["template"]["metadata"]["labels"] if gw else {}
        svcs = [o for o in objs if o["kind"] == "Service" and selects(o["spec"].get("selector"), labels)
                and any(p["name"] == "grpc" for p in o["spec"]["ports"])]
        if len(svcs) < 2:
            errors.append(f"{what}: want the gateway's Service and headless Service, have {[o['metadata']['name'] for o in svcs]}")
        want = {f"{o['metadata']['name']}{suffix}" for o in svcs
                for suffix in ("", f".{ns}", f".{ns}.svc", f".{ns}.svc.cluster.local")}
        names = set(certs.get("tandem-gateway-tls", {}).get("spec", {}).get("dnsNames", []))
        if not want <= names:
            errors.append(f"{what}: tandem-gateway-tls lacks {sorted(want - names)} (has {sorted(names)})")
        if any("$(" in n for n in names):
            errors.append(f"{what}: tandem-gateway-tls has unresolved names {sorted(names)}")
        print(f"{what}: {len(certs)} certificates, gateway names {len(names)}")
    # Alone it has no namespace to name: refusing beats issuing names nobody dials.
    objs, err = kustomize(kubectl, os.path.join(HERE, "cert-manager"))
    if err is None:
        errors.append("cert-manager rendered without a namespace; it must need the overlay's")
    print(f"cert-manager: {'FAILED' if errors else 'OK'}")
    return errors


def check_base_engine(kubectl):
    """The base alone (what an overlay of one's own starts from) runs no load simulator."""
    objs, err = kustomize(kubectl, os.path.join(HERE, "base"))
    if err:
        return [f"base: kubectl kustomize failed: {err}"]
    checker = Checker("base", objs)
    for s in checker.of("StatefulSet"):
        pod = s["spec"]["template"]
        checker.engine_checks(s["metadata"]["name"], pod, pod["spec"]["containers"][0], dev=False)
    if len(checker.of("StatefulSet")) != len(MODELS):
        checker.err(f"{len(checker.of('StatefulSet'))} StatefulSets, want {len(MODELS)}")
    print(f"base: workers' engine {'FAILED' if checker.errors else 'OK'}")
    return checker.errors


def main():
    kubectl = sys.argv[1]
    errors = []
    tls = None   # (Secrets mounted, --worker_tls_server_name) of a TLS overlay
    sync = subprocess.run([sys.executable, os.path.join(HERE, "sync.py"), "--check"], capture_output=True, text=True)
    if sync.returncode != 0:
        errors.append(sync.stdout.strip())
    for overlay in OVERLAYS:
        r = subprocess.run([kubectl, "kustomize", os.path.join(HERE, "overlays", overlay)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            errors.append(f"{overlay}: kubectl kustomize failed: {r.stderr}")
            continue
        objs = [o for o in yaml.safe_load_all(r.stdout) if o]
        checker = Checker(overlay, objs)
        found = checker.run()
        errors += found
        print(f"{overlay}: {len(objs)} objects, {'FAILED' if found else 'OK'}")
        if overlay != "dev" and not found:
            got = (getattr(checker, "secrets", set()), getattr(checker, "worker_server_name", None))
            if tls is not None and got != tls:
                errors.append(f"{overlay}: TLS Secrets {got}, other overlays {tls}")
            tls = got
    if tls is None:
        errors.append("no TLS overlay to check ../cert-manager against")
    else:
        errors += check_cert_manager(kubectl, *tls)
    errors += check_base_engine(kubectl)
    for e in errors:
        print("error:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
