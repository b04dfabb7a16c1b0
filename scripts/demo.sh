#!/usr/bin/env bash
# `make demo`: trains three models of matched size on MQAR on the CPU with the settings of
# configs/mqar-demo.toml (d 64, 2 layers, Muon, WSD) and prints one table:
#   pure linear (Gated DeltaNet, "LL"), the Gated DeltaNet hybrid ("LA"), a Transformer ("AA").
# The question is the papers' one: recall under a fixed state size. Whatever the table shows is
# reported as it is. `make demo` has built $BUILD/hla already. Extra arguments go to every
# `hla train` (e.g. --train.steps 100).
#
# The three runs are independent, so DEMO_JOBS of them (default: one per core, at most 3) train
# at once, each with HLA_CPU_THREADS = cores / DEMO_JOBS threads (at least 1) unless that is set.
# A run's "wall s" is its own, while it shared the cores; the last line is the whole demo's.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-runs/mqar-demo}
STEPS=${STEPS:-300}
HLA="$BUILD/hla"
[ -x "$HLA" ] || { echo "demo: $HLA not found; run 'make' first" >&2; exit 1; }
cores=$(nproc)
DEMO_JOBS=${DEMO_JOBS:-$(( cores < 3 ? cores : 3 ))}
[[ "$DEMO_JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "demo: DEMO_JOBS must be a whole number >= 1, got '$DEMO_JOBS'" >&2; exit 1; }
export HLA_CPU_THREADS=${HLA_CPU_THREADS:-$(( cores / DEMO_JOBS > 0 ? cores / DEMO_JOBS : 1 ))}
mkdir -p "$OUT"

specs=("pure|pure linear (GDN)" "2:1|GDN hybrid" "transformer|Transformer")

# train_one HYBRID DIR [ARGS]: one run; its log in DIR/train.log, its exit status in DIR/status,
# its wall seconds in DIR/seconds.
train_one() {
  local start rc=0
  start=$(date +%s)
  "$HLA" train --config configs/mqar-demo.toml --model.hybrid "$1" --train.steps "$STEPS" \
    --train.out_dir "$2" "${@:3}" > "$2/train.log" 2>&1 || rc=$?
  echo $(( $(date +%s) - start )) > "$2/seconds"
  echo "$rc" > "$2/status"
}

demo_start=$(date +%s)
for spec in "${specs[@]}"; do
  hybrid=${spec%%|*}
  dir="$OUT/${hybrid/:/-}"
  mkdir -p "$dir"
  rm -f "$dir/status"
  while [ "$(jobs -pr | wc -l)" -ge "$DEMO_JOBS" ]; do wait -n || true; done
  echo "== demo: training ${spec##*|} (hybrid $hybrid, $STEPS steps; log $dir/train.log) =="
  train_one "$hybrid" "$dir" "$@" &
done
wait

rows=()
failed=0
for spec in "${specs[@]}"; do
  hybrid=${spec%%|*}
  label=${spec##*|}
  dir="$OUT/${hybrid/:/-}"
  if [ "$(cat "$dir/status" 2>/dev/null)" != 0 ]; then
    echo "demo: training $label failed (exit status $(cat "$dir/status" 2>/dev/null || echo unknown)); the end of $dir/train.log:" >&2
    tail -n 20 "$dir/train.log" >&2
    failed=1
    continue
  fi
  echo "== demo: $label =="
  grep -E '^(model|params|val |final)' "$dir/train.log"
  params=$(grep -E '^params:' "$dir/train.log" | awk '{print $2}')
  pattern=$(grep -E '^model:' "$dir/train.log" | sed -E 's/.*pattern (.*) \(L linear.*/\1/')
  acc=$(grep -E '^final: ' "$dir/train.log" | sed -E 's/.*"val_accuracy":([0-9.eE+-]+).*/\1/')
  rows+=("$(printf '| %-22s | %-7s | %8s | %13.3f | %6s |' "$label" "$pattern" "$params" "$acc" "$(cat "$dir/seconds")")")
done
[ "$failed" = 0 ] || exit 1

echo
echo "== MQAR demo: 64 tokens, 8 key-value pairs, vocab 256, d 64, 2 layers, $STEPS steps, CPU fp32 =="
echo "| model                  | pattern |   params | MQAR val acc  | wall s |"
echo "|------------------------|---------|----------|---------------|--------|"
printf '%s\n' "${rows[@]}"
echo "demo wall time: $(( $(date +%s) - demo_start )) s ($DEMO_JOBS runs at once on $cores cores, $HLA_CPU_THREADS threads each)"
