#!/usr/bin/env bash
# The H200 runs behind the closing evidence of the open issues, stage by stage, for a GPU box
# reached through time-limited calls (about 15 minutes of GPU time in all):
#   build      hla and hla_tests for sm_90a into build-gpu (BUILD_TARGETS="hla": hla alone)
#   ruler      scripts/ruler-h200.sh: RULER's 13 tasks x 100 at 4096 tokens (issue W2.5's
#              2-minute target); run it before the sweeps start, alone on the GPU
#   sweeps     the recipes of configs/sweeps (paper1-mqar, paper1-text, paper2-routing, issue
#              W2.6; RECIPES="paper1-text paper2-routing" picks some) all at once, each with
#              --parallel $PARALLEL (4), started with setsid so that they
#              outlive the call that started them; each one's wall time goes to
#              $EVIDENCE/sweeps/<recipe>.done (sharing the GPU, so an upper bound on its time alone)
#   gpu-check  `hla gpu-check`, every case
#   bench      `hla bench --json` (every kernel row beside targets.md's anchors: the file
#              bench/results-h200.json holds; HLA_COMMIT names the commit, the box's copy has no
#              .git), then ncu's per-kernel times of one fwd+bwd call of the GDN, KDA, GLA and
#              attention rows at B4 T4096 H16 D128 (bench/README.md's table); alone on the GPU
#   stalls     ncu's speed-of-light, occupancy and warp-state sections for one launch of each of the
#              slowest kernels (STALL_KERNELS: "KERNEL@BENCH ROW;..."); alone on the GPU
#   profile-transformer  ncu's per-kernel times of two training steps of the 374M Transformer (a
#              call of its own)
#   profile    ncu's per-kernel times of the MQAR demo's training step, and its steps/s with and
#              without the CUDA graph (issue W2.3's small-model step); alone on the GPU
#   dist       the NCCL tests of tests/test_gpu_dist.cpp (one rank: bit-exact to one process)
#   decode     issue W2.5's GPU checks: cached decoding == the no-cache path on CUDA (tests/
#              test_decode.cpp's GPU case), then the Shakespeare demo trained on the GPU (300
#              steps) and `hla generate` from its checkpoint on CUDA and on the CPU
#   fla        fla's exports of every model type and the KDA models again with --kda-reference
#              (chunk_kda replaced by fla's own naive recurrence and torch's softplus), each
#              compared with `hla forward` (issue W2.4)
#   wait       waits for the sweeps up to WAIT_SECONDS (default 540), a progress line a minute; keep
#              it under the call's limit: a call that times out hands the machine back within 30 s,
#              and with it the sweeps still running (session 26 lost a whole paper2 run that way)
#   pack       logs and the sweeps' tables, reports and plots into $OUT (evidence.tgz)
# Stages run in the order given, e.g.
#   scripts/h200-evidence.sh build ruler sweeps gpu-check dist fla wait pack
# and a later call continues with `scripts/h200-evidence.sh wait pack`.
# PARALLEL: runs at a time per recipe (default 4); SWEEP_ARGS: more `hla sweep` arguments for every
# recipe (e.g. --only 'kda-*,gdn2-*').
# Environment: DATA, the data folder of ../shared/data/README.md (a copy that travels with the
# tree; default ../shared/data); FLA, fla's source (the folder holding fla/; default .fla);
# OUT, where `pack` writes (default build-gpu/evidence). NVLink multicast stays off.
# Every call of a chain must carry the same ignored folders (DATA's copy, .fla, .gpu-prefix): a
# call that does not carry one removes it on the box, under sweeps still running (session 24 lost
# 72 of the paper1-text and paper2-routing runs that way, "corpus input ... does not exist").
# Times seen on the H200 (2026-12-02): build 230 s, ruler 70 s, gpu-check 120 s, dist 12 s, the
# fla stage over 6 minutes (Triton compiles every exported model's kernels; the KDA pair alone,
# plain and --kda-reference, took 340 s), so `fla` goes in a call of its own.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d .gpu-prefix ] && export CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-$PWD/.gpu-prefix}
BUILD=build-gpu
EVIDENCE=$BUILD/evidence-logs
DATA=${DATA:-../shared/data}
FLA=${FLA:-.fla}
read -r -a RECIPES <<<"${RECIPES:-paper1-mqar paper1-text paper2-routing}"
mkdir -p "$EVIDENCE/sweeps"
start=$(date +%s)
stamp() { echo "[h200-evidence $(( $(date +%s) - start )) s] $*"; }

sweep_progress() {
  for r in "${RECIPES[@]}"; do
    [ -f "$EVIDENCE/sweeps/$r.log" ] || continue
    echo "  $r: $(grep -c . "runs/$r/results.jsonl" 2>/dev/null || echo 0) runs recorded;" \
         "$(cat "$EVIDENCE/sweeps/$r.done" 2>/dev/null || tail -n 1 "$EVIDENCE/sweeps/$r.log" | cut -c1-160)"
  done
}

