#!/usr/bin/env python3
"""Exports tiny fla models with random weights, and fla's own logits, loss and gradients.

hla's `hla forward --checkpoint DIR --tokens DIR/tokens.safetensors --grads` must reproduce
what this script stores in DIR/fla_ref.safetensors (scripts/fla_compare.sh checks it). fla is
imported from its source folder on PYTHONPATH; nothing of it goes into hla's repository.

  PYTHONPATH=.fla python3 scripts/fla_export.py OUTDIR

For every model NAME it writes OUTDIR/NAME/:
  config.json, model.safetensors   fla's save_pretrained, unmodified
  tokens.safetensors               input_ids: (B, T) I32
  fla_ref.safetensors              logits (B, T, V) F32; loss () F32, the mean next-token
                                   cross-entropy (B*(T-1) terms); grad.<param> F32 for every
                                   parameter under fla's name
  fla_run.json                     how fla ran it (device, train/eval, attention mode,
                                   attention implementation, fla and transformers versions)
One model (delta_net_sharded) is saved in shards (model.safetensors.index.json).

  PYTHONPATH=.fla python3 scripts/fla_export.py OUTDIR --only kda kda_hybrid --kda-reference

exports the KDA models with chunk_kda replaced by a PyTorch fp32 stand-in (torch's softplus for
the gate, fla's naive_recurrent_kda for the recurrence): the same weights and tokens, so fla's
kernel and fla's reference math can each be compared with hla.

  PYTHONPATH=.fla python3 scripts/fla_export.py --check-hla HLA_DIR

checks the other direction: every HLA_DIR/NAME/ is a checkpoint `hla train` wrote (config.json,
model.safetensors) with tokens.safetensors and hla's own `hla forward` output hla_out.safetensors;
fla's AutoModelForCausalLM loads it (missing, unexpected or misshaped tensors are reported) and
its logits are compared with hla's (max |fla - hla| / max |hla|).

Every run is fp32 on CUDA (fla's Triton kernels need it; Mamba-2 without mamba_ssm runs its
torch path). T = 100 > 64, so the layers that switch to fused_recurrent for short inputs run
their chunked kernels; where a model fails in training mode with its chunked kernel, it is run
again in eval mode with attn_mode = fused_recurrent, and fla_run.json says so.

If flash_attn is not installed, fla's Attention layer (transformer and the hybrids' attn
layers) would refuse to build; the script then gives fla.layers.attn a plain-PyTorch causal
attention with flash_attn_func's arguments (GQA, sliding window), written here, and
fla_run.json records "attention": "torch stand-in for flash_attn_func".

fp32 means fp32: TF32 is off for torch's matmuls, and TRITON_F32_DEFAULT=ieee (set before
Triton is imported, unless the caller set it) makes fla's tl.dot calls on fp32 blocks exact
fp32 as well; Triton's default for them is TF32 (about 1e-3 relative), which is what the first
export ran with (hla vs fla: 1e-6 where fla's path has no tl.dot, 3e-5 to 1.4e-3 where it has).
"""
import argparse
import json
import math
import os
import sys
import traceback

os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")

import torch  # noqa: E402  (after TRITON_F32_DEFAULT)
import torch.nn.functional as F  # noqa: E402
from triton.runtime import autotuner  # noqa: E402

# Every fla kernel is compiled with its first autotune config only: autotuning compiles and
# times every config, which took minutes per model on the GPU machine, and a config changes
# only speed, not the math.
_autotuner_init = autotuner.Autotuner.__init__


def _first_config_only(self, fn, arg_names, configs, *args, **kwargs):
    _autotuner_init(self, fn, arg_names, configs[:1], *args, **kwargs)


autotuner.Autotuner.__init__ = _first_config_only

B, T = 2, 100
VOCAB = 128
SEED = 1234


