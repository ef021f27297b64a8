#!/usr/bin/env python3
"""ctest compose_config_check: `docker-compose config` accepts docker-compose.yml, and what it
renders is coherent: each worker reserves exactly one GPU (a different one) and addresses it as
device 0; every flag is one the binary defines (its main.cc, its *_flags.cc and the common/ flag
files it links);
every gRPC port is TLS (no --plaintext / --worker_plaintext), the workers require client certs,
the gateway presents one, and every TLS file is under a mounted volume; ports agree between the workers' flags, `expose`, the gateway's --workers and
prometheus.yml; every build target exists in the Dockerfile, whose stages are all Debian 12; the
compose prometheus.yml passes `promtool check config` with the shipped rules.
The engine must be chosen: without TANDEM_ENGINE `docker-compose config` fails and names it (the
worker's own default is the load simulator); with TANDEM_ENGINE=native each worker runs
--engine=native on --checkpoint=/models/MODEL, inside its mounted models volume.
docker-compose.vllm.yml (vLLM containers with upstream workers in front) is checked the same way,
and more (vllm_checks).
No container engine runs here, so the images are not built (see docs/operations.md).

usage: check_compose.py DOCKER_COMPOSE PROMTOOL
"""
import os
import re
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def defined_flags(*srcs):
    found = set()
    for src in srcs:
        text = open(os.path.join(os.path.dirname(os.path.dirname(HERE)), src)).read()
        found |= set(re.findall(r"ABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)\s*,", text))
    return found


# Flag files linked into both servers (TLS, request limits).
COMMON_FLAGS = ("common/server_tls_flags.cc", "common/limit_flags.cc")
TLS_FILE_FLAGS = {
    "worker": ("tls_cert", "tls_key", "tls_client_ca"),
    "gateway": ("tls_cert", "tls_key", "worker_tls_ca", "worker_tls_cert", "worker_tls_key"),
}


def tls_checks(name, target, service, errors):
    cmd = service.get("command", [])
    for off in ("plaintext", "worker_plaintext"):
        if f"--{off}" in cmd or flag(cmd, off) not in (None, "false"):
            errors.append(f"{name}: --{off}: compose serves TLS (scripts/make_dev_certs.sh)")
    # `docker-compose config` renders volumes long-form (v2) or as SOURCE:TARGET[:MODE] (v1).
    mounts = [v["target"] if isinstance(v, dict) else v.split(":")[1]
              for v in service.get("volumes", [])]
    for f in TLS_FILE_FLAGS[target]:
        path = flag(cmd, f)
        if not path:
            errors.append(f"{name}: --{f} missing")
        elif not any(path.startswith(m.rstrip("/") + "/") for m in mounts):
            errors.append(f"{name}: --{f}={path} is not under a mounted volume ({mounts})")


def flag(cmd, name):
    for a in cmd:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def compose_config(compose, file="docker-compose.yml", **env):
    """`docker-compose config` of FILE with ENV over this process's environment minus every
    TANDEM_* variable, and an empty env file (no stray .env decides)."""
    with tempfile.NamedTemporaryFile("w", suffix=".env") as env_file:
        base = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
        return subprocess.run([compose, "--env-file", env_file.name,
                               "-f", os.path.join(HERE, file), "config"],
                              capture_output=True, text=True, env=dict(base, **env))


def gpu_ids(name, s, errors):
    """The device_ids of the one GPU reservation SERVICE must have."""
    devs = s.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    ids = [i for d in devs if "gpu" in d.get("capabilities", []) for i in d.get("device_ids", [])]
    if len(devs) != 1 or len(ids) != 1 or devs[0].get("count") not in (None,):
        errors.append(f"{name}: must reserve exactly one GPU by device_ids, has {devs}")
    return ids


def distinct_gpus(what, gpus, errors):
    if len(set(gpus)) != len(gpus) or len(gpus) < 2:
        errors.append(f"{what} must own different GPUs: {gpus}")


def flag_checks(services, known, errors):
    """Every tandem binary's flag exists; every gRPC port is TLS."""
    for name, s in services.items():
        target = s.get("build", {}).get("target")
        for a in s.get("command", []) if target in known else []:
            m = re.match(r"--(\w+)(=|$)", a)
            if not m or m.group(1) not in known[target]:
                errors.append(f"{name}: tandem-{target} has no flag {a!r}")
        if target in known:
            tls_checks(name, target, s, errors)


