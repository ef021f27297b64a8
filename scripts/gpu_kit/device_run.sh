#!/usr/bin/env bash
# The GPU machine's one command (docs/gpu-kit.md): from the root of the work tree the device tool
# copied, with build-gpu-kit-pack carried, unpacks the kit, runs it, and leaves what it wrote
# under $OUT as summary.md and one archive, kit-run.tgz (the tool returns a limited number of
# files). Arguments go to run.sh (--day-one); TANDEM_KIT_BUDGET_SECONDS as run.sh reads it.
#
#   bash scripts/gpu_kit/device_run.sh            # every step
#   bash scripts/gpu_kit/device_run.sh --day-one  # the device facts and the day-one table
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
OUTDIR=${OUT:?set OUT to the folder whose files come back}
PACK=$ROOT/build-gpu-kit-pack/kit.tar.xz
if [[ ! -f $PACK ]]; then
  echo "no $PACK: build it with bash scripts/gpu_kit.sh and carry build-gpu-kit-pack" >&2
  exit 2
fi
tar -C "$ROOT" -xJf "$PACK" || exit 2
RUN=$(mktemp -d)/kit
bash "$ROOT/build-gpu-kit/run.sh" "$@" "$RUN"
rc=$?
{
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
} >"$RUN/versions.txt"
mkdir -p "$OUTDIR"
# The transformers step's checkpoints (work/) are gigabytes: everything else comes back.
tar -C "$RUN" --exclude=./work -czf "$OUTDIR/kit-run.tgz" .
cp "$RUN/summary.md" "$OUTDIR/" 2>/dev/null
cat "$RUN/summary.md" 2>/dev/null
exit "$rc"
