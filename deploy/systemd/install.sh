#!/usr/bin/env bash
# Installs Tandem on one GPU box as systemd services: one tandem-worker@N per GPU (pinned with
# CUDA_VISIBLE_DEVICES=N), the gateway, and a Prometheus with Tandem's rules.
#
#   bash deploy/systemd/install.sh --checkpoint-dir=DIR | --engine=synthetic
#                                  [--build-dir=build] [--models=qwen,nemotron] [--no-start]
#                                  [--dev-certs] [--destdir=DIR]
#
# The engine must be chosen (the worker's own default is the load simulator, which would serve
# made-up answers): --checkpoint-dir=DIR runs the native engine on DIR/MODEL (DIR/qwen,
# DIR/nemotron, each a model directory with config.json; not under /home or /root, which the
# units cannot see), checked before anything is installed; --engine=synthetic runs the load
# simulator on purpose (tests, benchmarks; not a real model). Neither: the install refuses.
# Both are needed only for the worker-N.env files it writes: kept ones must name an engine.
# --models lists the model of each GPU in order (GPU 0 first): the default gives GPU 0 to qwen and
# GPU 1 to nemotron; `--models=qwen,qwen,nemotron,nemotron` makes two replicas of each on four
# GPUs. Worker N listens on 7101+N (gRPC) and 9101+N (metrics); the gateway on 7000 and 9100;
# Prometheus on 127.0.0.1:9090. Existing /etc/tandem files are kept (edit them, then
# `systemctl restart tandem.target`); a new policy is picked up without a restart.
# Secure by default: TLS and mutual TLS from /etc/tandem/tls/{gateway,gateway-client,worker}/
# {ca.crt,tls.crt,tls.key} (see the units' comments; put your CA's certificates there), API keys
# from /etc/tandem/tenants.yaml (installed from deploy/tenants.example.yaml, whose fake key hashes
# let nobody in: edit it). --dev-certs fills /etc/tandem/tls with throwaway certificates from
# scripts/make_dev_certs.sh (a development CA; not for production) when it is empty.
# --destdir writes everything under DIR and touches nothing else (no user, no systemctl): used
# by ctest (systemd_units_verify, systemd_install_engine_check) and for packaging; the
# checkpoints are still looked for at --checkpoint-dir on this machine.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD="$ROOT/build"
MODELS="qwen,nemotron"
ENGINE=""
CHECKPOINTS=""
DESTDIR=""
START=1
DEV_CERTS=0
for arg in "$@"; do
  case "$arg" in
    --build-dir=*) BUILD="${arg#*=}" ;;
    --models=*) MODELS="${arg#*=}" ;;
    --engine=*) ENGINE="${arg#*=}" ;;
    --checkpoint-dir=*) CHECKPOINTS="${arg#*=}" ;;
    --destdir=*) DESTDIR="${arg#*=}"; START=0 ;;
    --no-start) START=0 ;;
    --dev-certs) DEV_CERTS=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a GPU_MODELS <<<"$MODELS"
for m in "${GPU_MODELS[@]}"; do
  [[ "$m" == qwen || "$m" == nemotron ]] || { echo "install.sh: unknown model '$m'" >&2; exit 2; }
done

