#!/usr/bin/env bash
# Multi-GPU data parallelism on a machine with 2+ NVIDIA GPUs (issue 19): builds hla with NCCL into
# build-dist, then
#   0. the data-parallel tests (tests/test_gpu_dist.cpp: NCCL with one rank equals the one-process
#      path bit for bit on GPU 0; tests/test_dist.cpp: the CPU thread-rank tests);
#   1. the loss test: the first 20 losses of `hla train --gpus 2` against `--gpus 1` with the same
#      global batch (16 sequences of 512 tokens per update, grad_accum 1), for the 374M Transformer
#      and the Gated DeltaNet 3:1 hybrid: fp32 within 1e-5 relative, bf16 within 0.03 absolute;
#      and --train.zero 1 (ZeRO-1) against plain --gpus 2 in fp32 (within 1e-5 relative);
#   2. resume on 2 GPUs: 5 steps, checkpoint, resumed to 10 equals 10 straight bit for bit;
#   3. the scaling bench: `hla bench train --models transformer-374m,gdn-3:1-4x256 --gpus 1,2`
#      (weak scaling, 8 x 2048 tokens per GPU,
#      bf16): passes at speedup >= 1.9x for both models.
# Writes $OUT/dist-check.md (the tables) and every log to $OUT (else build-dist/logs). Exits non-zero
# when the build or a check fails. NCCL: from the nvidia-nccl Python wheel when it is installed,
# else the CUDA toolkit or the system (NCCL_ROOT=... overrides). Extra cmake flags: CMAKE_FLAGS.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD=build-dist
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
REPORT=$LOGS/dist-check.md

gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -lt 2 ]; then
  echo "*** dist-check SKIPPED: it needs 2 GPUs, nvidia-smi lists $gpus; nothing was run ***"
  exit 0
fi
export NCCL_NVLS_ENABLE=0
NCCL_ROOT=${NCCL_ROOT:-$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null)}
echo "dist-check: building into $BUILD with NCCL from ${NCCL_ROOT:-the CUDA toolkit or the system} (log: $LOGS/build.log)"
# shellcheck disable=SC2086  # CMAKE_FLAGS holds several flags
if ! { cmake -S . -B "$BUILD" -DHLA_CUDA=ON -DHLA_CUDA_ARCH=90a -DHLA_NCCL=ON ${NCCL_ROOT:+-DHLA_NCCL_ROOT=$NCCL_ROOT} \
         ${CMAKE_FLAGS:-} && cmake --build "$BUILD" -j "$(nproc)"; } >"$LOGS/build.log" 2>&1; then
  tail -n 40 "$LOGS/build.log"
  echo "dist-check: BUILD FAILED"
  exit 1
fi
HLA=$BUILD/hla
status=0

# 0. the data-parallel tests: NCCL with one rank on GPU 0 must equal the one-process path bit for
#    bit (tests/test_gpu_dist.cpp), and the CPU thread-rank tests (tests/test_dist.cpp)
echo "dist-check: tests (log: $LOGS/tests.log)"
if ! "$BUILD/hla_tests" --source-file='*test_gpu_dist.cpp,*test_dist.cpp' >"$LOGS/tests.log" 2>&1; then
  tail -n 30 "$LOGS/tests.log"
  echo "dist-check: TESTS FAILED"
  status=1
fi

# run NAME GPUS DTYPE MODEL_CONFIG HYBRID [extra flags]: 20 steps, 16 x 512 tokens per update
run() {
  local name=$1 n=$2 dtype=$3 config=$4 hybrid=$5
  shift 5
  "$HLA" train --model.config "$config" ${hybrid:+--model.hybrid "$hybrid"} --gpus "$n" --device cuda \
    --train.dtype "$dtype" --data.source mqar --data.mqar_vocab 8192 --data.seq_len 512 --data.batch_size 16 \
    --train.steps 20 --train.log_every 5 --train.val_every 0 --train.val_batches 0 --optim.lr 3e-4 \
    --optim.schedule constant --train.out_dir "$LOGS/$name" "$@" >"$LOGS/$name.log" 2>&1
}