def ports_checks(services, worker_ports, errors):
    """The gateway's --workers and prometheus.yml agree with the workers' ports."""
    gw = services["gateway"]["command"]
    want = ",".join(f"{m}={n}:{g}" for n, (m, g, _) in worker_ports.items())
    got = flag(gw, "workers")
    if sorted(got.split(",")) != sorted(want.split(",")):
        errors.append(f"gateway --workers={got}, services say {want}")
    prom_text = open(os.path.join(HERE, "prometheus.yml")).read()
    for n, (_, _, mp) in worker_ports.items():
        if f"'{n}:{mp}'" not in prom_text:
            errors.append(f"prometheus.yml does not scrape {n}:{mp}")
    gw_metrics = flag(gw, "metrics_listen").rsplit(":", 1)[1]
    if f"'gateway:{gw_metrics}'" not in prom_text:
        errors.append(f"prometheus.yml does not scrape gateway:{gw_metrics}")


def worker_ports_of(name, s, errors):
    """(model, gRPC port, metrics port) of a worker service, each exposed."""
    cmd = s["command"]
    grpc_port = flag(cmd, "listen").rsplit(":", 1)[1]
    metrics_port = flag(cmd, "metrics_listen").rsplit(":", 1)[1]
    expose = {str(p) for p in s.get("expose", [])}
    if not {grpc_port, metrics_port} <= expose:
        errors.append(f"{name}: exposes {sorted(expose)}, listens on {grpc_port} and {metrics_port}")
    return flag(cmd, "model"), grpc_port, metrics_port


def vllm_checks(compose, known, errors):
    """docker-compose.vllm.yml: the engine image must be chosen; each vLLM engine owns one GPU (a
    different one); each worker runs --engine=upstream on --device=cpu without a GPU or the CUDA
    build, in front of an engine service at the port it serves, asking for the name it serves."""
    r = compose_config(compose, "docker-compose.vllm.yml")
    if r.returncode == 0 or "TANDEM_VLLM_IMAGE" not in r.stdout + r.stderr:
        errors.append("docker-compose.vllm.yml: without TANDEM_VLLM_IMAGE, docker-compose config "
                      f"must fail and name it: {r.returncode} {r.stderr}")
    image = "vllm/vllm-openai:test"
    r = compose_config(compose, "docker-compose.vllm.yml", TANDEM_VLLM_IMAGE=image)
    if r.returncode != 0:
        errors.append(f"docker-compose.vllm.yml: docker-compose config failed: {r.stderr}")
        return
    services = yaml.safe_load(r.stdout)["services"]
    flag_checks(services, known, errors)
    engines, gpus, worker_ports = {}, [], {}
    for name, s in services.items():
        if name.endswith("-engine"):
            gpus += gpu_ids(name, s, errors)
            cmd = s.get("command", [])
            engines[name] = (flag(cmd, "port"), flag(cmd, "served-model-name"))
            if s.get("image") != image:
                errors.append(f"{name}: image {s.get('image')}, not TANDEM_VLLM_IMAGE")
    for name, s in services.items():
        if not name.endswith("-worker"):
            continue
        cmd = s["command"]
        if s.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices"):
            errors.append(f"{name}: an upstream worker must not reserve a GPU (its engine does)")
        if str(s.get("build", {}).get("args", {}).get("TANDEM_CUDA")) != "0":
            errors.append(f"{name}: an upstream worker needs no CUDA build (TANDEM_CUDA=0)")
        if flag(cmd, "engine") != "upstream" or flag(cmd, "device") != "cpu":
            errors.append(f"{name}: want --engine=upstream --device=cpu, has {cmd}")
        m = re.fullmatch(r"http://([\w-]+):(\d+)", flag(cmd, "upstream_url") or "")
        if not m or m.group(1) not in engines or engines[m.group(1)][0] != m.group(2):
            errors.append(f"{name}: --upstream_url={flag(cmd, 'upstream_url')} is no engine "
                          f"service at its port ({engines})")
        elif engines[m.group(1)][1] != flag(cmd, "upstream_model"):
            errors.append(f"{name}: --upstream_model={flag(cmd, 'upstream_model')}, but "
                          f"{m.group(1)} serves {engines[m.group(1)][1]}")
        worker_ports[name] = worker_ports_of(name, s, errors)
    distinct_gpus("docker-compose.vllm.yml: engines", gpus, errors)
    ports_checks(services, worker_ports, errors)