def causal_attention(q, k, v, causal=True, window_size=(-1, -1), **unused):
    """flash_attn_func's math in PyTorch: q (B, T, H, D), k v (B, S, Hkv, D) -> (B, T, H, D)."""
    assert causal and not unused, f"unexpected flash_attn_func arguments {unused}"
    h, hkv = q.shape[2], k.shape[2]
    k = k.repeat_interleave(h // hkv, dim=2)
    v = v.repeat_interleave(h // hkv, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q.float(), k.float()) / math.sqrt(q.shape[-1])
    t_idx = torch.arange(q.shape[1], device=q.device)[:, None]
    s_idx = torch.arange(k.shape[1], device=q.device)[None, :]
    allowed = s_idx <= t_idx
    if window_size[0] >= 0:
        allowed = allowed & (s_idx >= t_idx - window_size[0])
    scores = scores.masked_fill(~allowed, float("-inf"))
    o = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v.float())
    return o.to(q.dtype)


def attention_implementation():
    import fla.layers.attn as attn
    if attn.flash_attn_func is not None:
        return "flash_attn"
    attn.flash_attn_func = causal_attention
    return "torch stand-in for flash_attn_func"


def gated_delta_rule_stand_in(q, k, v, g, beta, A_log, dt_bias, initial_state=None, output_final_state=False,
                              use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                              use_beta_sigmoid_in_kernel=True, allow_neg_eigval=False, cu_seqlens=None,
                              **layout):
    """chunk_gated_delta_rule's math in PyTorch (autograd gives the gradients): fla's chunk kernel
    refuses Triton 3.4-3.7.0 on Hopper (wrong gradients, fla issue #640) and its fused_recurrent
    kernel has no backward. q k (B, T, H, K), v (B, T, HV, V), g beta (B, T, HV)."""
    assert initial_state is None and not output_final_state and cu_seqlens is None
    assert use_qk_l2norm_in_kernel and use_gate_in_kernel and use_beta_sigmoid_in_kernel
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
    from fla.ops.gated_delta_rule.gate import naive_gdn_gate
    l2norm = lambda x: x.float() * torch.rsqrt((x.float() ** 2).sum(-1, keepdim=True) + 1e-6)
    group = v.shape[2] // q.shape[2]
    q, k = (l2norm(x).repeat_interleave(group, dim=2) for x in (q, k))
    beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    o, _ = naive_recurrent_gated_delta_rule(q, k, v.float(), beta, naive_gdn_gate(g, A_log, dt_bias))
    return o.to(v.dtype), None


def use_gated_delta_rule_stand_in():
    import fla.layers.gated_deltanet as layer
    layer.chunk_gated_delta_rule = gated_delta_rule_stand_in
    return "torch stand-in for chunk_gated_delta_rule (fla's naive recurrence and gate)"


def kda_stand_in(q, k, v, g, beta, A_log, dt_bias, initial_state=None, output_final_state=False,
                  use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                  allow_neg_eigval=False, safe_gate=False, lower_bound=None, state_v_first=True, cu_seqlens=None):
    """chunk_kda's math in PyTorch fp32 (autograd gives the gradients), for --kda-reference: the
    gate -exp(A_log) * softplus(g + dt_bias) with torch's softplus, where chunk_kda's kernel uses
    fla/ops/utils/softplus.py (log2(1 + 2^x) in approximate PTX, no log1p), then fla's own
    naive_recurrent_kda. q k (B, T, H, K), v (B, T, HV, V), g (B, T, HV, K), beta (B, T, HV)."""
    assert initial_state is None and not output_final_state and cu_seqlens is None
    assert use_qk_l2norm_in_kernel and use_gate_in_kernel and use_beta_sigmoid_in_kernel
    assert lower_bound is None and not safe_gate, "the stand-in has no lower-bound or safe gate"
    from fla.ops.kda.naive import naive_recurrent_kda
    l2norm = lambda x: x.float() * torch.rsqrt((x.float() ** 2).sum(-1, keepdim=True) + 1e-6)
    hv, dk = g.shape[-2:]
    gate = -A_log.float().exp().view(hv, 1) * F.softplus(g.float() + dt_bias.float().view(hv, dk))
    beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    o, _ = naive_recurrent_kda(l2norm(q), l2norm(k), v.float(), gate, beta)
    return o.to(v.dtype), None


def use_kda_stand_in():
    import fla.layers.kda as layer
    layer.chunk_kda = kda_stand_in
    return "torch stand-in for chunk_kda (exact softplus gate, fla's naive_recurrent_kda)"


def models():
    """name -> (config class name, model class name, config kwargs)."""
    common = dict(hidden_size=64, vocab_size=VOCAB, tie_word_embeddings=False)
    return {
        "transformer": ("TransformerConfig", "TransformerForCausalLM",
                        dict(common, num_hidden_layers=2, num_heads=4, num_kv_heads=2)),
        "hgrn": ("HGRNConfig", "HGRNForCausalLM", dict(common, num_hidden_layers=3)),
        "retnet": ("RetNetConfig", "RetNetForCausalLM", dict(common, num_hidden_layers=2, num_heads=4)),
        "gla": ("GLAConfig", "GLAForCausalLM", dict(common, num_hidden_layers=2, num_heads=2)),
        "hgrn2": ("HGRN2Config", "HGRN2ForCausalLM", dict(common, num_hidden_layers=3, expand_ratio=16)),
        "mamba2": ("Mamba2Config", "Mamba2ForCausalLM",
                   dict(common, num_hidden_layers=2, head_dim=16, state_size=16, expand=2, chunk_size=64)),
        # Two groups of B and C. fla's pure-torch prefill (no mamba_ssm) tiles the groups over the
        # heads (head h reads group h % G) where mamba_ssm's kernels and fla's own decoding step
        # read group h // (heads / G), as hla does: without mamba_ssm this one is expected to differ.
        "mamba2_groups": ("Mamba2Config", "Mamba2ForCausalLM",
                          dict(common, num_hidden_layers=2, head_dim=16, state_size=16, expand=2, chunk_size=64,
                               n_groups=2)),
        "rwkv6": ("RWKV6Config", "RWKV6ForCausalLM",
                  dict(common, num_hidden_layers=2, num_heads=2)),
        "delta_net": ("DeltaNetConfig", "DeltaNetForCausalLM", dict(common, num_hidden_layers=2, num_heads=4)),
        "delta_net_sharded": ("DeltaNetConfig", "DeltaNetForCausalLM", dict(common, num_hidden_layers=2, num_heads=4)),
        "gated_deltanet": ("GatedDeltaNetConfig", "GatedDeltaNetForCausalLM",
                           dict(common, num_hidden_layers=2, num_heads=4, head_dim=16, expand_v=2)),
        "kda": ("KDAConfig", "KDAForCausalLM", dict(common, num_hidden_layers=2, num_heads=4, head_dim=16)),
        "gated_deltanet_hybrid": ("GatedDeltaNetConfig", "GatedDeltaNetForCausalLM",
                                  dict(common, num_hidden_layers=4, num_heads=2, num_v_heads=4, head_dim=16,
                                       expand_v=1, attn={"layers": [1, 3], "num_heads": 4, "num_kv_heads": 2})),
        "kda_hybrid": ("KDAConfig", "KDAForCausalLM",
                       dict(common, num_hidden_layers=3, num_heads=4, head_dim=16,
                            attn={"layers": [1], "num_heads": 2, "window_size": 24, "rope_theta": 500.0})),
    }


def perturb_constants(model, gen):
    """Parameters fla initialises to a constant (norm weights 1, biases 0, D 1) get noise, so
    that a weight hla reads from the wrong tensor or ignores changes the result."""
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and torch.all(p == p.flatten()[0]):
                p.add_(0.1 * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))


