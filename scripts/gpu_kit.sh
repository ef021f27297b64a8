#!/usr/bin/env bash
# Builds the GPU kit, build-gpu-kit/ (docs/gpu-kit.md): the gpu tests, cuda_benchmark, a CUDA
# tandem-worker, tandem-worker-client and tandem-make-checkpoint for sm_90 (H100/H200), with
# every library they need except the GPU machine's driver and cuBLAS, glibc and its loader
# included, plus run.sh and the CPU engine's reference answers for the end-to-end step. The kit
# travels inside the work tree to a GPU machine that has none of Debian's libraries.
#
#   bash scripts/gpu_kit.sh        then, on the GPU machine, from the work tree's root:
#                                  tar xJf build-gpu-kit-pack/kit.tar.xz && bash build-gpu-kit/run.sh OUTDIR
#
# Environment: TANDEM_GPU_KIT_BUILD_DIR (CMake build, default build-gpu-kit-obj),
# TANDEM_GPU_KIT_JOBS (default: all cores), TANDEM_CACHE (default ~/.cache/tandem: a kit built from
# the same inputs is reused from there, see kit_inputs below).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
KIT=$ROOT/build-gpu-kit
OBJ=${TANDEM_GPU_KIT_BUILD_DIR:-$ROOT/build-gpu-kit-obj}
JOBS=${TANDEM_GPU_KIT_JOBS:-$(nproc)}
PACK=$ROOT/build-gpu-kit-pack/kit.tar.xz
# What travels to the GPU machine, the work tree plus the packed kit, must stay under the device
# tool's 64 MiB; 4 MiB are left for the tree to grow.
MAX_TRAVEL_BYTES=$((60 * 1024 * 1024))
MAX_TOKENS=16
# Every test labelled gpu in tests/CMakeLists.txt, as `tandem_test(NAME ... LABELS gpu)`.
mapfile -t GPU_TESTS < <(python3 -c '
import re, sys
text = open(sys.argv[1]).read()
for m in re.finditer(r"tandem_test\(\s*(\w+)([^)]*)\)", text):
    if re.search(r"LABELS\s+gpu\b", m.group(2)):
        print(m.group(1))' "$ROOT/tests/CMakeLists.txt")
BINARIES=("${GPU_TESTS[@]}" cuda_benchmark tandem-worker tandem-worker-client
  tandem-make-checkpoint tandem-kit-probe tandem-bench)
# Found on the GPU machine, never shipped: the driver, and cuBLAS (about 600 MB).
HOST_LIBS='^(libcuda\.so|libnvidia-|libcublas\.so|libcublasLt\.so)'
start=$SECONDS

bash "$ROOT/scripts/setup.sh"
NVCC=${CUDACXX:-/usr/local/cuda/bin/nvcc}
if [[ ! -x $NVCC ]]; then
  echo "[gpu-kit] needs the CUDA toolkit's nvcc ($NVCC); the kit is the CUDA build" >&2
  exit 1
fi

# Everything the kit is built from: the sources (not docs, deploy files, examples or fuzzers), the
# work tree's path (the source link below is named after it), the compilers and the installed
# Debian packages (the kit links their static libraries). A fresh clone of an unchanged tree
# reuses the kit a previous clone built instead of spending minutes on the same static links.
kit_inputs() {
  (
    cd "$ROOT"
    echo "$ROOT"
    "$NVCC" --version
    g++ --version
    dpkg-query -W -f '${Package} ${Version}\n'
    git ls-files -z --cached --others --exclude-standard | sort -zu |
      grep -zv -E '^(docs/|deploy/|examples/|fuzz/|\.ci/)|\.md$' |
      while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
      xargs -0 sha256sum
  ) | sha256sum | cut -c1-16
}
KIT_CACHE=${TANDEM_CACHE:-$HOME/.cache/tandem}/gpu-kit
KEY=$(kit_inputs)

# The test binaries have their source directory compiled in (they read tests/golden through it;
# TANDEM_TEST_SOURCE_DIR). The kit's is a link whose name is fixed per work tree: run.sh points
# the same name at the work tree's copy on the GPU machine, wherever that copy lands.
SOURCE_LINK=/tmp/tandem-gpu-kit-src-$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)
ln -sfn "$ROOT" "$SOURCE_LINK"