def engine_checks(compose, errors):
    """No engine chosen: refused, naming TANDEM_ENGINE. native: the checkpoints from /models."""
    r = compose_config(compose)
    if r.returncode == 0:
        errors.append("docker-compose config succeeds without TANDEM_ENGINE: the workers would run "
                      "the load simulator unasked")
    elif "TANDEM_ENGINE" not in r.stdout + r.stderr:
        errors.append(f"without TANDEM_ENGINE, docker-compose config fails without naming it: {r.stderr}")
    r = compose_config(compose, TANDEM_ENGINE="native")
    if r.returncode != 0:
        errors.append(f"TANDEM_ENGINE=native: docker-compose config failed: {r.stderr}")
        return
    for name, s in yaml.safe_load(r.stdout)["services"].items():
        if not name.endswith("-worker"):
            continue
        cmd = s.get("command", [])
        model, engine, ckpt = flag(cmd, "model"), flag(cmd, "engine"), flag(cmd, "checkpoint")
        mounts = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in s.get("volumes", [])]
        if engine != "native" or ckpt != f"/models/{model}":
            errors.append(f"{name}: TANDEM_ENGINE=native gives --engine={engine} --checkpoint={ckpt}, "
                          f"want native and /models/{model}")
        elif "/models" not in mounts:
            errors.append(f"{name}: --checkpoint={ckpt} but /models is not mounted ({mounts})")


def main():
    compose, promtool = sys.argv[1], sys.argv[2]
    errors = []
    r = compose_config(compose, TANDEM_ENGINE="synthetic")
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        return 1
    engine_checks(compose, errors)
    cfg = yaml.safe_load(r.stdout)
    services = cfg["services"]
    dockerfile = open(os.path.join(HERE, "Dockerfile")).read()
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", dockerfile, re.M | re.I)
    stage_names = {n for _, n in stages}
    for base, name in stages:
        if base not in stage_names and not re.fullmatch(r"debian:12(-slim)?", base):
            errors.append(f"Dockerfile stage {name} is FROM {base}, not Debian 12")
    if len(stages) < 3:
        errors.append("Dockerfile is not multi-stage")
    known = {"worker": defined_flags("workers/main.cc", "workers/worker_flags.cc", *COMMON_FLAGS),
             "gateway": defined_flags("gateway/main.cc", "gateway/flags.cc", *COMMON_FLAGS)}
    flag_checks(services, known, errors)
    gpus, worker_ports = [], {}
    for name, s in services.items():
        target = s.get("build", {}).get("target")
        if target and target not in stage_names:
            errors.append(f"{name}: build target {target} not in the Dockerfile")
        if not name.endswith("-worker"):
            continue
        gpus += gpu_ids(name, s, errors)
        if str(s.get("build", {}).get("args", {}).get("TANDEM_CUDA")) != "1":
            errors.append(f"{name}: a GPU worker needs the CUDA build (build arg TANDEM_CUDA=1)")
        if flag(s["command"], "device") != "0":
            errors.append(f"{name}: the container sees its one GPU as device 0, not "
                          f"{flag(s['command'], 'device')}")
        worker_ports[name] = worker_ports_of(name, s, errors)
    distinct_gpus("workers", gpus, errors)
    ports_checks(services, worker_ports, errors)
    vllm_checks(compose, known, errors)
    prom_text = open(os.path.join(HERE, "prometheus.yml")).read()
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(os.path.dirname(HERE), "prometheus", "rules")
        path = os.path.join(tmp, "prometheus.yml")
        open(path, "w").write(prom_text.replace("/etc/tandem/prometheus/rules", rules))
        p = subprocess.run([promtool, "check", "config", path], capture_output=True, text=True)
        if p.returncode != 0:
            errors.append("promtool check config: " + p.stdout + p.stderr)
    for e in errors:
        print("error:", e)
    print(f"{len(services)} services, {len(stages)} Dockerfile stages: {'FAILED' if errors else 'OK'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
