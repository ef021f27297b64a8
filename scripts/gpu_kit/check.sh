#!/usr/bin/env bash
# ctest gpu_kit_check: the GPU kit (build-gpu-kit/, made by scripts/gpu_kit.sh) is complete and
# starts without this machine's libraries. Skips (exit 77) when no kit has been built;
# scripts/test.sh builds one first wherever nvcc exists.
#
#   1. ldd, and the kit's own loader's --list, over every kit binary: each library resolves to
#      the kit, or is on the allow-list (glibc, the driver, cuBLAS: the GPU machine's own);
#   2. the packed kit (build-gpu-kit-pack/kit.tar.xz) and the work tree, what travels to the GPU
#      machine, are at most 60 MiB together;
#   3. every binary starts through its wrapper (the kit's loader and glibc), and in an empty root
#      that holds nothing but the kit and cuBLAS (as root);
#   4. run.sh without a CUDA device prints one "no CUDA device" line, writes its summary and
#      exits 0;
#   5. run.sh --cpu-e2e: the kit's worker and client serve the CPU engine's reference answers;
#   6. the kit's cuda_vision_test runs its host-side checks (the vision encoder's patch tables
#      against tests/golden/qwen3_5_moe_vl) through the kit's loader, with no device.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
KIT=${1:-$ROOT/build-gpu-kit}
if [[ ! -x $KIT/run.sh ]]; then
  echo "no GPU kit at $KIT: build it with bash scripts/gpu_kit.sh (scripts/test.sh does)"
  exit 77
fi
KIT=$(cd "$KIT" && pwd -P)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Outside the kit, only the GPU machine's own libraries may resolve.
ALLOWED='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|librt\.so\.1|libpthread\.so\.0|libcuda\.so\.1|libnvidia-.*|libcublas\.so\.13|libcublasLt\.so\.13)$'
failures=()

# "NAME PATH" per resolved library ("NAME not-found" when unresolved) from ldd-style output.
resolved() {
  awk '$2 == "=>" { n = split($1, p, "/"); print p[n], ($3 == "not" ? "not-found" : $3); next }
       $1 ~ /^\// { n = split($1, p, "/"); print p[n], $1; next }
       $1 ~ /^linux-vdso/ { print $1, "vdso" }'
}

