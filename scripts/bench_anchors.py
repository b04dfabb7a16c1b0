#!/usr/bin/env python3
"""Times the anchors of `hla bench`'s rows on this GPU: fla's Triton kernels and torch SDPA.

  build-gpu/hla bench --list --json CASES.json
  PYTHONPATH=.fla python3 scripts/bench_anchors.py CASES.json --out ANCHORS.json
  build-gpu/hla bench --anchors ANCHORS.json

CASES.json (or any bench JSON, nn/check/perf_report.h) names each bench row, its shape and its
anchor ("fla chunk_gla", "torch SDPA flash"); the anchor runs here at that shape, bf16, forward
and forward + backward (a random output gradient into every input), each timed by CUDA events
one call at a time after warm-up runs, the median kept, as `hla bench` times its own rows; a sleep
kernel queued before each timed call lets Python enqueue the whole call first (median_ms).
Inputs are drawn as hla's perf pools draw them (nn/check/registry.cpp): q, k, v ~ N(0, 1/D)
(attention: N(0, 1)), log decays U[-1, -0.01), beta / erase / write gates U[0, 1). No initial
state, no final state returned. ANCHORS.json: {"device", "torch", "triton", "autotune", ...,
"rows": {NAME: {"anchor", "fwd_ms", "fwd_bwd_ms", "fwd_variant", "fwd_bwd_variant"}}}; where an
anchor raises, its row records "fwd_error" / "fwd_bwd_error" and the run goes on. torch SDPA is
timed on each of its backends (flash, cuDNN, memory-efficient) and each pass keeps the fastest,
named in its "_variant".

fla is imported from its source folder on PYTHONPATH (as scripts/fla_export.py does), and only
when some row's anchor is fla's (torch SDPA's rows need torch alone); nothing of it goes into
hla's repository. fla's kernels run with fla's own autotuning, the figure fla's
users get (--first-config compiles each kernel's first config only: a quick run, but fla's
backward then runs 3-6x slower than it can), and before timing, worker processes (--jobs) run
each anchor once so Triton's disk cache holds every kernel; the timed pass then loads them. Rows
that share an anchor and a shape (a row and its "replay" twin, the mma and wgmma attention rows)
share one compile and one timing: 31 anchors for hla's 57 rows, 14 fla ones at the D64 and D256
shapes (--only D64, --only D256). fla refuses its gated chunk backward
on Hopper with Triton >= 3.4, < 3.7.1 (fla issue #640: that Triton miscompiles it); targets.md's
figures were taken with that guard bypassed, and so is this run (its time, not its gradients, is
what an anchor needs); --keep-hopper-guard records the refusal as the row's error instead.
"""
import argparse
import json
import math
import multiprocessing
import os
import sys
import time

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("cases", help="hla bench --list --json's file (or any bench JSON)")
parser.add_argument("--out", required=True, help="the measured anchors JSON to write")
parser.add_argument("--only", action="append", default=[], help="only rows whose name contains this (repeatable)")
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--repeats", type=int, default=20)
parser.add_argument("--jobs", type=int, default=min(12, os.cpu_count() or 1),
                    help="worker processes that compile the kernels first (0: compile while timing)")
parser.add_argument("--first-config", action="store_true",
                    help="compile fla's first autotune config only (a quick run; fla's backward then runs 3-6x slower)")
parser.add_argument("--keep-hopper-guard", action="store_true", help="do not bypass fla's #640 guard")


def configure_fla(args):
    """Patches Triton to compile first autotune configs only (with --first-config), imports fla and bypasses
    its #640 guard (unless --keep-hopper-guard); returns whether the guard was bypassed."""
    if args.first_config:
        from triton.runtime import autotuner
        init = autotuner.Autotuner.__init__

        def first_config_only(self, fn, arg_names, configs, *a, **kw):
            init(self, fn, arg_names, configs[:1], *a, **kw)

        autotuner.Autotuner.__init__ = first_config_only
    import fla.ops.common.chunk_o as chunk_o
    guarded = getattr(chunk_o, "IS_NVIDIA_HOPPER", False) and not getattr(chunk_o, "TRITON_ABOVE_3_7_1", True)
    if guarded and not args.keep_hopper_guard:
        chunk_o.TRITON_ABOVE_3_7_1 = True
    return guarded and not args.keep_hopper_guard


