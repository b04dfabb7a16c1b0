#!/usr/bin/env python3
"""Per-kernel GPU time of a profiled command, from ncu's CSV (--metrics gpu__time_duration.sum --csv):
one line per kernel name with its launches, total ms and share, largest first. Used by
scripts/h200-evidence.sh's `profile` stage to find where a small model's training step goes.
Usage: kernel_table.py NCU.csv [--steps N]  (N: profiled steps, to print ms per step too)"""
import argparse
import collections
import csv
import sys


def kernel_times(path):
    """(kernel name, ns) per profiled launch."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r), None)
    if header is None:
        sys.exit(f"{path}: no ncu CSV header (Kernel Name, Metric Value) found")
    names = rows[header]
    name_at, value_at, unit_at = names.index("Kernel Name"), names.index("Metric Value"), names.index("Metric Unit")
    scale = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
    for r in rows[header + 1:]:
        if len(r) != len(names):
            continue
        unit = r[unit_at]
        if unit not in scale:
            sys.exit(f"{path}: unknown time unit {unit!r} for {r[name_at]!r}")
        yield r[name_at].split("(")[0], float(r[value_at].replace(",", "")) * scale[unit]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    total = collections.Counter()
    launches = collections.Counter()
    for name, ns in kernel_times(args.csv):
        total[name] += ns
        launches[name] += 1
    all_ns = sum(total.values())
    if all_ns == 0:
        sys.exit(f"{args.csv}: no kernel times")
    print(f"{sum(launches.values())} launches, {all_ns / 1e6:.3f} ms of kernels over {args.steps} step(s) "
          f"({all_ns / 1e6 / args.steps:.3f} ms a step)")
    print(f"{'ms/step':>9} {'share':>6} {'launches/step':>13}  kernel")
    for name, ns in total.most_common(25):
        print(f"{ns / 1e6 / args.steps:9.3f} {100 * ns / all_ns:5.1f}% {launches[name] / args.steps:13.1f}  {name[:110]}")


if __name__ == "__main__":
    main()