# compare A B MODE BOUND: prints a table row; MODE rel (max |a-b|/|b|) or abs (max |a-b|)
compare() {
  python3 - "$LOGS/$1/metrics.jsonl" "$LOGS/$2/metrics.jsonl" "$3" "$4" "$1 vs $2" <<'PY'
import json, sys
a_path, b_path, mode, bound, label = sys.argv[1:6]
load = lambda p: [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
a, b = load(a_path), load(b_path)
if len(a) != 20 or len(b) != 20:
    print(f"| {label} | {mode} | - | {bound} | FAIL ({len(a)} and {len(b)} losses, 20 expected) |"); sys.exit(1)
d = max((abs(x - y) / abs(y)) if mode == "rel" else abs(x - y) for x, y in zip(a, b))
ok = d <= float(bound)
print(f"| {label} | {mode} | {d:.3g} | {bound} | {'pass' if ok else 'FAIL'} |"); sys.exit(0 if ok else 1)
PY
}

{
  echo "# dist-check on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $gpus"
  echo
  echo "## First 20 losses, --gpus 2 against --gpus 1 (same global batch: 16 x 512 tokens per update)"
  echo
  echo "| runs | error | measured | bound | result |"
  echo "|---|---|---:|---:|---|"
} >"$REPORT"
for model in "transformer=configs/models/transformer-340m.json=" "gdn31=configs/models/gated_deltanet-340m.json=3:1"; do
  IFS="=" read -r name config hybrid <<<"$model"
  for dtype in f32 bf16; do
    echo "dist-check: $name $dtype: --gpus 1 and --gpus 2"
    run "$name-$dtype-gpus1" 1 "$dtype" "$config" "$hybrid" || { echo "run failed: $LOGS/$name-$dtype-gpus1.log"; status=1; }
    run "$name-$dtype-gpus2" 2 "$dtype" "$config" "$hybrid" || { echo "run failed: $LOGS/$name-$dtype-gpus2.log"; status=1; }
    if [ "$dtype" = f32 ]; then bound=1e-5 mode=rel; else bound=0.03 mode=abs; fi
    compare "$name-$dtype-gpus2" "$name-$dtype-gpus1" $mode $bound >>"$REPORT" || status=1
  done
  echo "dist-check: $name f32: --gpus 2 --train.zero 1"
  run "$name-f32-gpus2-zero1" 2 f32 "$config" "$hybrid" --train.zero 1 || { echo "run failed: $LOGS/$name-f32-gpus2-zero1.log"; status=1; }
  compare "$name-f32-gpus2-zero1" "$name-f32-gpus2" rel 1e-5 >>"$REPORT" || status=1
done

# Resume on 2 GPUs: 5 steps + checkpoint, then resumed to step 10, against 10 steps straight (a
# constant schedule, so the lr does not depend on [train] steps): steps 6-10 equal bit for bit.
echo "dist-check: resume with --gpus 2"
resume_run() {  # NAME STEPS [flags]
  local name=$1 steps=$2
  shift 2
  "$HLA" train --model.config configs/models/gated_deltanet-340m.json --model.hybrid 3:1 --gpus 2 --device cuda \
    --data.source mqar --data.mqar_vocab 8192 --data.seq_len 512 --data.batch_size 16 --train.steps "$steps" \
    --train.val_every 0 --train.val_batches 0 --optim.lr 3e-4 --optim.schedule constant \
    --train.out_dir "$LOGS/$name" "$@" >"$LOGS/$name.log" 2>&1
}
{ echo; echo "## Resume on 2 GPUs (steps 6-10 after a checkpoint at 5, against 10 straight)"; echo; } >>"$REPORT"
if resume_run resume-straight 10 && resume_run resume-first 5 &&
   resume_run resume-second 10 --resume "$LOGS/resume-first/checkpoint"; then
  python3 - "$LOGS/resume-straight/metrics.jsonl" "$LOGS/resume-second/metrics.jsonl" >>"$REPORT" <<'PY' || status=1
import json, sys
load = lambda p: {j["step"]: j["loss"] for j in map(json.loads, open(p)) if "loss" in j}
a, b = load(sys.argv[1]), load(sys.argv[2])
same = all(a.get(s) == b.get(s) and a.get(s) is not None for s in range(6, 11))
print(f"- steps 6-10: {'bit-exact: pass' if same else 'FAIL'} (straight {[a.get(s) for s in range(6, 11)]}, resumed {[b.get(s) for s in range(6, 11)]})")
sys.exit(0 if same else 1)
PY
else
  echo "- resume runs FAILED: see $LOGS/resume-*.log" >>"$REPORT"
  status=1
fi

echo "dist-check: hla bench train --models transformer-374m,gdn-3:1-4x256 --gpus 1,2 (log: $LOGS/bench-train.log)"
{ echo; echo "## Scaling"; echo; } >>"$REPORT"
if "$HLA" bench train --models transformer-374m,gdn-3:1-4x256 --gpus 1,2 --out "$LOGS/bench-train" >"$LOGS/bench-train.log" 2>&1; then
  cat "$LOGS/bench-train/train_bench.md" >>"$REPORT"
  python3 - "$LOGS/bench-train/train_bench.json" >>"$REPORT" <<'PY' || status=1
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["gpus"] == 2]
bad = [r for r in rows if r["speedup"] < 1.9]
print()
for r in rows: print(f"- {r['model']}: {r['speedup']:.2f}x on 2 GPUs ({'pass' if r['speedup'] >= 1.9 else 'FAIL'}, target >= 1.9x)")
sys.exit(1 if bad or not rows else 0)
PY
else
  echo "bench train FAILED: see $LOGS/bench-train.log" >>"$REPORT"
  status=1
fi
cat "$REPORT"
exit $status
