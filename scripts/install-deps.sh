#!/usr/bin/env bash
# Installs the Debian packages hla builds against, only when something is missing.
# Safe to run repeatedly; never runs apt-get when everything is already present
# (so it is a no-op on the GPU box, which has no network).
# `install-deps.sh fuzz` also wants clang and libFuzzer (make fuzz; Debian 12: clang 14).
set -euo pipefail

need=()
have_header() { [ -e "$1" ]; }
have_header /usr/include/eigen3/Eigen/Dense          || need+=(libeigen3-dev)
have_header /usr/include/doctest/doctest.h           || need+=(doctest-dev)
have_header /usr/include/CLI/CLI.hpp                 || need+=(libcli11-dev)
have_header /usr/include/zstd.h                      || need+=(libzstd-dev)
have_header /usr/include/nlohmann/json.hpp           || need+=(nlohmann-json3-dev)
command -v cmake >/dev/null                          || need+=(cmake)
command -v g++ >/dev/null                            || need+=(g++)
command -v make >/dev/null                           || need+=(make)
if [ "${1:-}" = fuzz ]; then
  command -v clang++ >/dev/null                      || need+=(clang)
  compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null \
                                                     || need+=(libclang-rt-14-dev)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: missing ${need[*]}; installing with apt-get"
if ! command -v apt-get >/dev/null; then
  echo "install-deps: apt-get not found; install these packages by hand: ${need[*]}" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
