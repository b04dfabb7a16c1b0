#!/usr/bin/env python3
"""Compares `hla forward --grads` with fla on the models scripts/fla_export.py exported.

  python3 scripts/fla_compare.py EXPORT_DIR [--hla build-cpu/hla] [--device cpu]

For every EXPORT_DIR/NAME/ holding fla_ref.safetensors it runs
  hla forward --checkpoint NAME --tokens NAME/tokens.safetensors --grads --out <tmp>
and prints one row: the relative error of the logits and of the loss, and the worst gradient's
relative error (each tensor's max |hla - fla| / max |fla|) with its parameter. Targets: logits
<= 1e-4, gradients <= 1e-3; a row above them, a missing gradient or a failed run makes the exit
status 1. Pure Python (no numpy, no torch): it reads safetensors F32 itself.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from array import array

LOGITS_TARGET, GRAD_TARGET = 1e-4, 1e-3


def read_safetensors(path):
    """name -> (shape, list of floats) for the F32 tensors of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name} is {info['dtype']}, expected F32")
        values = array("f")
        values.frombytes(body[begin:end])
        if sys.byteorder != "little":
            values.byteswap()
        out[name] = (info["shape"], values)
    return out


def rel_err(a, ref):
    """max |a - ref| / max |ref| (max |a - ref| when ref is all zeros); inf on a shape mismatch."""
    if a[0] != ref[0]:
        return float("inf")
    err = max((abs(x - y) for x, y in zip(a[1], ref[1])), default=0.0)
    scale = max((abs(y) for y in ref[1]), default=0.0)
    return err / scale if scale > 0 else err


def compare(name, model_dir, hla, device):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "hla_out.safetensors")
        cmd = [hla, "forward", "--checkpoint", model_dir, "--tokens", os.path.join(model_dir, "tokens.safetensors"),
               "--grads", "--device", device, "--out", out]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            return {"name": name, "error": (run.stderr or run.stdout).strip().splitlines()[-1]}
        mine = read_safetensors(out)
    ref = read_safetensors(os.path.join(model_dir, "fla_ref.safetensors"))
    row = {"name": name, "logits": rel_err(mine["logits"], ref["logits"]),
           "loss": rel_err(mine["loss"], ref["loss"]), "fla_loss": ref["loss"][1][0], "grad": 0.0, "grad_param": "-"}
    ref_grads = {k for k in ref if k.startswith("grad.")}
    my_grads = {k for k in mine if k.startswith("grad.")}
    row["missing"] = sorted(ref_grads - my_grads) + sorted("extra " + k for k in my_grads - ref_grads)
    for k in sorted(ref_grads & my_grads):
        e = rel_err(mine[k], ref[k])
        if e > row["grad"]:
            row["grad"], row["grad_param"] = e, k[len("grad."):]
    row["grads"] = len(ref_grads & my_grads)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export_dir")
    ap.add_argument("--hla", default="build-cpu/hla")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    names = sorted(d for d in os.listdir(args.export_dir)
                   if os.path.isfile(os.path.join(args.export_dir, d, "fla_ref.safetensors")))
    if not names:
        raise SystemExit(f"{args.export_dir}: no NAME/fla_ref.safetensors (run scripts/fla_export.py)")
    ok = True
    print(f"{'model':<24} {'logits rel':>11} {'loss rel':>10} {'fla loss':>9} {'grads':>6} {'worst grad rel':>15}  parameter")
    for name in names:
        row = compare(name, os.path.join(args.export_dir, name), args.hla, args.device)
        if "error" in row:
            print(f"{name:<24} FAILED: {row['error']}")
            ok = False
            continue
        good = row["logits"] <= LOGITS_TARGET and row["grad"] <= GRAD_TARGET and not row["missing"]
        ok = ok and good
        print(f"{name:<24} {row['logits']:>11.2e} {row['loss']:>10.2e} {row['fla_loss']:>9.5f} {row['grads']:>6} "
              f"{row['grad']:>15.2e}  {row['grad_param']}{'' if good else '   <-- above target'}")
        for m in row["missing"]:
            print(f"{'':<24} gradient mismatch: {m}")
    print(f"targets: logits <= {LOGITS_TARGET:g}, gradients <= {GRAD_TARGET:g} (max |hla - fla| / max |fla| per tensor)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
