#!/usr/bin/env bash
# The H200 bench run behind bench/results-h200.json and bench/train-h200.json, on the GPU box:
#   scripts/bench-h200.sh [STAGE...]     stages: build anchors kernels train (default: all, in order)
#   build    cmake + build into build-gpu (CMAKE_PREFIX_PATH defaults to .gpu-prefix when present)
#   anchors  hla bench --list --json (the rows), then scripts/bench_anchors.py times fla's Triton
#            kernels and torch SDPA at each row's shape (fla's source in .fla, or FLA_DIR, needed
#            only by fla's rows: ANCHOR_ARGS="--only wgmma" times SDPA at the wgmma attention rows
#            alone, with torch and no fla, in seconds; ANCHOR_ARGS: more arguments, e.g.
#            "--only gdn --only attention"). With fla's own
#            autotuning (the script's default) the 46 rows' compile pass alone ran past 500 s on
#            the H200 (2026-12-03), before rows sharing an anchor and a shape were compiled and
#            timed once (26 fla anchors): give this stage a call of its own (ANCHOR_SECONDS,
#            default 540), or one a shape (ANCHOR_ARGS="--only D64"), or pass
#            --first-config (about 75 s, but fla's backward then runs 3-6x slower)
#   kernels  hla bench --anchors (those times) --json results-h200.json
#   train    scripts/bench_train_torch.py (PyTorch eager, the 374M Transformer), then
#            hla bench train --gpus 1 --anchors (that) --json train-h200.json (every preset, ~5 min;
#            TRAIN_ARGS: more arguments, e.g. "--models transformer-374m,mqar-small"; TORCH_TRAIN=0
#            skips the PyTorch run, ~1 min, and the Transformer row takes targets.md's figure)
# Every file goes to build-gpu/bench-h200 (kept between calls, so the stages can run in separate
# calls of at most 10 minutes: `build anchors`, then `kernels train`) and is copied to $OUT when
# set: bench-cases.json, bench-anchors.json, results-h200.json, train-torch.json,
# train-h200.json and a log per stage. The commit recorded in
# the JSON: HLA_COMMIT, else `git rev-parse HEAD`, else "unknown" (the GPU box's copy of the tree
# has no .git: pass HLA_COMMIT=$(git rev-parse HEAD) from the machine that sent it).
# A stage that fails says so and the later ones still run; the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUTDIR=$BUILD/bench-h200
FLA_DIR=${FLA_DIR:-.fla}
COMMIT=${HLA_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
mkdir -p "$OUTDIR"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build anchors kernels train)
[ -d .gpu-prefix ] && export CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-$PWD/.gpu-prefix}
export NCCL_NVLS_ENABLE=0 FLA_USE_COMPILE=0
status=0
start=$(date +%s)
say() { echo "[bench-h200 $(( $(date +%s) - start )) s] $*"; }
failed() { say "$1 FAILED (log: $2)"; tail -n 15 "$2"; status=1; }

for stage in "${stages[@]}"; do
  log=$OUTDIR/$stage.log
  say "$stage (commit $COMMIT, log $log)"
  case $stage in
    build)
      { cmake -S . -B "$BUILD" -DHLA_CUDA=ON -DHLA_CUDA_ARCH=90a && cmake --build "$BUILD" -j "$(nproc)"; } >"$log" 2>&1 ||
        failed build "$log" ;;
    anchors)
      { "$BUILD/hla" bench --list --json "$OUTDIR/bench-cases.json" &&
        PYTHONPATH=$FLA_DIR${PYTHONPATH:+:$PYTHONPATH} timeout "${ANCHOR_SECONDS:-540}" python3 scripts/bench_anchors.py \
          "$OUTDIR/bench-cases.json" --out "$OUTDIR/bench-anchors.json" ${ANCHOR_ARGS:-}; } >"$log" 2>&1 || failed anchors "$log"
      tail -n 1 "$log" ;;
    kernels)
      anchors=()
      [ -f "$OUTDIR/bench-anchors.json" ] && anchors=(--anchors "$OUTDIR/bench-anchors.json")
      timeout 400 "$BUILD/hla" bench ${anchors[@]+"${anchors[@]}"} --json "$OUTDIR/results-h200.json" --commit "$COMMIT" \
        >"$log" 2>&1 || failed kernels "$log"
      cat "$log" ;;
    train)
      : >"$log"
      [ "${TORCH_TRAIN:-1}" = 0 ] || timeout 200 python3 scripts/bench_train_torch.py --out "$OUTDIR/train-torch.json" \
        >"$log" 2>&1 || failed "train (torch eager)" "$log"
      anchors=()
      [ -f "$OUTDIR/train-torch.json" ] && anchors=(--anchors "$OUTDIR/train-torch.json")
      timeout 500 "$BUILD/hla" bench train --gpus 1 ${TRAIN_ARGS:-} --out "$OUTDIR/train" ${anchors[@]+"${anchors[@]}"} \
        --json "$OUTDIR/train-h200.json" --commit "$COMMIT" >>"$log" 2>&1 || failed "train (hla)" "$log"
      tail -n 12 "$log" ;;
    *) echo "bench-h200.sh: unknown stage '$stage' (build, anchors, kernels, train)"; exit 2 ;;
  esac
done
if [ -n "${OUT:-}" ]; then
  find "$OUTDIR" -maxdepth 1 -type f -exec cp {} "$OUT"/ \;
  say "done; files in $OUTDIR, copied to $OUT"
else
  say "done; files in $OUTDIR"
fi
exit $status