def reference(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids.long()).logits.float()
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1).long())
    loss.backward()
    out = {"logits": logits.detach().cpu().contiguous(), "loss": loss.detach().cpu().reshape(())}
    for name, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        out["grad." + name] = g.detach().float().cpu().contiguous()
    return out


def export(name, spec, outdir, device, attention, kda_reference=False):
    import fla.models as fm
    from safetensors.torch import save_file
    config_cls, model_cls, kwargs = spec
    config = getattr(fm, config_cls)(**kwargs)
    torch.manual_seed(SEED)
    model = getattr(fm, model_cls)(config).float()
    gen = torch.Generator().manual_seed(SEED + 1)
    perturb_constants(model, gen)
    model = model.to(device)
    ids = torch.randint(0, VOCAB, (B, T), generator=gen, dtype=torch.int32)
    run = {"device": device, "attention": attention, "dtype": "float32", "B": B, "T": T,
           "triton_f32_default": os.environ.get("TRITON_F32_DEFAULT", "tf32")}
    if config_cls == "GatedDeltaNetConfig":
        run["gated_delta_rule"] = use_gated_delta_rule_stand_in()
    if config_cls == "KDAConfig" and kda_reference:
        run["kda"] = use_kda_stand_in()
    try:
        model.train()
        ref = reference(model, ids.to(device))
        run["mode"] = "train, config attn_mode " + str(getattr(config, "attn_mode", "-"))
    except Exception as e:  # a chunked kernel without fp32 support: recurrent kernel in eval mode
        if not hasattr(config, "attn_mode"):
            raise
        print(f"{name}: training-mode run failed ({type(e).__name__}: {e}); retrying fused_recurrent in eval mode")
        config.attn_mode = "fused_recurrent"
        torch.manual_seed(SEED)
        model = getattr(fm, model_cls)(config).float()
        perturb_constants(model, torch.Generator().manual_seed(SEED + 1))
        model = model.to(device).eval()
        ref = reference(model, ids.to(device))
        run["mode"] = "eval, attn_mode fused_recurrent (chunk failed: " + type(e).__name__ + ")"
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    shard = {"max_shard_size": "40KB"} if name.endswith("_sharded") else {}
    if isinstance(getattr(model, "_tied_weights_keys", None), list):
        # fla declares tied weights as a list; transformers 5.x expects {target: source} and
        # fails in save_pretrained. These models are untied (tie_word_embeddings=False).
        model._tied_weights_keys = {}
    model.save_pretrained(d, **shard)  # safetensors: the default in 4.x, the only format in 5.x
    save_file({"input_ids": ids.contiguous()}, os.path.join(d, "tokens.safetensors"))
    save_file(ref, os.path.join(d, "fla_ref.safetensors"))
    import fla
    import transformers
    run["fla"] = getattr(fla, "__version__", "?")
    run["transformers"] = transformers.__version__
    run["torch"] = torch.__version__
    with open(os.path.join(d, "fla_run.json"), "w") as f:
        json.dump(run, f, indent=2)
    print(f"{name}: loss {ref['loss'].item():.6f}, {sum(1 for k in ref if k.startswith('grad.'))} grads, {run['mode']}")