# pack_kit: build-gpu-kit-pack/kit.tar.xz, the kit as it travels (about a quarter of its size),
# checked against what the work tree leaves of the limit. `pack_kit CACHED`: a kit reused from the
# cache reuses its pack too, kept beside it (xz takes about 50 CPU-seconds), where there is one.
pack_kit() {
  local tree pack cached=${1:-}
  mkdir -p "$(dirname "$PACK")"
  if [[ -n $cached && -f $cached ]]; then
    cp "$cached" "$PACK"
  else
    tar -C "$ROOT" -cf - build-gpu-kit | xz -T0 -6 >"$PACK.tmp"
    mv "$PACK.tmp" "$PACK"
  fi
  tree=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  pack=$(stat -c %s "$PACK")
  echo "[gpu-kit] $PACK: $((pack / 1048576)) MiB; with the work tree ($((tree / 1048576)) MiB)" \
    "$(((tree + pack) / 1048576)) MiB of the $((MAX_TRAVEL_BYTES / 1048576)) MiB that may travel"
  if ((tree + pack > MAX_TRAVEL_BYTES)); then
    echo "[gpu-kit] the work tree and the packed kit are over the limit; the kit's largest files:" >&2
    du -ab "$KIT" | sort -rn | head -15 >&2
    return 1
  fi
}

# keep_pack: the pack beside its kit in the cache, for the next reuse.
keep_pack() {
  if [[ ! -f $KIT_CACHE/$KEY.tar.xz ]]; then
    cp "$PACK" "$KIT_CACHE/$KEY.tar.xz.tmp"
    mv "$KIT_CACHE/$KEY.tar.xz.tmp" "$KIT_CACHE/$KEY.tar.xz"
  fi
}

if [[ -f $KIT_CACHE/$KEY/manifest.json ]]; then
  echo "[gpu-kit] inputs unchanged since the kit in $KIT_CACHE/$KEY: reusing it"
  rm -rf "$KIT"
  cp -a "$KIT_CACHE/$KEY" "$KIT"
  mkdir -p "$OBJ"
  bash "$KIT/run.sh" --cpu-e2e "$OBJ/cpu-e2e"
  pack_kit "$KIT_CACHE/$KEY.tar.xz"
  keep_pack
  echo "[gpu-kit] $KIT: reused and checked in $((SECONDS - start)) s"
  exit 0
fi

mkdir -p "$OBJ"
g++ -std=c++20 -O2 -fPIC -c "$ROOT/scripts/gpu_kit/kit_shims.cc" -o "$OBJ/kit_shims.o"
rm -f "$OBJ/libtandem_kit_shims.a"
ar rcs "$OBJ/libtandem_kit_shims.a" "$OBJ/kit_shims.o"
echo "[gpu-kit] configuring $OBJ (sm_90, static third-party libraries)"
# The main build's type, flags and unity batches (CI's main build is a unity build), from the same
# source path: every C++ compile here is then a ccache hit of that build's (CMakeLists.txt), only
# the links, the sm_90 device code and the tests' source path (the link above) are the kit's own.
# A unity build takes about half the time; with whole libraries in a few objects, the static
# links would then pull in everything, so sections are per function (CMakeLists.txt) and unused
# ones dropped. Binaries are stripped when the kit is assembled.
if [[ -f $OBJ/CMakeCache.txt ]] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$OBJ/CMakeCache.txt"; then
  rm -rf "$OBJ/CMakeCache.txt" "$OBJ/CMakeFiles"  # configured from another source path before
fi
cmake -S "$ROOT" -B "$OBJ" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON \
  -DTANDEM_TEST_SOURCE_DIR="$SOURCE_LINK" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--gc-sections" \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_SKIP_BUILD_RPATH=ON \
  -DTANDEM_UPSTREAM_ENGINE=OFF -DTANDEM_LLD=OFF \
  "-DCMAKE_CXX_LINKER_LAUNCHER=python3;$ROOT/scripts/gpu_kit/static_link.py;--shims=$OBJ/libtandem_kit_shims.a" \
  >"$OBJ/configure.log"
# Not shipped: the CPU reference tool, and three suites that check the kit's two stand-ins (the
# reference BLAS for OpenBLAS, an empty ICU data table) change no result: the tokenizer against
# its expected ids, both CPU models against the golden logits.
SUBSTITUTION_TESTS=(tokenizer_test cpu_qwen35_test cpu_nemotron_h_test)
cmake --build "$OBJ" -j "$JOBS" --target "${BINARIES[@]}" tandem-kit-reference \
  "${SUBSTITUTION_TESTS[@]}"
build_seconds=$((SECONDS - start))
for t in "${SUBSTITUTION_TESTS[@]}"; do
  "$OBJ/tests/$t" --gtest_brief=1 >"$OBJ/$t.log" 2>&1 ||
    { cat "$OBJ/$t.log" >&2; echo "[gpu-kit] $t failed with the kit's libraries" >&2; exit 1; }
done

