#!/usr/bin/env bash
# The RULER timing of issue 16 on a GPU box: builds `hla` for sm_90a into build-gpu, then times
# RULER's 13 tasks x 100 samples at length 4096 on a 340M-class 3:1 hybrid (gated_deltanet-340m
# with the Transformer-340m's attention heads; MIXER=... for another mixer), bf16, all 100
# samples of a task decoded as one batch (`hla bench ruler`, eval/ruler_bench.h). The weights are
# random: the time does not depend on them, and a random model never stops early, so every
# sequence runs its whole generation budget (the worst case). The essay haystack is the
# repository's own Markdown (any English text times the same). Tokenizer: byte unless
# TOKENIZER=path/tokenizer.json. Length 4096 is in model tokens (TOKEN_SCALE=1): a byte-level
# prompt of 4096 tokens costs what a BPE prompt of 4096 tokens costs (the 340M shape keeps its
# 32000-row head). hla eval scales RULER's budgets x 4 for byte models, so that the prompt holds
# as much text as a BPE prompt; TOKEN_SCALE=4 times that (16k-token prompts: about 16x the
# attention work of the prefill).
# Prints the per-task table (seconds in samples, prefill, steps, other) and the total against the
# 2-minute target; logs go to $OUT when set (else build-gpu/logs). Extra arguments go to
# `hla bench ruler` (e.g. --samples 10 for a quick look). Extra cmake flags: CMAKE_FLAGS="...".
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
LOGS=${OUT:-$BUILD/logs}
TARGET_SECONDS=120

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "*** ruler-h200 SKIPPED: no NVIDIA GPU on this machine (nvidia-smi lists none) ***"
  exit 0
fi
mkdir -p "$LOGS"
nvidia-smi -L

echo "ruler-h200: building hla into $BUILD (log: $LOGS/ruler-build.log)"
if ! { cmake -S . -B "$BUILD" -DHLA_CUDA=ON -DHLA_CUDA_ARCH=90a ${CMAKE_FLAGS:-} &&
       cmake --build "$BUILD" -j "$(nproc)" --target hla; } >"$LOGS/ruler-build.log" 2>&1; then
  tail -n 40 "$LOGS/ruler-build.log"
  echo "ruler-h200: BUILD FAILED"
  exit 1
fi

haystack="$BUILD/ruler-haystack.txt"
find . -name '*.md' -not -path "./$BUILD/*" -not -path './build*' -print0 | sort -z | xargs -0 cat >"$haystack"
tokenizer=(--tokenizer "${TOKENIZER:-byte}")

echo "ruler-h200: hla bench ruler (log: $LOGS/ruler-bench.log)"
if ! "$BUILD/hla" bench ruler --mixer "${MIXER:-gated_deltanet}" --shape 340m --hybrid 3:1 --length 4096 \
     --samples 100 --batch-size 100 --device cuda --dtype bf16 --haystack "$haystack" "${tokenizer[@]}" --token-scale "${TOKEN_SCALE:-1}" "$@" \
     >"$LOGS/ruler-bench.txt" 2>"$LOGS/ruler-bench.log"; then
  tail -n 20 "$LOGS/ruler-bench.log"
  echo "ruler-h200: BENCH FAILED"
  exit 1
fi
cat "$LOGS/ruler-bench.txt"
total=$(awk '$1 == "total" { print $NF }' "$LOGS/ruler-bench.txt")
if awk -v t="$total" -v limit="$TARGET_SECONDS" 'BEGIN { exit !(t < limit) }'; then
  echo "ruler-h200: total ${total} s, under the ${TARGET_SECONDS} s target"
else
  echo "ruler-h200: total ${total} s, NOT under the ${TARGET_SECONDS} s target"
  exit 2
fi
