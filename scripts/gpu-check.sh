#!/usr/bin/env bash
# `make gpu-check`: on a machine with an NVIDIA GPU, builds hla for sm_90a into build-gpu, runs
# the CUDA tests (tests/test_cuda.cpp, tests/test_gpu_train.cpp: GPU training == CPU training,
# and no cudaMalloc in a training step after warm-up; the every-case test is left to the
# `hla gpu-check` run at the end, which prints the table; and the "GPU ..." cases of other suites:
# cached decoding == the no-cache path, the fused linear cross-entropy),
# the MQAR demo config on the GPU (fp32 and bf16), `hla bench` and `hla gpu-check` (every
# case), writes each log to $OUT when set (else build-gpu/logs), and prints the gpu-check
# table last.
# Exits non-zero when the build, a test or a gpu-check row fails. Without a GPU it says so and
# exits 0. Extra cmake flags: CMAKE_FLAGS="...". The build's dependencies (Eigen3, CLI11,
# doctest, nlohmann_json, zstd) come from the system or from a prefix named in the environment
# variable CMAKE_PREFIX_PATH (the GPU box has no network: copy the headers, their cmake configs
# and libzstd.a into a prefix that travels with the tree), or HLA_PREBUILT=1 runs the hla and
# hla_tests already in build-gpu (built elsewhere for sm_90a) without building; GPU_CHECK_BENCH=0
# leaves out the `hla bench` run (minutes; its table is the bench's own call).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo
  echo "*** gpu-check SKIPPED: no NVIDIA GPU on this machine (nvidia-smi lists none) ***"
  echo "*** nothing was built or checked; run make gpu-check on the GPU machine ***"
  echo
  exit 0
fi

LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
nvidia-smi -L

if [ -n "${HLA_PREBUILT:-}" ]; then
  # binaries built elsewhere for sm_90a (a GPU box without the build's dependencies): run them as they are
  for bin in hla hla_tests; do
    [ -x "$BUILD/$bin" ] || { echo "gpu-check: HLA_PREBUILT is set but $BUILD/$bin is missing or not executable"; exit 1; }
  done
  echo "gpu-check: the prebuilt $BUILD/hla and $BUILD/hla_tests (HLA_PREBUILT), no build"
else
  echo "gpu-check: building into $BUILD (log: $LOGS/build.log)"
  if ! { cmake -S . -B "$BUILD" -DHLA_CUDA=ON -DHLA_CUDA_ARCH=90a ${CMAKE_FLAGS:-} &&
         cmake --build "$BUILD" -j "$(nproc)"; } >"$LOGS/build.log" 2>&1; then
    tail -n 40 "$LOGS/build.log"
    echo "gpu-check: BUILD FAILED"
    exit 1
  fi
fi

status=0
echo "gpu-check: CUDA tests (log: $LOGS/tests.log)"
if ! "$BUILD/hla_tests" --source-file='*test_cuda.cpp,*test_gpu_train.cpp' \
     --test-case-exclude='*every registered gpu-check case*' >"$LOGS/tests.log" 2>&1; then
  tail -n 40 "$LOGS/tests.log"
  echo "gpu-check: CUDA TESTS FAILED"
  status=1
fi
grep -E "worst relative|bf16 loss|no cudaMalloc" "$LOGS/tests.log"
tail -n 3 "$LOGS/tests.log"
# The GPU cases that live beside their CPU tests (decoding with the cache against the no-cache
# path, the fused linear cross-entropy); the NCCL case is scripts/dist-check.sh's.
echo "gpu-check: GPU cases of the other suites (log: $LOGS/tests-gpu-cases.log)"
if ! "$BUILD/hla_tests" --test-case='GPU: decoding*,GPU linear_cross_entropy*' >"$LOGS/tests-gpu-cases.log" 2>&1; then
  tail -n 40 "$LOGS/tests-gpu-cases.log"
  echo "gpu-check: GPU CASES FAILED"
  status=1
fi
tail -n 3 "$LOGS/tests-gpu-cases.log"

for dtype in f32 bf16; do
  echo "gpu-check: MQAR demo on the GPU, $dtype (log: $LOGS/mqar-$dtype.log)"
  if ! "$BUILD/hla" train --config configs/mqar-demo.toml --device cuda --train.dtype "$dtype" \
       --train.out_dir "$BUILD/runs/mqar-$dtype" >"$LOGS/mqar-$dtype.log" 2>&1; then
    tail -n 20 "$LOGS/mqar-$dtype.log"
    echo "gpu-check: MQAR DEMO FAILED ($dtype)"
    status=1
  fi
  grep -E "^val|^done" "$LOGS/mqar-$dtype.log"
done

if [ "${GPU_CHECK_BENCH:-1}" != 0 ] && "$BUILD/hla" bench --list >/dev/null 2>&1; then
  echo "gpu-check: hla bench (log: $LOGS/bench.log)"
  "$BUILD/hla" bench 2>&1 | tee "$LOGS/bench.log" || status=1
fi

"$BUILD/hla" gpu-check >"$LOGS/gpu-check.log" 2>&1 || status=1
cat "$LOGS/gpu-check.log"  # the table is the last thing printed
exit $status