stage_build() {
  cmake -S . -B $BUILD -DHLA_CUDA=ON -DHLA_CUDA_ARCH=90a ${CMAKE_FLAGS:-} >"$EVIDENCE/build.log" 2>&1 &&
    cmake --build $BUILD -j "$(nproc)" --target ${BUILD_TARGETS:-hla hla_tests} >>"$EVIDENCE/build.log" 2>&1 ||
    { tail -n 40 "$EVIDENCE/build.log"; echo "BUILD FAILED"; return 1; }
}

stage_ruler() { OUT=$EVIDENCE bash scripts/ruler-h200.sh; }

stage_sweeps() {
  for r in "${RECIPES[@]}"; do
    sed "s#\.\./shared/data#$DATA#g" "configs/sweeps/$r.toml" >"$EVIDENCE/sweeps/$r.toml"
    HLA_CPU_THREADS=1 setsid nohup bash -c \
      "t0=\$(date +%s); $BUILD/hla sweep --config $EVIDENCE/sweeps/$r.toml --out runs/$r --parallel ${PARALLEL:-4} ${SWEEP_ARGS:-};
       echo \"exit \$?, wall \$(( \$(date +%s) - t0 )) s\" >$EVIDENCE/sweeps/$r.done" \
      >"$EVIDENCE/sweeps/$r.log" 2>&1 </dev/null &
  done
  sleep 5
  sweep_progress
}

stage_gpu_check() {
  $BUILD/hla gpu-check >"$EVIDENCE/gpu-check.log" 2>&1
  local rc=$?
  tail -n 8 "$EVIDENCE/gpu-check.log"
  return $rc
}

stage_bench() {
  local status=0
  $BUILD/hla bench --json "$EVIDENCE/results-h200.json" --commit "${HLA_COMMIT:-unknown}" \
    >"$EVIDENCE/bench.txt" 2>&1 || status=1
  grep -E "B4 T4096 H16 D128|B8 T2048 H4 D256" "$EVIDENCE/bench.txt" | cut -c1-160
  ncu --clock-control none --metrics gpu__time_duration.sum --csv $BUILD/hla bench "delta_rule gdn B4 T4096" \
    "delta_rule kda B4 T4096" "decay_attention vector B4 T4096" "attention B4 T4096 H16 D128" --warmup 1 --repeats 1 \
    >"$EVIDENCE/ncu-kernels.csv" 2>"$EVIDENCE/ncu-kernels.err" || status=1
  return $status
}

