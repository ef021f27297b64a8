#!/usr/bin/env bash
# ctest systemd_install_engine_check: install.sh refuses to install workers without a chosen
# engine (the worker binary's default is the load simulator), and says what to do: no
# --checkpoint-dir / --engine, a missing or unreadable checkpoint, contradictory flags, a kept
# worker-N.env naming no engine. A refused install writes nothing. Runs install.sh with --destdir
# into a scratch root and stub binaries (no build needed, nothing touches the system).
#   install_engine_test.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for bin in workers/tandem-worker gateway/tandem-gateway tools/tandemctl; do
  mkdir -p "$TMP/build/$(dirname "$bin")"
  printf '#!/bin/sh\nexit 0\n' >"$TMP/build/$bin"
  chmod +x "$TMP/build/$bin"
done
for m in qwen nemotron; do mkdir -p "$TMP/models/$m"; echo '{}' >"$TMP/models/$m/config.json"; done
fails=0
n=0

# refuses NAME WANT_IN_STDERR ARGS...: install.sh exits non-zero, prints WANT, writes nothing new
# (into $ROOT if set, else a fresh scratch root).
refuses() {
  local name=$1 want=$2; shift 2
  n=$((n + 1))
  local root=${ROOT:-$TMP/r$n} before=""
  if [[ -d "$root" ]]; then before=$(find "$root" | sort); fi
  if bash "$HERE/install.sh" --build-dir="$TMP/build" --destdir="$root" "$@" >"$TMP/out" 2>"$TMP/err"; then
    echo "FAIL $name: install.sh succeeded"; fails=$((fails + 1)); return
  fi
  if ! grep -qF -- "$want" "$TMP/err"; then
    echo "FAIL $name: stderr lacks '$want':"; cat "$TMP/err"; fails=$((fails + 1)); return
  fi
  if [[ "$(if [[ -d "$root" ]]; then find "$root" | sort; fi)" != "$before" ]]; then
    echo "FAIL $name: a refused install wrote files"; fails=$((fails + 1)); return
  fi
  echo "ok   $name: $(head -c 160 "$TMP/err")"
}
# installs NAME ROOT ARGS...: install.sh succeeds into ROOT.
installs() {
  local name=$1 root=$2; shift 2
  if ! bash "$HERE/install.sh" --build-dir="$TMP/build" --destdir="$root" "$@" >"$TMP/out" 2>&1; then
    echo "FAIL $name: install.sh failed:"; cat "$TMP/out"; fails=$((fails + 1)); return 1
  fi
  echo "ok   $name"
}
# has NAME FILE LINE: FILE holds exactly the line LINE.
has() {
  grep -qxF -- "$3" "$2" || { echo "FAIL $1: $2 lacks '$3'"; fails=$((fails + 1)); }
}

refuses "no engine chosen" "no engine chosen"
refuses "no engine, other models" "--checkpoint-dir=DIR" --models=qwen,qwen
refuses "checkpoint missing" "$TMP/none/qwen/config.json" --checkpoint-dir="$TMP/none"
mkdir -p "$TMP/half/qwen" && echo '{}' >"$TMP/half/qwen/config.json"
refuses "one checkpoint missing" "no checkpoint for nemotron (GPU 1)" --checkpoint-dir="$TMP/half"
refuses "checkpoint relative" "must be absolute" --checkpoint-dir=models
refuses "checkpoint under /home" "ProtectHome" --checkpoint-dir=/home/someone/models
refuses "native without checkpoint" "--engine=native needs --checkpoint-dir" --engine=native
refuses "synthetic with checkpoint" "--checkpoint-dir is for --engine=native" \
  --engine=synthetic --checkpoint-dir="$TMP/models"
refuses "unknown engine" "expected native" --engine=vllm

# A kept worker-N.env from an older install that left the engine to the default.
mkdir -p "$TMP/old/etc/tandem"
printf 'TANDEM_MODEL=qwen\nTANDEM_WORKER_ARGS=\n' >"$TMP/old/etc/tandem/worker-0.env"
ROOT="$TMP/old" refuses "kept env file without engine" "worker-0.env names no engine" \
  --checkpoint-dir="$TMP/models"

# Accepted: the native engine on the checkpoints, written into the env files.
if installs "native" "$TMP/native" --checkpoint-dir="$TMP/models/"; then
  has native "$TMP/native/etc/tandem/worker-0.env" "TANDEM_ENGINE=native"
  has native "$TMP/native/etc/tandem/worker-0.env" "TANDEM_CHECKPOINT=$TMP/models/qwen"
  has native "$TMP/native/etc/tandem/worker-1.env" "TANDEM_CHECKPOINT=$TMP/models/nemotron"
  # Re-installing keeps the env files, which name the engine: no flag needed.
  installs "re-install keeps the engine" "$TMP/native" || true
  has re-install "$TMP/native/etc/tandem/worker-1.env" "TANDEM_ENGINE=native"
  # A third GPU needs a new env file, hence an engine again.
  ROOT="$TMP/native" refuses "new GPU without engine" "no engine chosen" --models=qwen,nemotron,qwen
fi
# Accepted: the load simulator when asked for by name, with a warning.
if installs "synthetic" "$TMP/synthetic" --engine=synthetic; then
  has synthetic "$TMP/synthetic/etc/tandem/worker-1.env" "TANDEM_ENGINE=synthetic"
  has synthetic "$TMP/synthetic/etc/tandem/worker-1.env" "TANDEM_CHECKPOINT="
  grep -q "LOAD SIMULATOR" "$TMP/out" || { echo "FAIL synthetic: no warning"; fails=$((fails + 1)); }
fi
# An older install's env file with --engine in its extra flags is kept as it is.
mkdir -p "$TMP/legacy/etc/tandem"
printf 'TANDEM_MODEL=qwen\nTANDEM_WORKER_ARGS="--engine=native --checkpoint=/srv/qwen"\n' \
  >"$TMP/legacy/etc/tandem/worker-0.env"
installs "kept env file with --engine in its flags" "$TMP/legacy" --models=qwen || true

# The unit takes the engine from the env file and has no default of its own.
U="$HERE/tandem-worker@.service"
grep -qF -- "--engine=\${TANDEM_ENGINE} --checkpoint=\${TANDEM_CHECKPOINT} " "$U" ||
  { echo "FAIL unit: ExecStart does not pass --engine=\${TANDEM_ENGINE} --checkpoint=\${TANDEM_CHECKPOINT}"; fails=$((fails + 1)); }
grep -qx 'Environment=TANDEM_ENGINE=' "$U" ||
  { echo "FAIL unit: TANDEM_ENGINE must default to empty (the worker refuses --engine=)"; fails=$((fails + 1)); }

if ((fails)); then echo "$fails check(s) failed"; exit 1; fi
echo "install.sh requires an engine: OK"
