#!/usr/bin/env bash
# Groups the saved findings of `make fuzz` (BUILD/fuzz/findings/<target>-<kind>-<hash>) by what
# went wrong: each input is run again through its target, and its first report line (the hla
# fuzz finding, the sanitizer's SUMMARY, or libFuzzer's timeout / out-of-memory) is the key.
# Prints, per target and key, the count and one input to reproduce it with:
#   BUILD/fuzz/fuzz_<target> <input>
set -uo pipefail
dir=${1:?usage: triage.sh BUILD_DIR}/fuzz
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
for input in "$dir"/findings/*; do
  [ -f "$input" ] || continue
  base=${input##*/}
  target=${base%%-*}
  key=$("$dir/fuzz_$target" -timeout=10 -rss_limit_mb=2048 "$input" 2>&1 |
        grep -m1 -E 'hla fuzz finding|SUMMARY: |ERROR: libFuzzer: (timeout|out-of-memory)' |
        sed -E 's/==[0-9]+==//; s/0x[0-9a-f]+/ADDR/g; s/hla-fuzz-[0-9]+/hla-fuzz-PID/g; s/(malloc[(]|used: )[0-9]+/\1N/' | cut -c1-200)
  printf '%s\t%s\t%s\n' "$target" "${key:-no report (fixed?)}" "$input"
done | sort -t$'\t' -k1,2 | awk -F'\t' '
  { n[$1 FS $2]++; if (!($1 FS $2 in ex)) { ex[$1 FS $2] = $3; order[++k] = $1 FS $2 } }
  END { for (i = 1; i <= k; i++) { split(order[i], p, FS); printf "%s  x%d  %s\n    %s\n", p[1], n[order[i]], p[2], ex[order[i]] } }'