# ---- the anchors: inputs at a row's shape and the call ----

def rand(shape, std=1.0):
    return (torch.randn(shape, device="cuda") * std).to(torch.bfloat16)


def log_gate(shape):
    return torch.empty(shape, device="cuda").uniform_(-1.0, -0.01).to(torch.bfloat16)


def gate(shape):
    return torch.rand(shape, device="cuda").to(torch.bfloat16)


def qkv(s, std=None):
    B, T, H, D = s["B"], s["T"], s["H"], s["D"]
    std = 1.0 / math.sqrt(D) if std is None else std
    return rand((B, T, H, D), std), rand((B, T, H, D), std), rand((B, T, H, D), std)


SDPA_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")


def sdpa(backend):
    """(shape -> (call, inputs)) for torch SDPA, causal, on one backend (SDPBackend's name)."""
    def make(s):
        return sdpa_call(backend, s)
    return make


def sdpa_call(backend, s):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if "doc" in s:  # hla's rows packed with documents of s["doc"] tokens: a batch of B T / doc sequences
        s = dict(s, B=s["B"] * s["T"] // s["doc"], T=s["doc"])
    q, k, v = (x.transpose(1, 2).contiguous() for x in qkv(s, 1.0))  # SDPA takes (B, H, T, D)

    def call(q, k, v):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return call, [q, k, v]


def document_offsets(s):
    """fla's cu_seqlens for hla's rows packed with documents of s["doc"] tokens (the last of a row
    shorter: nn/check/cases_recurrence.cpp's perf_documents), the B rows laid end to end."""
    starts = [row * s["T"] + t for row in range(s["B"]) for t in range(0, s["T"], s["doc"])]
    return torch.tensor(starts + [s["B"] * s["T"]], dtype=torch.int32, device="cuda")


def fla_op(name):
    """(shape -> (call, inputs)) for fla's op `name`; a shape with "doc" runs the packed documents
    as fla's varlen form: one row of B T tokens and cu_seqlens."""
    def make(s):
        import fla.ops as ops
        varlen = {}
        if "doc" in s:
            if name not in ("chunk_simple_gla", "chunk_gla", "chunk_rwkv6"):
                raise ValueError(f"bench_anchors.py times fla {name} without documents only")
            varlen = {"cu_seqlens": document_offsets(s)}
            s = dict(s, B=1, T=s["B"] * s["T"])
        B, T, H, D = s.get("B"), s.get("T"), s.get("H"), s.get("D")
        scalar = (B, T, H)
        if name == "fused_recurrent_hgrn":
            x, g = rand((B, T, D), 1.0 / math.sqrt(128)), log_gate((B, T, D))
            return (lambda x, g: ops.fused_recurrent_hgrn(x, g)[0]), [x, g]
        q, k, v = qkv(s)
        if name == "chunk_retention":
            return (lambda q, k, v: ops.chunk_retention(q, k, v)[0]), [q, k, v]
        if name == "chunk_simple_gla":
            return (lambda q, k, v, g: ops.chunk_simple_gla(q, k, v, g=g, **varlen)[0]), [q, k, v, log_gate(scalar)]
        if name == "chunk_gla":
            return (lambda q, k, v, g: ops.chunk_gla(q, k, v, g, **varlen)[0]), [q, k, v, log_gate(q.shape)]
        if name == "chunk_rwkv6":
            u = rand((H, D), 1.0 / math.sqrt(D))
            return (lambda r, k, v, w, u: ops.chunk_rwkv6(r, k, v, w, u, **varlen)[0]), [q, k, v, log_gate(q.shape), u]
        if name == "chunk_delta_rule":
            return (lambda q, k, v, b: ops.chunk_delta_rule(q, k, v, b)[0]), [q, k, v, gate(scalar)]
        if name == "chunk_gated_delta_rule":
            return ((lambda q, k, v, g, b: ops.chunk_gated_delta_rule(q, k, v, g, b)[0]),
                    [q, k, v, log_gate(scalar), gate(scalar)])
        if name == "chunk_kda":
            return (lambda q, k, v, g, b: ops.chunk_kda(q, k, v, g, b)[0]), [q, k, v, log_gate(q.shape), gate(scalar)]
        if name == "chunk_gdn2":
            from fla.ops.gdn2 import chunk_gdn2
            return ((lambda q, k, v, g, b, w: chunk_gdn2(q, k, v, g, b, w)[0]),
                    [q, k, v, log_gate(q.shape), gate(q.shape), gate(v.shape)])
        raise ValueError(f"no inputs written for fla {name}")
    return make


def anchor_variants(anchor):
    """[(variant, shape -> (call, inputs))]: the ways to run an anchor, of which the fastest counts
    (torch SDPA: each backend, since the fastest on the GPU at hand is the one a user gets)."""
    if anchor == "torch SDPA flash":
        return [(backend.lower(), sdpa(backend)) for backend in SDPA_BACKENDS]
    if anchor.startswith("fla "):
        return [(anchor, fla_op(anchor[len("fla "):]))]
    raise ValueError(f"bench_anchors.py has no timing for the anchor '{anchor}'")


# ---- timing ----

def passes(make, shape):
    """The forward and forward+backward closures of one row, on fresh inputs."""
    call, inputs = make(shape)
    for x in inputs:
        x.requires_grad_(True)
    grad = torch.randn_like(call(*inputs))

    def forward():
        call(*inputs)

    def forward_backward():
        torch.autograd.backward(call(*inputs), grad)
        for x in inputs:
            x.grad = None
    return forward, forward_backward


SM_CYCLES_PER_SECOND = 2.0e9  # at least the H200's top SM clock (1.98 GHz): the sleep never ends early


def median_ms(fn, warmup, repeats):
    """GPU time of fn, median of `repeats`. Before each timed call a sleep kernel holds the GPU for
    twice as long as Python takes to enqueue fn, so the events time fn's kernels back to back and
    not the host's launch rate (fla's autograd functions issue many Triton launches from Python: on a
    busy host the GPU would otherwise wait between them, inflating the anchor)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    enqueue_start = time.perf_counter()
    fn()
    enqueue_seconds = time.perf_counter() - enqueue_start
    torch.cuda.synchronize()
    sleep_cycles = int(2 * enqueue_seconds * SM_CYCLES_PER_SECOND) + 100_000
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep_cycles)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    n = len(times)
    return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])


def error_text(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]


def time_row(row, warmup, repeats):
    """{"anchor", "fwd_ms" | "fwd_error", "fwd_bwd_ms" | "fwd_bwd_error", "fwd_variant", "fwd_bwd_variant"}
    of one row: each pass's fastest variant; an error only where every variant failed."""
    out = {"anchor": row["anchor"]}
    try:
        variants = anchor_variants(row["anchor"])
    except ValueError as e:
        out["fwd_error"] = out["fwd_bwd_error"] = error_text(e)
        return out
    for variant, make in variants:
        try:
            forward, forward_backward = passes(make, row["shape"])
        except Exception as e:  # noqa: BLE001  (any failure of the anchor is recorded, not fatal)
            for key in ("fwd", "fwd_bwd"):
                out.setdefault(key + "_error", f"{variant}: {error_text(e)}")
            continue
        for key, fn in (("fwd", forward), ("fwd_bwd", forward_backward)):
            try:
                ms = median_ms(fn, warmup, repeats)
                if ms < out.get(key + "_ms", math.inf):
                    out[key + "_ms"], out[key + "_variant"] = ms, variant
            except Exception as e:  # noqa: BLE001
                out.setdefault(key + "_error", f"{variant}: {error_text(e)}")
            torch.cuda.synchronize()
        del forward, forward_backward
        torch.cuda.empty_cache()
    for key in ("fwd", "fwd_bwd"):
        if key + "_ms" in out:
            out.pop(key + "_error", None)
    return out


def compile_rows(rows_and_args):
    """A worker's share: each row once, forward and backward, so Triton's disk cache holds its kernels."""
    rows, args = rows_and_args
    configure_fla(args)
    for row in rows:
        try:
            _, forward_backward = passes(anchor_variants(row["anchor"])[0][1], row["shape"])
            forward_backward()
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001  (the timed pass records the error)
            pass
        torch.cuda.empty_cache()
    return len(rows)


def read_rows(path, only):
    """The anchors to time: one {"anchor", "shape", "names"} per distinct anchor and shape, in the order
    they first appear, with the names of every row that takes it (a row and its "replay" twin, the
    mma and wgmma attention rows: one anchor each time, compiled and timed once)."""
    with open(path) as f:
        bench = json.load(f)
    if not isinstance(bench, dict) or not isinstance(bench.get("rows"), list):
        sys.exit(f"{path}: expected a bench JSON (hla bench --list --json) with a list 'rows'")
    anchors = {}
    for i, r in enumerate(bench["rows"]):
        for key in ("name", "anchor", "shape"):
            if key not in r:
                sys.exit(f"{path}: rows[{i}] has no '{key}'")
        if not r["anchor"] or (only and not any(o in r["name"] for o in only)):
            continue
        a = anchors.setdefault((r["anchor"], json.dumps(r["shape"], sort_keys=True)),
                               {"anchor": r["anchor"], "shape": r["shape"], "names": []})
        if r["name"] not in a["names"]:
            a["names"].append(r["name"])
    return list(anchors.values())


def write_json(path, value):
    """Writes through a temporary file and a rename, so a killed run leaves the last whole file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main():
    args = parser.parse_args()
    start = time.time()
    rows = read_rows(args.cases, args.only)  # one a distinct anchor and shape, with its rows' names
    fla_rows = [r for r in rows if r["anchor"].startswith("fla ")]
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    if fla_rows:  # torch SDPA's rows alone need neither fla nor Triton
        bypassed = configure_fla(args)
        import fla
        import triton
        out.update({"triton": triton.__version__, "fla": getattr(fla, "__version__", "unknown"),
                    "autotune": "first config only" if args.first_config else "fla's own",
                    "hopper_guard_bypassed": bypassed})
    else:
        out["fla"] = "not used (no fla rows)"
    out.update({"warmup": args.warmup, "repeats": args.repeats, "rows": {}})
    if args.jobs > 0 and fla_rows:
        shares = [(fla_rows[i::args.jobs], args) for i in range(min(args.jobs, len(fla_rows)))]
        with multiprocessing.get_context("spawn").Pool(len(shares)) as pool:
            pool.map(compile_rows, shares)
        print(f"bench_anchors: compiled {len(fla_rows)} fla anchors in {len(shares)} processes, "
              f"{time.time() - start:.0f} s", file=sys.stderr)
    write_json(args.out, out)
    for row in rows:  # the file is rewritten after each anchor: a run cut short keeps what it timed
        t0 = time.time()
        r = time_row(row, args.warmup, args.repeats)
        for name in row["names"]:
            out["rows"][name] = r
        out["seconds"] = round(time.time() - start, 1)
        write_json(args.out, out)
        times = " / ".join(f"{r[k + '_ms']:.3f}" if k + "_ms" in r else "failed" for k in ("fwd", "fwd_bwd"))
        errors = "; ".join(sorted({r[k] for k in ("fwd_error", "fwd_bwd_error") if k in r}))
        more = f" (+{len(row['names']) - 1} rows)" if len(row["names"]) > 1 else ""
        print(f"{row['names'][0] + more:<55} {row['anchor']:<28} {times} ms ({time.time() - t0:.1f} s) {errors}",
              file=sys.stderr)
    failed = sum(1 for r in out["rows"].values() if "fwd_error" in r or "fwd_bwd_error" in r)
    print(f"bench_anchors: {len(rows)} anchors for {len(out['rows'])} rows ({failed} with an error) in "
          f"{time.time() - start:.0f} s: wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
