#!/usr/bin/env bash
# make fuzz: runs each fuzz target of BUILD/fuzz (tests/fuzz/CMakeLists.txt) for SECONDS (else
# $HLA_FUZZ_SECONDS, else 60: the ctest test "fuzz pass" passes none) on its
# seeds (BUILD/fuzz/seeds/<name>) and its growing corpus (BUILD/fuzz/corpus/<name>, kept between
# runs), then prints one line per target: executions and the finding, if any. A finding's input
# lands in BUILD/fuzz/findings/, its log in BUILD/fuzz/logs/; the exit status is 1 when any
# target found something. FUZZ_TARGETS="shard safetensors" runs only those; FUZZ_FLAGS adds
# libFuzzer flags (e.g. "-fork=1 -ignore_crashes=1" to go on after a finding).
# Per finding it also prints the report line, libFuzzer's seed and the input itself (base64, up
# to 4 KiB): CI keeps only its output, and a finding must be reproducible from that alone.
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR [SECONDS]}
seconds=${2:-${HLA_FUZZ_SECONDS:-60}}
dir=$build/fuzz
mkdir -p "$dir/corpus" "$dir/findings" "$dir/logs"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# execs LOG: the executions libFuzzer counted (its final stats, else its last status line).
execs() {
  local n
  n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$1" | grep -o '[0-9]*$')
  [ -n "$n" ] || n=$(grep -o '^#[0-9]*' "$1" | tail -1 | tr -d '#')
  echo "${n:-0}"
}

# saved_inputs TARGET: the finding inputs of TARGET in findings/, oldest first.
saved_inputs() { ls -1tr "$dir/findings" 2>/dev/null | grep "^$1-" || true; }

# describe TARGET LOG INPUTS...: what the finding was, how to run it again, and each input.
describe() {
  local name=$1 log=$2 input
  shift 2
  grep -E 'INFO: Seed:|Test unit written to|SUMMARY|ERROR: libFuzzer' "$log" | sed 's/^/    /'
  printf '    log: %s\n' "$log"
  for input in "$@"; do
    printf '    again: %s/fuzz_%s %s\n' "$dir" "$name" "$dir/findings/$input"
    local bytes
    bytes=$(stat -c %s "$dir/findings/$input")
    if [ "$bytes" -le 4096 ]; then
      printf '    input (%d bytes, base64): %s\n' "$bytes" "$(base64 -w0 "$dir/findings/$input")"
    fi
  done
}

findings=0
printf '%-22s %12s  %s\n' target execs result
for bin in "$dir"/fuzz_*; do
  name=${bin##*/fuzz_}
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $name "* ]]; then continue; fi
  log=$dir/logs/$name.log
  mkdir -p "$dir/corpus/$name"
  saved_before=$(saved_inputs "$name" | wc -l)
  export TMPDIR=$dir/tmp/$name  # the targets' scratch files; a crash leaves its own behind
  rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 ${FUZZ_FLAGS:-} \
         -artifact_prefix="$dir/findings/$name-" "$dir/corpus/$name" "$dir/seeds/$name" >"$log" 2>&1
  rc=$?
  mapfile -t new_inputs < <(saved_inputs "$name" | tail -n +$((saved_before + 1)))  # -ignore_crashes=1 exits 0
  if [ $rc -eq 0 ] && [ ${#new_inputs[@]} -eq 0 ]; then
    printf '%-22s %12s  %s\n' "$name" "$(execs "$log")" "no finding"
  else
    findings=$((findings + 1))
    what=$(grep -m1 -E 'hla fuzz finding|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log")
    printf '%-22s %12s  FINDING (exit %d, %d new input(s) saved): %s\n' "$name" "$(execs "$log")" $rc \
        ${#new_inputs[@]} "${what:-see $log}"
    describe "$name" "$log" "${new_inputs[@]}"
  fi
done
printf 'fuzz: %d target(s) with a finding, %s s each (group them: tests/fuzz/triage.sh %s)\n' $findings "$seconds" "$build"
[ $findings -eq 0 ]
