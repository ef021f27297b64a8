#!/usr/bin/env bash
# Installs every Debian package Tandem needs to build, test and run. Idempotent: packages already
# present are skipped, so a second run does no network I/O.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libyaml-cpp-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libcurl4-openssl-dev nlohmann-json3-dev   # gateway: worker scrapes and PromQL queries
  libboost1.81-dev    # gateway: the OpenAI-compatible HTTP front (Boost.Beast, header-only)
  libopenblas-dev libopenblas0-pthread   # native engine: matrix products on the CPU
  libblas-dev libgfortran-12-dev         # GPU kit: static reference BLAS (scripts/gpu_kit.sh)
  libssl-dev openssl  # TLS: certificate checks at start-up; tests make their own certificates
  libicu-dev          # tokenizer: Unicode categories and NFC
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev   # worker: image decoding (workers/vision)
  libgoogle-perftools-dev   # tcmalloc, the gateway's allocator
  prometheus          # promtool, used by the metrics lint tests
  nghttp2-client      # h2load: the second load driver of scripts/bench_overhead.sh
  clang-format
  clang               # libFuzzer targets (scripts/fuzz.sh)
  python3             # builds the classifier's labelled data (router/classifier)
  python3-yaml        # deploy/ checks (compose, Kubernetes manifests)
  python3-numpy ccache   # the llama-server test peer: its tiny model, and its build's cache
  lld                 # the linker of every build but the GPU kit's (CMakeLists.txt, TANDEM_LLD)
  python3-grpcio python3-protobuf   # examples/python, run by tests/integration/clients_test.cc
  docker-compose      # deploy/compose: `docker-compose config` in ctest
  systemd             # deploy/systemd: `systemd-analyze verify` in ctest
)
# deploy/k8s: `kubectl kustomize` in ctest. Debian 12 ships kubectl as kubernetes-client; keep a
# kubectl that is already installed (another package providing it would conflict).
if ! command -v kubectl >/dev/null 2>&1; then PACKAGES+=(kubernetes-client); fi
# examples/node (tests/integration/clients_test.cc): keep a node that is already installed.
if ! command -v node >/dev/null 2>&1; then PACKAGES+=(nodejs npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[setup] all packages present"
fi

# The Node client examples' packages (@grpc/grpc-js, the openai SDK), pinned by its package-lock.json, from npm.
EXAMPLE_NODE="$(dirname "$0")/../examples/node"
if [[ ! -d "$EXAMPLE_NODE/node_modules/@grpc/grpc-js" || ! -d "$EXAMPLE_NODE/node_modules/openai" ]]; then
  echo "[setup] npm ci in examples/node"
  (cd "$EXAMPLE_NODE" && npm ci --no-audit --no-fund --loglevel=error)
fi