def check_hla(hla_dir, device):
    """Loads hla-written checkpoints with fla's classes; one line each."""
    import fla  # noqa: F401  (registers fla's configs and models with transformers' Auto classes)
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    failed = []
    for name in sorted(os.listdir(hla_dir)):
        d = os.path.join(hla_dir, name)
        if not os.path.isfile(os.path.join(d, "hla_out.safetensors")):
            continue
        with open(os.path.join(d, "config.json")) as f:
            if "architectures" not in json.load(f):  # gdn2: hla writes no fla class where fla has none
                print(f"{name}: skipped, fla has no class for this model_type (config.json names no architectures)")
                continue
        def fla_logits(**config_overrides):
            model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True, **config_overrides)
            problems = {k: v for k, v in info.items() if v and k != "error_msgs"} | (
                {"error_msgs": info["error_msgs"]} if info.get("error_msgs") else {})
            model = model.float().to(device).eval()
            ids = load_file(os.path.join(d, "tokens.safetensors"))["input_ids"].to(device)
            with torch.no_grad():
                return model, problems, model(input_ids=ids.long()).logits.float().cpu()

        try:
            try:
                model, problems, logits = fla_logits()
            except AssertionError:  # a chunk kernel without fp32 (delta_net): the recurrent one, as the export does
                model, problems, logits = fla_logits(attn_mode="fused_recurrent")
            ref = load_file(os.path.join(d, "hla_out.safetensors"))["logits"]
            err = ((logits - ref).abs().max() / ref.abs().max()).item()
            print(f"{name}: fla loads it ({type(model).__name__}); logits rel err vs hla {err:.2e}"
                  + (f"; loading problems {problems}" if problems else "; every tensor matched"))
            if problems or err > 1e-4:
                failed.append(name)
        except Exception as e:
            print(f"{name}: fla cannot load it: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            failed.append(name)
    if failed:
        print("NOT LOADED OR DIFFERENT:", " ".join(failed))
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--check-hla", metavar="HLA_DIR", help="load hla-written checkpoints with fla instead")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", nargs="*", help="model names (default: all)")
    ap.add_argument("--kda-reference", action="store_true",
                    help="KDA models run a PyTorch fp32 stand-in of chunk_kda (exact softplus, fla's naive "
                         "recurrence) instead of fla's Triton kernel: tells fla's kernel rounding from hla's")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32: no TF32 matmuls
    torch.backends.cudnn.allow_tf32 = False
    attention = attention_implementation()
    if args.check_hla:
        return check_hla(args.check_hla, args.device)
    if not args.outdir:
        ap.error("give OUTDIR (or --check-hla HLA_DIR)")
    failed = []
    for name, spec in models().items():
        if args.only and name not in args.only:
            continue
        try:
            export(name, spec, args.outdir, args.device, attention, args.kda_reference)
        except Exception:
            traceback.print_exc()
            failed.append(name)
    if failed:
        print("FAILED:", " ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
