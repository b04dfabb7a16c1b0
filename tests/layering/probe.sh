#!/bin/sh
# Compiles one layering probe with the include path a layer sees, and checks the outcome:
#   probe.sh compile|reject CXX SOURCE "dir1;dir2;..."
# reject passes only when the compiler stops on a missing header (not on some other error):
# gcc says "No such file or directory", clang "file not found".
expect=$1 cxx=$2 src=$3
flags=$(printf '%s' "$4" | tr ';' '\n' | sed -n 's/^./-I&/p')
log=$(mktemp)
# shellcheck disable=SC2086
if "$cxx" -std=c++17 -fsyntax-only $flags "$src" >"$log" 2>&1; then got=compile; else got=reject; fi
if [ "$expect" = reject ] && [ "$got" = reject ] && ! grep -qE "No such file or directory|file not found" "$log"; then
  got="reject for another reason"
fi
if [ "$got" = "$expect" ]; then
  echo "layering: $(basename "$src") - ${expect}ed as it must be"
  rm -f "$log"
  exit 0
fi
echo "layering: $(basename "$src") should ${expect} but got: $got"
cat "$log"
rm -f "$log"
exit 1
