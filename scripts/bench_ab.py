#!/usr/bin/env python3
"""Paired timing of two builds of hla on one GPU: is a kernel change faster?

    scripts/bench_ab.py BUILD_A/hla BUILD_B/hla [--rounds N] [--out DIR] [names ...]

Runs `hla bench --json` of the two binaries in turn, A B A B ... (N rounds, default 3), over the
bench rows whose name or group contains one of `names` (default: every row), so that a clock or
thermal drift of the machine falls on both alike. Prints, per row and pass, each build's median
over the rounds, the spread (max / min - 1) of each, and B / A; a ratio inside both spreads is
marked "~" (no measurable difference). Writes every round's JSON and the paired table
(ab.json: the binaries, --label-a / --label-b, rounds, bench arguments, and rows of name, pass,
a_ms, b_ms, ratio, a_spread, b_spread) into --out (default: $OUT, else ./bench-ab). Standard
library only (the GPU box has no network).

Typical use, measuring a commit against its parent: build the parent in another tree (a git
worktree in an ignored folder, carried to the GPU box), then
    scripts/bench_ab.py ../base/build-gpu/hla build-gpu/hla --rounds 3 decay_attention delta_rule
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_bench(hla, names, path, extra):
    cmd = [hla, "bench", "--json", path, *extra, *names]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_ab: '{' '.join(cmd)}' exited with {done.returncode}:\n{done.stdout[-4000:]}")
    with open(path) as f:
        rows = json.load(f)["rows"]
    return {(r["name"], r["pass"]): r["ms"] for r in rows if r.get("ms") is not None}


def spread(times):
    return max(times) / min(times) - 1.0 if min(times) > 0 else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("hla_a", help="the baseline binary (A)")
    p.add_argument("hla_b", help="the changed binary (B)")
    p.add_argument("names", nargs="*", help="bench rows whose name or group contains one of these")
    p.add_argument("--rounds", type=int, default=3, help="A B rounds (default 3)")
    p.add_argument("--out", default=os.environ.get("OUT", "bench-ab"), help="folder for the JSON files")
    p.add_argument("--bench-args", default="", help="more arguments to hla bench, e.g. '--repeats 50'")
    p.add_argument("--label-a", default="", help="what A is, for ab.json (e.g. its commit)")
    p.add_argument("--label-b", default="", help="what B is, for ab.json")
    args = p.parse_intermixed_args()
    if args.rounds < 1:
        sys.exit(f"bench_ab: --rounds must be >= 1, got {args.rounds}")
    for hla in (args.hla_a, args.hla_b):
        if not os.access(hla, os.X_OK):
            sys.exit(f"bench_ab: {hla} is not an executable file")
    os.makedirs(args.out, exist_ok=True)
    extra = args.bench_args.split()
    times = {"a": {}, "b": {}}
    for i in range(args.rounds):
        for side, hla in (("a", args.hla_a), ("b", args.hla_b)):
            path = os.path.join(args.out, f"round{i}-{side}.json")
            for key, ms in run_bench(hla, args.names, path, extra).items():
                times[side].setdefault(key, []).append(ms)
            print(f"bench_ab: round {i + 1}/{args.rounds} {side.upper()} done ({hla})", flush=True)
    rows = []
    for key in times["a"]:
        a, b = times["a"][key], times["b"].get(key)
        if not b or len(b) != len(a):
            continue
        a_ms, b_ms = statistics.median(a), statistics.median(b)
        rows.append({"name": key[0], "pass": key[1], "a_ms": a_ms, "b_ms": b_ms, "ratio": b_ms / a_ms,
                     "a_spread": spread(a), "b_spread": spread(b)})
    only_one = sorted(set(times["a"]) ^ set(times["b"]))
    width = max([len(r["name"]) for r in rows] + [4])
    print(f"{'row':<{width}}  {'pass':<8} {'A ms':>9} {'B ms':>9} {'B/A':>7}  spread A / B")
    for r in rows:
        noise = max(r["a_spread"], r["b_spread"])
        mark = "~" if abs(r["ratio"] - 1.0) <= noise else " "
        print(f"{r['name']:<{width}}  {r['pass']:<8} {r['a_ms']:9.4f} {r['b_ms']:9.4f} {r['ratio']:7.3f}{mark} "
              f"{100 * r['a_spread']:5.1f}% / {100 * r['b_spread']:4.1f}%")
    for key in only_one:
        print(f"bench_ab: row {key[0]} ({key[1]}) ran in one build only")
    with open(os.path.join(args.out, "ab.json"), "w") as f:
        json.dump({"a": args.hla_a, "b": args.hla_b, "label_a": args.label_a, "label_b": args.label_b,
                   "rounds": args.rounds, "bench_args": args.bench_args, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