echo "== library closure (ldd, and the kit's loader --list)"
for bin in "$KIT"/libexec/*; do
  name=$(basename "$bin")
  for how in ldd loader; do
    if [[ $how == ldd ]]; then
      out=$(ldd "$bin" 2>&1) || { failures+=("$name: ldd failed: $out"); continue; }
    else
      out=$("$KIT/lib/ld-linux-x86-64.so.2" --list --library-path "$KIT/lib" "$bin" 2>&1) ||
        { failures+=("$name: the kit's loader failed: $out"); continue; }
    fi
    inside=()
    outside=()
    while read -r lib path; do
      case $path in
        vdso) ;;
        "$KIT"/*) inside+=("$lib") ;;
        *)
          if [[ $lib =~ $ALLOWED ]]; then
            outside+=("$lib=$path")
          elif [[ $how == ldd && -e $KIT/lib/$lib ]]; then
            # A kit library's own dependency (curl's TLS and Kerberos libraries under
            # tandem-bench): the binary's RUNPATH does not apply to it, so plain ldd finds the
            # system's copy; the wrappers start through the kit's loader, which finds the kit's
            # (the loader pass checks that).
            inside+=("$lib(indirect)")
          else
            failures+=("$name ($how): $lib resolves to $path, outside the kit and not allowed")
          fi
          ;;
      esac
    done < <(resolved <<<"$out")
    echo "$name ($how): kit: ${inside[*]:-none}; allowed outside: ${outside[*]:-none}"
  done
done

echo "== size"
pack=$(dirname "$KIT")/build-gpu-kit-pack/kit.tar.xz
if [[ ! -f $pack || $pack -ot $KIT/manifest.json ]]; then
  failures+=("$pack is missing or older than the kit")
else
  tree=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  size=$(($(stat -c %s "$pack") + tree))
  echo "$pack and the work tree: $size bytes ($((size / 1048576)) MiB; limit 60 MiB)"
  ((size <= 60 * 1024 * 1024)) || failures+=("the packed kit and the work tree are $size bytes, over 60 MiB")
fi

echo "== start-up through the kit's loader"
# The probe exits 0 with a CUDA device and 3 without one; anything else means it did not start.
probe_rc=0
"$KIT/bin/tandem-kit-probe" >/dev/null 2>&1 || probe_rc=$?
((probe_rc == 0 || probe_rc == 3)) || probe_rc=3
for wrapper in "$KIT"/bin/*; do
  name=$(basename "$wrapper")
  case $name in
    *_test) args=(--gtest_list_tests) want=0 ;;
    tandem-kit-probe) args=() want=$probe_rc ;;
    *) args=(--version) want=0 ;;
  esac
  rc=0
  "$wrapper" "${args[@]}" >"$TMP/$name.out" 2>&1 || rc=$?
  if ((rc == want)); then
    echo "$name ${args[*]}: exit $rc"
  else
    failures+=("$name ${args[*]}: exit $rc, expected $want: $(head -c 300 "$TMP/$name.out")")
  fi
done

# The strongest form of the closure check: every binary starts in an empty root holding nothing
# but the kit (and cuBLAS, which the GPU machine provides), so no library of this machine can be
# found by accident. Needs root for chroot.
echo "== start-up in an empty root (chroot: the kit and cuBLAS only)"
if [[ $(id -u) -ne 0 ]] || ! command -v chroot >/dev/null; then
  echo "skipped: needs root and chroot"
else
  root="$TMP/root"
  mkdir -p "$root/kit" "$root/cublas"
  cp -al "$KIT/lib" "$KIT/libexec" "$root/kit/" 2>/dev/null || cp -r "$KIT/lib" "$KIT/libexec" "$root/kit/"
  # awk reads to the end: an early exit would kill ldconfig with SIGPIPE, which pipefail turns
  # into a failure of the whole script whenever ldconfig is still writing (seen under load).
  cublas=$(ldconfig -p | awk '/libcublas\.so\.13 .*x86-64/ && !found {print $NF; found = 1}')
  have_cublas=0
  if [[ -n $cublas ]] && ln "$(readlink -f "$cublas")" "$root/cublas/libcublas.so.13" 2>/dev/null &&
    ln "$(readlink -f "$(dirname "$cublas")/libcublasLt.so.13")" "$root/cublas/libcublasLt.so.13" 2>/dev/null; then
    have_cublas=1
  fi
  for bin in "$KIT"/libexec/*; do
    name=$(basename "$bin")
    case $name in
      *_test) args=(--gtest_list_tests) want=0 ;;
      tandem-kit-probe) args=() want=3 ;;  # no driver in there
      *) args=(--version) want=0 ;;
    esac
    if ((!have_cublas)) && readelf -d "$bin" | grep 'libcublas' >/dev/null; then
      echo "$name: skipped (cuBLAS could not be linked into the empty root)"
      continue
    fi
    rc=0
    chroot "$root" /kit/lib/ld-linux-x86-64.so.2 --library-path /kit/lib:/cublas \
      "/kit/libexec/$name" "${args[@]}" >"$TMP/$name.chroot" 2>&1 || rc=$?
    if ((rc == want)); then
      echo "$name ${args[*]}: exit $rc"
    else
      failures+=("$name in an empty root: exit $rc, expected $want: $(head -c 300 "$TMP/$name.chroot")")
    fi
  done
fi

echo "== run.sh without a CUDA device"
if ((probe_rc == 0)); then
  echo "skipped: this machine has a CUDA device (bash $KIT/run.sh OUTDIR runs the GPU steps)"
else
  rc=0
  bash "$KIT/run.sh" "$TMP/run" >"$TMP/run.out" 2>"$TMP/run.err" || rc=$?
  cat "$TMP/run.out"
  if ((rc != 0)); then
    failures+=("run.sh exited $rc: $(cat "$TMP/run.err")")
  elif [[ $(wc -l <"$TMP/run.out") -ne 1 ]] || ! grep -q '^no CUDA device: ' "$TMP/run.out"; then
    failures+=("run.sh did not print exactly one 'no CUDA device' line")
  fi
  for f in summary.md results.json; do
    [[ -s $TMP/run/$f ]] || failures+=("run.sh wrote no $f")
  done
  python3 -m json.tool "$TMP/run/results.json" >/dev/null 2>&1 ||
    failures+=("run.sh's results.json is not valid JSON")
fi

echo "== run.sh --cpu-e2e (the kit's worker and client on the CPU engine)"
rc=0
bash "$KIT/run.sh" --cpu-e2e "$TMP/cpu" >"$TMP/cpu.out" 2>&1 || rc=$?
cat "$TMP/cpu.out"
if ((rc != 0)); then
  failures+=("run.sh --cpu-e2e exited $rc (its answers are above)")
  cat "$TMP"/cpu/e2e-*.jsonl "$TMP"/cpu/logs/worker-*.log 2>/dev/null | tail -40
fi
python3 -m json.tool "$TMP/cpu/results.json" >/dev/null 2>&1 ||
  failures+=("run.sh --cpu-e2e's results.json is not valid JSON")

echo "== vision: cuda_vision_test's host-side checks through the kit (no device needed)"
# The test binaries read tests/golden through the source link compiled into them (run.sh points
# it at the work tree the kit is in; so does this).
link=$(sed -n 's/.*"source_link": *"\([^"]*\)".*/\1/p' "$KIT/manifest.json")
if [[ -n $link && $(readlink "$link" 2>/dev/null || true) != "$ROOT" ]]; then
  ln -sfn "$ROOT" "$link" 2>/dev/null || true
fi
rc=0
"$KIT/bin/cuda_vision_test" --gtest_filter='VisionPatchTablesTest.*' >"$TMP/vision.out" 2>&1 || rc=$?
tail -3 "$TMP/vision.out"
if ((rc != 0)) || ! grep -q '^\[  PASSED  \] 1 test' "$TMP/vision.out"; then
  failures+=("cuda_vision_test's host-side checks: exit $rc: $(tail -c 300 "$TMP/vision.out")")
fi

if ((${#failures[@]})); then
  echo "== FAILED"
  printf '%s\n' "${failures[@]}"
  exit 1
fi
echo "== ok"
