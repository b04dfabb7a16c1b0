#!/usr/bin/env bash
# `make demo`: trains three models of matched size on MQAR on the CPU with the settings of
# configs/mqar-demo.toml (d 64, 2 layers, Muon, WSD) and prints one table:
#   pure linear (Gated DeltaNet, "LL"), the Gated DeltaNet hybrid ("LA"), a Transformer ("AA").
# The question is the papers' one: recall under a fixed state size. Whatever the table shows is
# reported as it is. `make demo` has built $BUILD/hla already. Extra arguments go to every
# `hla train` (e.g. --train.steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-runs/mqar-demo}
STEPS=${STEPS:-300}
HLA="$BUILD/hla"
[ -x "$HLA" ] || { echo "demo: $HLA not found; run 'make' first" >&2; exit 1; }
mkdir -p "$OUT"

rows=()
for spec in "pure|pure linear (GDN)" "2:1|GDN hybrid" "transformer|Transformer"; do
  hybrid=${spec%%|*}
  label=${spec##*|}
  dir="$OUT/${hybrid/:/-}"
  mkdir -p "$dir"
  echo "== demo: training $label (hybrid $hybrid, $STEPS steps) =="
  start=$(date +%s)
  "$HLA" train --config configs/mqar-demo.toml --model.hybrid "$hybrid" --train.steps "$STEPS" \
    --train.out_dir "$dir" "$@" | tee "$dir/train.log" | grep -E '^(model|params|val |final)'
  seconds=$(( $(date +%s) - start ))
  params=$(grep -E '^params:' "$dir/train.log" | awk '{print $2}')
  pattern=$(grep -E '^model:' "$dir/train.log" | sed -E 's/.*pattern (.*) \(L linear.*/\1/')
  acc=$(grep -E '^final: ' "$dir/train.log" | sed -E 's/.*"val_accuracy":([0-9.eE+-]+).*/\1/')
  rows+=("$(printf '| %-22s | %-7s | %8s | %13.3f | %6s |' "$label" "$pattern" "$params" "$acc" "$seconds")")
done

echo
echo "== MQAR demo: 64 tokens, 8 key-value pairs, vocab 256, d 64, 2 layers, $STEPS steps, CPU fp32 =="
echo "| model                  | pattern |   params | MQAR val acc  | wall s |"
echo "|------------------------|---------|----------|---------------|--------|"
printf '%s\n' "${rows[@]}"