# Why the slowest kernels run where they do (issues W2.2, W2.9): ncu's speed-of-light, occupancy
# and warp-state sections for one launch of each STALL_KERNELS entry, "KERNEL@BENCH ROW" (ncu's -k
# matches a kernel's name without its namespace, so the bench row picks the op; default: KDA's
# prepare and local backward, GLA's local backward, attention's two backward kernels). ~25 s each.
stage_stalls() {
  local entry status=0
  local -a entries
  IFS=';' read -r -a entries <<<"${STALL_KERNELS:-prepare_kernel@delta_rule kda B4 T4096;local_backward_kernel@delta_rule kda B4 T4096;local_backward_kernel@decay_attention vector B4 T4096;attention_backward_dq@attention B4 T4096 H16 D128;attention_backward_dkdv@attention B4 T4096 H16 D128}"
  for entry in "${entries[@]}"; do
    local kernel=${entry%%@*} row=${entry#*@}
    local name=${row// /_}
    local log="$EVIDENCE/ncu-stalls-${kernel}-${name//\//-}.txt"
    timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section LaunchStats --section MemoryWorkloadAnalysis -k "regex:$kernel" --launch-count 1 $BUILD/hla bench "$row" --warmup 0 --repeats 1 \
      >"$log" 2>&1 || status=1
    echo "$entry:"
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" \
      "$log" | cut -c1-110
  done
  return $status
}

# Where the 374M Transformer's training step goes (issue W2.3): ncu's per-kernel times of
# PROFILE_STEPS (default 2) steps of `hla bench train`'s transformer-374m run, summed per kernel.
# Slow: ncu serialises thousands of launches a step (6 bench steps ran past 5 minutes on the
# H200), so it gets a call of its own, cut at PROFILE_SECONDS (default 500).
stage_profile_transformer() {
  local status=0 steps=${PROFILE_STEPS:-2} run=$BUILD/runs/profile-transformer
  rm -rf $run
  timeout "${PROFILE_SECONDS:-500}" ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    $BUILD/hla train --model.config configs/models/transformer-340m.json --device cuda --train.dtype bf16 \
    --data.source mqar --data.seq_len 2048 --data.batch_size 8 --train.steps $steps --optim.warmup_steps 1 \
    --train.log_every 1 --train.val_every 0 --train.val_batches 0 --train.out_dir $run \
    >"$EVIDENCE/ncu-transformer-step.csv" 2>"$EVIDENCE/ncu-transformer-step.err" || status=1
  python3 scripts/kernel_table.py "$EVIDENCE/ncu-transformer-step.csv" --steps $steps | head -n 40 |
    tee "$EVIDENCE/transformer-step-kernels.txt" || status=1
  return $status
}

# Where a small model's training step goes (issue W2.3: the MQAR demo ran 55 steps/s with or
# without the CUDA graph): ncu's per-kernel times of 4 eager steps, summed per kernel, then the
# demo's wall-clock steps/s with and without the graph.
stage_profile() {
  local run=$BUILD/runs/profile-mqar status=0
  rm -rf $run $run-graph $run-eager
  ncu --clock-control none --metrics gpu__time_duration.sum --csv $BUILD/hla train --config configs/mqar-demo.toml \
    --device cuda --train.steps 4 --optim.warmup_steps 1 --train.cuda_graph false --train.out_dir $run \
    >"$EVIDENCE/ncu-mqar-step.csv" 2>"$EVIDENCE/ncu-mqar-step.err" || status=1
  python3 scripts/kernel_table.py "$EVIDENCE/ncu-mqar-step.csv" --steps 4 | tee "$EVIDENCE/mqar-step-kernels.txt" || status=1
  for graph in true false; do
    echo "mqar demo, 400 steps, cuda_graph $graph:"
    $BUILD/hla train --config configs/mqar-demo.toml --device cuda --train.cuda_graph $graph \
      --train.out_dir $run-$graph >"$EVIDENCE/mqar-demo-graph-$graph.log" 2>&1 || status=1
    grep "^done" "$EVIDENCE/mqar-demo-graph-$graph.log"
  done
  return $status
}

stage_dist() {
  $BUILD/hla_tests --source-file='*test_gpu_dist.cpp' >"$EVIDENCE/gpu-dist.log" 2>&1
  local rc=$?
  tail -n 4 "$EVIDENCE/gpu-dist.log"
  return $rc
}

stage_decode() {
  local run=$BUILD/runs/shakespeare-gpu status=0
  $BUILD/hla_tests --test-case='GPU: decoding*' >"$EVIDENCE/gpu-decode.log" 2>&1 || status=1
  tail -n 4 "$EVIDENCE/gpu-decode.log"
  rm -rf $run
  $BUILD/hla train --config configs/shakespeare-demo.toml --device cuda --data.source "$DATA/tinyshakespeare/input.txt" \
    --train.steps 300 --train.out_dir $run >"$EVIDENCE/generate-train.log" 2>&1 || { tail -n 5 "$EVIDENCE/generate-train.log"; return 1; }
  grep -E "^val|^done" "$EVIDENCE/generate-train.log" | tail -n 2
  for device in cuda cpu; do
    echo "hla generate --device $device:"
    $BUILD/hla generate --checkpoint $run/checkpoint --prompt "ROMEO:" --max-new-tokens 160 --top-k 20 --seed 1 \
      --device $device >"$EVIDENCE/generate-$device.txt" 2>&1 || status=1
    cat "$EVIDENCE/generate-$device.txt"
  done
  return $status
}

stage_fla() {
  local dir=$BUILD/fla-export status=0
  rm -rf $dir $dir-kda-reference
  PYTHONPATH=$FLA python3 scripts/fla_export.py $dir >"$EVIDENCE/fla-export.log" 2>&1 || status=1
  PYTHONPATH=$FLA python3 scripts/fla_export.py $dir-kda-reference --only kda kda_hybrid --kda-reference \
    >"$EVIDENCE/fla-export-kda-reference.log" 2>&1 || status=1
  for d in $dir $dir-kda-reference; do
    echo "fla_compare $d (hla on CUDA):"
    python3 scripts/fla_compare.py $d --hla $BUILD/hla --device cuda || status=1
  done
  return $status
}

stage_wait() {
  local limit=${WAIT_SECONDS:-540} t0 done
  t0=$(date +%s)
  while [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do
    done=$(ls "$EVIDENCE"/sweeps/*.done 2>/dev/null | wc -l)
    [ "$done" -ge ${#RECIPES[@]} ] && break
    sleep $(( limit - ($(date +%s) - t0) < 60 ? limit - ($(date +%s) - t0) : 60 ))  # never past the limit
    stamp "sweeps:"; sweep_progress
  done
}

stage_pack() {
  local out=${OUT:-$BUILD/evidence}
  mkdir -p "$out"
  tar czf "$out/evidence.tgz" -C $BUILD evidence-logs
  # the sweeps' tables and plots, and every run's own eval report (a failed task says why there)
  find runs -maxdepth 5 \( -name 'results.*' -o -name 'report.*' -o -name '*.svg' \) -print0 2>/dev/null |
    tar czf "$out/sweeps.tgz" --null -T -
  ls -l "$out"
}

status=0
for stage in "$@"; do
  stamp "$stage"
  case $stage in
    build) stage_build || exit 1 ;;
    ruler | sweeps | bench | profile | dist | decode | fla | wait | pack) "stage_$stage" || status=1 ;;
    gpu-check) stage_gpu_check || status=1 ;;
    stalls) stage_stalls || status=1 ;;
    profile-transformer) stage_profile_transformer || status=1 ;;
    *) echo "unknown stage '$stage' (build ruler sweeps gpu-check bench stalls profile profile-transformer dist decode fla wait pack)"; exit 2 ;;
  esac
done
stamp "done (status $status)"
exit $status
