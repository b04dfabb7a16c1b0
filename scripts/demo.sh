#!/usr/bin/env bash
# `make demo`: trains the MQAR demo run (configs/mqar-demo.toml: a 2-layer Gated DeltaNet +
# attention hybrid) on the CPU and prints its final validation metrics. `make demo` has built
# $BUILD/hla already. Extra arguments go to `hla train` (e.g. --train.steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-runs/mqar-demo}
HLA="$BUILD/hla"
[ -x "$HLA" ] || { echo "demo: $HLA not found; run 'make' first" >&2; exit 1; }
mkdir -p "$OUT"

start=$(date +%s)
"$HLA" train --config configs/mqar-demo.toml --train.out_dir "$OUT" "$@" | tee "$OUT/train.log"
seconds=$(( $(date +%s) - start ))

echo
echo "== MQAR demo (configs/mqar-demo.toml): validation during training, ${seconds} s wall =="
grep -E '^val ' "$OUT/train.log"
grep -E '^final: ' "$OUT/train.log"
