#!/usr/bin/env bash
# Development certificates for Tandem's TLS and mutual TLS, made with the openssl CLI. NOT for
# production: one throwaway CA signs everything and its key sits next to the certificates.
#
#   bash scripts/make_dev_certs.sh [--force] [--readable] [--san=NAME,...] OUT_DIR
#
# Writes, in the layout every deployment under deploy/ reads (cert-manager's Secret key names):
#   OUT_DIR/ca.crt, ca.key             the development CA
#   OUT_DIR/gateway/{ca.crt,tls.crt,tls.key}         gateway server (what clients see)
#   OUT_DIR/gateway-client/{ca.crt,tls.crt,tls.key}  client cert the gateway presents to workers
#   OUT_DIR/worker/{ca.crt,tls.crt,tls.key}          worker server (shared by every worker)
# Each ca.crt is the development CA: clients (tandemctl --tls_ca) trust OUT_DIR/gateway/ca.crt;
# the gateway verifies workers with gateway-client/ca.crt (--worker_tls_ca); workers accept only
# client certs it signed (worker/ca.crt, --tls_client_ca).
# Names (SANs): localhost, 127.0.0.1, ::1 on both server certs; the gateway's also carries
# gateway and tandem-gateway; the worker's carries tandem-worker (give the gateway
# --worker_tls_server_name=tandem-worker when it reaches workers by other names), qwen-worker and
# nemotron-worker (deploy/compose). --san adds DNS names or IPs to both server certs.
# Existing files are kept unless --force. Keys are 0600; --readable makes them 0644, for bind
# mounts into containers running as another uid (deploy/compose) on a single-user dev box.
set -euo pipefail
FORCE=0 READABLE=0 EXTRA="" OUT=""
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --readable) READABLE=1 ;;
    --san=*) EXTRA="${arg#*=}" ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "make_dev_certs.sh: unknown argument $arg" >&2; exit 2 ;;
    *) OUT="$arg" ;;
  esac
done
[[ -n "$OUT" ]] || { echo "usage: make_dev_certs.sh [--force] [--readable] [--san=NAME,...] OUT_DIR" >&2; exit 2; }
command -v openssl >/dev/null || { echo "make_dev_certs.sh: openssl not found" >&2; exit 1; }
if [[ -e "$OUT/worker/tls.crt" && $FORCE == 0 ]]; then
  echo "[certs] $OUT already has certificates (--force replaces them)"
  exit 0
fi
mkdir -p "$OUT/gateway" "$OUT/gateway-client" "$OUT/worker"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
umask 077

sans() {  # sans NAME...: a subjectAltName value (IPs as IP:, the rest as DNS:)
  local out="" n
  for n in "$@" ${EXTRA//,/ }; do
    if [[ "$n" =~ ^[0-9.]+$ || "$n" == *:* ]]; then out+="${out:+,}IP:$n"; else out+="${out:+,}DNS:$n"; fi
  done
  echo "$out"
}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
  -subj "/CN=Tandem development CA" -keyout "$OUT/ca.key" -out "$OUT/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  2>/dev/null

issue() {  # issue DIR CN EKU [SAN]
  local dir=$1 cn=$2 eku=$3 san=${4:-}
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    if [[ -n "$san" ]]; then echo "subjectAltName=$san"; fi
  } >"$TMP/ext.cnf"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$cn" \
    -keyout "$OUT/$dir/tls.key" -out "$TMP/req.csr" 2>/dev/null
  openssl x509 -req -in "$TMP/req.csr" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" -CAcreateserial \
    -CAserial "$TMP/ca.srl" -days 397 -extfile "$TMP/ext.cnf" -out "$OUT/$dir/tls.crt" 2>/dev/null
  cp "$OUT/ca.crt" "$OUT/$dir/ca.crt"
}
issue gateway tandem-gateway serverAuth \
  "$(sans tandem-gateway gateway localhost 127.0.0.1 ::1)"
issue gateway-client tandem-gateway clientAuth
issue worker tandem-worker serverAuth \
  "$(sans tandem-worker qwen-worker nemotron-worker localhost 127.0.0.1 ::1)"

chmod 644 "$OUT"/ca.crt "$OUT"/*/ca.crt "$OUT"/*/tls.crt
if [[ $READABLE == 1 ]]; then chmod 644 "$OUT"/*/tls.key; else chmod 600 "$OUT"/*/tls.key; fi
chmod 600 "$OUT/ca.key"
chmod 755 "$OUT" "$OUT/gateway" "$OUT/gateway-client" "$OUT/worker"
for d in gateway gateway-client worker; do
  openssl verify -CAfile "$OUT/ca.crt" "$OUT/$d/tls.crt" >/dev/null
done
echo "[certs] development CA and gateway, gateway-client, worker certificates in $OUT"