echo "[gpu-kit] assembling $KIT"
rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/libexec" "$KIT/lib" "$KIT/e2e"
for b in "${BINARIES[@]}"; do
  path=$(find "$OBJ" -name "$b" -type f -perm -u+x -not -path '*/CMakeFiles/*' | head -1)
  [[ -n $path ]] || { echo "[gpu-kit] $b was not built" >&2; exit 1; }
  strip --strip-all -o "$KIT/libexec/$b" "$path"
  # Every binary starts through the kit's own loader and glibc, whatever the machine's are.
  cat >"$KIT/bin/$b" <<EOF
#!/usr/bin/env bash
# Starts $b through the kit's own dynamic loader and glibc (docs/gpu-kit.md); run.sh adds the
# GPU machine's cuBLAS and driver directories in TANDEM_KIT_LIBRARY_PATH.
set -euo pipefail
kit=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)
exec "\$kit/lib/ld-linux-x86-64.so.2" --library-path "\$kit/lib\${TANDEM_KIT_LIBRARY_PATH:+:\$TANDEM_KIT_LIBRARY_PATH}" \\
  --argv0 "\$0" "\$kit/libexec/$b" "\$@"
EOF
  chmod +x "$KIT/bin/$b"
done

# The shared libraries the binaries resolve here (Debian ships them stripped), except the GPU
# machine's own; glibc's loader and libraries always, as the wrappers start through them;
# libgcc_s for cuBLAS.
copy_lib() {
  local name
  name=$(basename "$1")
  [[ -e $KIT/lib/$name ]] || cp -L "$1" "$KIT/lib/$name"
}
for b in "$KIT"/libexec/*; do
  while read -r lib; do
    [[ $(basename "$lib") =~ $HOST_LIBS ]] || copy_lib "$lib"
  done < <(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
done
for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 \
  libgcc_s.so.1; do
  copy_lib "/lib/x86_64-linux-gnu/$lib"
done

# The end-to-end step's inputs: the golden checkpoints with a small tokenizer, a few prompts,
# and the CPU engine's greedy answers to them.
cp "$ROOT/scripts/gpu_kit/run.sh" "$KIT/run.sh"
printf '%s\n' "${GPU_TESTS[@]}" >"$KIT/gpu_tests"
cp "$ROOT/scripts/gpu_kit/prompts.jsonl" "$KIT/e2e/prompts.jsonl"
echo "$MAX_TOKENS" >"$KIT/e2e/max_tokens"
python3 "$ROOT/scripts/gpu_kit/tiny_tokenizer.py" "$ROOT/tests/tokenizer/qwen3/tokenizer.json" \
  "$KIT/e2e/tokenizer.json"
for pair in qwen:qwen3_5_moe nemotron:nemotron_h; do
  model=${pair%%:*} arch=${pair#*:}
  ckpt="$OBJ/e2e/$model"
  mkdir -p "$ckpt"
  cp "$ROOT/tests/golden/$arch/config.json" "$ROOT/tests/golden/$arch/model.safetensors" \
    "$KIT/e2e/tokenizer.json" "$ckpt/"
  "$(find "$OBJ" -name tandem-kit-reference -type f -not -path '*/CMakeFiles/*' | head -1)" \
    --checkpoint="$ckpt" --prompts="$KIT/e2e/prompts.jsonl" --max_tokens="$MAX_TOKENS" \
    >"$KIT/e2e/$model.reference.jsonl"
done

cat >"$KIT/manifest.json" <<EOF
{
  "commit": "$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo "+local changes")",
  "built_utc": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "source_link": "$SOURCE_LINK",
  "inputs": "$KEY",
  "cuda_architectures": "sm_90",
  "nvcc": "$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')",
  "build_seconds": $build_seconds,
  "binaries": [$(printf '"%s",' "${BINARIES[@]}" | sed 's/,$//')]
}
EOF

# The kit serves here: the CPU engine through the kit's own loader, worker and client must
# stream exactly the reference answers.
echo "[gpu-kit] checking the kit: CPU worker end to end against the reference answers"
bash "$KIT/run.sh" --cpu-e2e "$OBJ/cpu-e2e"

pack_kit
size=$(du -sb "$KIT" | cut -f1)
echo "[gpu-kit] $KIT: $((size / 1048576)) MiB ($size bytes), built in $((SECONDS - start)) s"
# Kept for the next build from the same inputs; only the newest two kits stay (about 70 MiB each).
mkdir -p "$KIT_CACHE"
rm -rf "${KIT_CACHE:?}/$KEY" "$KIT_CACHE/$KEY.tmp" "$KIT_CACHE/$KEY.tar.xz"
cp -a "$KIT" "$KIT_CACHE/$KEY.tmp"
keep_pack
mv -T "$KIT_CACHE/$KEY.tmp" "$KIT_CACHE/$KEY"
for old in $(ls -1dt "$KIT_CACHE"/*/ | tail -n +3); do rm -rf "$old" "${old%/}.tar.xz"; done
