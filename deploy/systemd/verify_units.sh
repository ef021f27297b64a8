#!/usr/bin/env bash
# ctest systemd_units_verify: install.sh into a scratch root, then `systemd-analyze verify` the
# units there (the template as an instance per GPU). Works without systemd running as PID 1.
#   verify_units.sh BUILD_DIR
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Checkpoint directories as install.sh wants them (it checks for config.json; nothing loads them).
for m in qwen nemotron; do mkdir -p "$TMP/models/$m"; echo '{}' >"$TMP/models/$m/config.json"; done
bash "$HERE/install.sh" --build-dir="$BUILD" --models=qwen,nemotron,qwen --checkpoint-dir="$TMP/models" \
  --dev-certs --destdir="$TMP/root"
# Verify copies whose ExecStart points at the installed binaries (systemd-analyze checks they are
# executable; --root would need a whole systemd tree there); /usr/bin/prometheus is Debian's.
V="$TMP/verify"
mkdir -p "$V"
for u in "$TMP"/root/etc/systemd/system/*; do
  sed "s|/usr/local/bin/|$TMP/root/usr/local/bin/|" "$u" >"$V/$(basename "$u")"
done
for i in 0 1 2; do cp "$V/tandem-worker@.service" "$V/tandem-worker@$i.service"; done
out=$(systemd-analyze verify --man=no "$V/tandem.target" "$V/tandem-gateway.service" \
  "$V/tandem-prometheus.service" "$V"/tandem-worker@{0,1,2}.service 2>&1) || {
  echo "$out"; echo "systemd-analyze verify failed"; exit 1; }
# Anything it prints about our units is a finding, even when it exits 0.
if grep -E 'tandem' <<<"$out"; then echo "systemd-analyze verify printed warnings"; exit 1; fi
# What install.sh wrote must match the units' expectations.
grep -qx 'TANDEM_WORKERS=qwen=127.0.0.1:7101,nemotron=127.0.0.1:7102,qwen=127.0.0.1:7103' "$TMP/root/etc/tandem/gateway.env"
grep -qx 'TANDEM_MODEL=nemotron' "$TMP/root/etc/tandem/worker-1.env"
grep -qx 'TANDEM_ENGINE=native' "$TMP/root/etc/tandem/worker-1.env"
grep -qx "TANDEM_CHECKPOINT=$TMP/models/nemotron" "$TMP/root/etc/tandem/worker-1.env"
# The unit names the engine from the env file, with no default of its own, and the worker refuses
# the empty --engine= a file without TANDEM_ENGINE gives it (no silent load simulator).
grep -qF -- "--engine=\${TANDEM_ENGINE} " "$V/tandem-worker@.service"
grep -qx 'Environment=TANDEM_ENGINE=' "$V/tandem-worker@.service"
if timeout 10 "$TMP/root/usr/local/bin/tandem-worker" --model=qwen --device=cpu --engine= >"$TMP/empty-engine.log" 2>&1; then
  echo "tandem-worker started with an empty --engine"; exit 1
fi
grep -q -- '--engine is required' "$TMP/empty-engine.log"
grep -q "targets: \['127.0.0.1:9101', '127.0.0.1:9102', '127.0.0.1:9103'\]" "$TMP/root/etc/tandem/prometheus/prometheus.yml"
promtool check config "$TMP/root/etc/tandem/prometheus/prometheus.yml" >/dev/null
"$TMP/root/usr/local/bin/tandem-gateway" --validate_policy="$TMP/root/etc/tandem/policies/default.yaml" >/dev/null
"$TMP/root/usr/local/bin/tandemctl" tenants lint "$TMP/root/etc/tandem/tenants.yaml" >/dev/null
grep -qx 'TANDEM_TENANTS=/etc/tandem/tenants.yaml' "$TMP/root/etc/tandem/gateway.env"
# The TLS files the units name (from --dev-certs), each chain valid.
T="$TMP/root/etc/tandem/tls"
for d in gateway gateway-client worker; do
  for f in ca.crt tls.crt tls.key; do [[ -s "$T/$d/$f" ]] || { echo "missing $T/$d/$f"; exit 1; }; done
  openssl verify -CAfile "$T/$d/ca.crt" "$T/$d/tls.crt" >/dev/null
done
openssl x509 -in "$T/worker/tls.crt" -noout -ext subjectAltName | grep -q 'DNS:tandem-worker'
# Secure by default: TLS and tenants in ExecStart, no plaintext anywhere.
grep -q -- '--tls_client_ca=' "$V/tandem-worker@.service"
grep -q -- '--tenants=' "$V/tandem-gateway.service"
grep -q -- '--worker_tls_cert=' "$V/tandem-gateway.service"
if grep -E -- '--(plaintext|worker_plaintext|allow_unauthenticated)' "$TMP"/root/etc/tandem/*.env \
    "$V"/*.service | grep -v '^[^:]*:#'; then
  echo "a unit or env file disables TLS or authentication"; exit 1
fi
# Every flag in ExecStart is one the binary defines (its --helpfull, which lists the flags of
# every file linked in: common/server_tls_flags.cc, common/limit_flags.cc...).
"$TMP/root/usr/local/bin/tandem-worker" --helpfull >"$TMP/worker.flags" 2>&1 || true
"$TMP/root/usr/local/bin/tandem-gateway" --helpfull >"$TMP/gateway.flags" 2>&1 || true
python3 - "$TMP" "$V" <<'PY'
import re, sys
tmp, v = sys.argv[1], sys.argv[2]
bad = []
for unit, name in (("tandem-worker@.service", "worker"), ("tandem-gateway.service", "gateway")):
    known = set(re.findall(r"^\s+--(\w+) \(", open(f"{tmp}/{name}.flags").read(), re.M))
    if len(known) < 20:
        sys.exit(f"tandem-{name} --helpfull listed {len(known)} flags")
    start = re.search(r"^ExecStart=(.*)$", open(f"{v}/{unit}").read(), re.M).group(1)
    bad += [f"{unit}: {f}" for f in re.findall(r"--(\w+)=", start) if f not in known]
if bad:
    sys.exit("unknown flags: " + ", ".join(bad))
PY
echo "systemd units verified (3 GPUs)"