# The engine, checked before anything is written.
D="$DESTDIR"
ETC="$D/etc/tandem"
if [[ -n "$CHECKPOINTS" ]]; then
  [[ -z "$ENGINE" || "$ENGINE" == native ]] || {
    echo "install.sh: --checkpoint-dir is for --engine=native, not --engine=$ENGINE" >&2; exit 2; }
  ENGINE=native
  CHECKPOINTS=${CHECKPOINTS%/}
  [[ "$CHECKPOINTS" == /* ]] || { echo "install.sh: --checkpoint-dir must be absolute" >&2; exit 2; }
  case "$CHECKPOINTS/" in /home/*|/root/*|/run/user/*)
    echo "install.sh: --checkpoint-dir=$CHECKPOINTS: the units run with ProtectHome=yes and" \
      "cannot read it; put the checkpoints elsewhere (e.g. /var/lib/tandem/models)" >&2; exit 1 ;;
  esac
fi
case "$ENGINE" in
  native) [[ -n "$CHECKPOINTS" ]] || {
    echo "install.sh: --engine=native needs --checkpoint-dir=DIR (DIR/qwen, DIR/nemotron)" >&2; exit 2; } ;;
  synthetic|"") ;;
  *) echo "install.sh: --engine=$ENGINE: expected native (with --checkpoint-dir) or synthetic" >&2; exit 2 ;;
esac
need_engine=0
for i in "${!GPU_MODELS[@]}"; do
  env_file="$ETC/worker-$i.env"
  if [[ -e "$env_file" ]]; then
    # Kept as it is: it must name the engine (TANDEM_ENGINE, or --engine in the extra flags as
    # older installs wrote them), or the worker would refuse to start.
    grep -Eq '^TANDEM_ENGINE="?(native|synthetic)"?$|^TANDEM_WORKER_ARGS=.*--engine=(native|synthetic)' \
      "$env_file" || {
      echo "install.sh: $env_file names no engine: add TANDEM_ENGINE=native and" \
        "TANDEM_CHECKPOINT=DIR (or TANDEM_ENGINE=synthetic for the load simulator), or remove" \
        "the file to have it written anew" >&2; exit 1; }
  else
    need_engine=1
    if [[ "$ENGINE" == native && ! -f "$CHECKPOINTS/${GPU_MODELS[$i]}/config.json" ]]; then
      echo "install.sh: no checkpoint for ${GPU_MODELS[$i]} (GPU $i): $CHECKPOINTS/${GPU_MODELS[$i]}/config.json" \
        "missing; copy the model directory there first" >&2; exit 1
    fi
  fi
done
if ((need_engine)) && [[ -z "$ENGINE" ]]; then
  echo "install.sh: no engine chosen. Give --checkpoint-dir=DIR for the real models (native" \
    "engine on DIR/qwen and DIR/nemotron), or --engine=synthetic for the load simulator (not a" \
    "real model: made-up answers, for tests and benchmarks)." >&2
  exit 2
fi
for bin in workers/tandem-worker gateway/tandem-gateway tools/tandemctl; do
  [[ -x "$BUILD/$bin" ]] || { echo "install.sh: $BUILD/$bin missing: build first" >&2; exit 1; }
done
if [[ -z "$DESTDIR" && $(id -u) -ne 0 ]]; then echo "install.sh: run as root" >&2; exit 1; fi

install -d "$D/usr/local/bin" "$D/etc/systemd/system" "$ETC/policies" \
  "$ETC/router/classifier" "$ETC/prometheus/rules" "$D/usr/local/share/doc/tandem"
install -d -m 750 "$ETC/tls" "$ETC/tls/gateway" "$ETC/tls/gateway-client" "$ETC/tls/worker"
install -m 755 "$BUILD/workers/tandem-worker" "$BUILD/gateway/tandem-gateway" \
  "$BUILD/tools/tandemctl" "$D/usr/local/bin/"
install -m 644 "$HERE"/tandem-worker@.service "$HERE"/tandem-gateway.service \
  "$HERE"/tandem-prometheus.service "$HERE"/tandem.target "$D/etc/systemd/system/"
# The docs by task; docs/README.md is only their index there, and the project's README.md takes its name.
docs=()
for f in "$ROOT"/docs/*.md; do [[ $(basename "$f") == README.md ]] || docs+=("$f"); done
install -m 644 "$ROOT/README.md" "${docs[@]}" "$D/usr/local/share/doc/tandem/"

keep() {  # keep() DEST: write stdin to DEST unless it exists (operators' edits survive)
  if [[ -e "$1" ]]; then echo "[install] keeping $1"; cat >/dev/null; else cat >"$1"; fi
}
# The policy and the classifier it names (../router/classifier/model.tcls, relative to it).
for p in "$ROOT"/policies/*.yaml; do keep "$ETC/policies/$(basename "$p")" <"$p"; done
install -m 644 "$ROOT/router/classifier/model.tcls" "$ETC/router/classifier/model.tcls"
# Tenants: the example's key hashes are fake, so until it is edited nobody gets in.
keep "$ETC/tenants.yaml" <"$ROOT/deploy/tenants.example.yaml"
install -m 644 "$ROOT/deploy/tenants.example.yaml" "$D/usr/local/share/doc/tandem/"
if ((DEV_CERTS)); then bash "$ROOT/scripts/make_dev_certs.sh" "$ETC/tls"; fi
for f in gateway/tls.crt gateway/tls.key gateway-client/ca.crt gateway-client/tls.crt \
         gateway-client/tls.key worker/ca.crt worker/tls.crt worker/tls.key; do
  [[ -e "$ETC/tls/$f" ]] || echo "[install] WARNING: $ETC/tls/$f missing: the services refuse" \
    "to start without their TLS files (see the units' comments, or install.sh --dev-certs)"
done

workers="" worker_targets=""
for i in "${!GPU_MODELS[@]}"; do
  m=${GPU_MODELS[$i]}
  checkpoint=""
  if [[ "$ENGINE" == native ]]; then checkpoint="$CHECKPOINTS/$m"; fi
  keep "$ETC/worker-$i.env" <<ENV
# tandem-worker@$i: GPU $i (CUDA_VISIBLE_DEVICES=$i in the unit).
TANDEM_MODEL=$m
TANDEM_LISTEN=0.0.0.0:$((7101 + i))
TANDEM_METRICS_LISTEN=0.0.0.0:$((9101 + i))
# Engine (required; the worker refuses to start without one): native runs the model directory
# TANDEM_CHECKPOINT; synthetic is the load simulator (made-up answers, not a real model).
TANDEM_ENGINE=$ENGINE
TANDEM_CHECKPOINT=$checkpoint
# More flags, e.g. --max_batch_size=64 --gpu_memory_fraction=0.85
TANDEM_WORKER_ARGS=
ENV
  workers+="${workers:+,}$m=127.0.0.1:$((7101 + i))"
  worker_targets+="${worker_targets:+, }'127.0.0.1:$((9101 + i))'"
done
keep "$ETC/gateway.env" <<ENV
TANDEM_WORKERS=$workers
TANDEM_POLICY=/etc/tandem/policies/default.yaml
TANDEM_PROMETHEUS_URL=http://127.0.0.1:9090
TANDEM_TENANTS=/etc/tandem/tenants.yaml
# TLS files: see tandem-gateway.service (TANDEM_TLS_DIR, TANDEM_WORKER_TLS_DIR and
# TANDEM_WORKER_TLS_SERVER_NAME may be set here).
TANDEM_GATEWAY_ARGS=
ENV
install -m 644 "$ROOT"/deploy/prometheus/rules/*.yml "$ETC/prometheus/rules/"
sed -e "s|- targets: \['127.0.0.1:9101', '127.0.0.1:9102'\]|- targets: [$worker_targets]|" \
  "$ROOT/deploy/prometheus/prometheus.yml" | keep "$ETC/prometheus/prometheus.yml"

if [[ "$ENGINE" == synthetic ]]; then
  echo "[install] WARNING: --engine=synthetic: the workers run the LOAD SIMULATOR, not a real" \
    "model (made-up answers); reinstall with --checkpoint-dir=DIR after removing" \
    "$ETC/worker-*.env, or edit TANDEM_ENGINE and TANDEM_CHECKPOINT there"
fi
if [[ -z "$DESTDIR" ]]; then
  id tandem >/dev/null 2>&1 || useradd --system --home-dir /var/lib/tandem --shell /usr/sbin/nologin tandem
  # Keys readable by the services' group only; the dev CA's key (if any) by root only.
  chown -R root:tandem "$ETC/tls"
  find "$ETC/tls" -name tls.key -exec chmod 640 {} +
  chown root:tandem "$ETC/tenants.yaml"; chmod 640 "$ETC/tenants.yaml"
  systemctl daemon-reload
  units=(tandem.target tandem-gateway.service tandem-prometheus.service)
  for i in "${!GPU_MODELS[@]}"; do units+=("tandem-worker@$i.service"); done
  systemctl enable "${units[@]}"
  if ((START)); then systemctl restart "${units[@]}"; fi
  echo "[install] ${#GPU_MODELS[@]} workers ($MODELS); gateway 0.0.0.0:7000 (TLS), metrics :9100;" \
    "Prometheus http://127.0.0.1:9090"
  echo "[install] status: systemctl status 'tandem-*'; logs: journalctl -u tandem-gateway -f"
  echo "[install] API keys: edit /etc/tandem/tenants.yaml (echo -n KEY | tandemctl hash-key)"
else
  echo "[install] installed under $DESTDIR (no user created, systemctl not run)"
fi
