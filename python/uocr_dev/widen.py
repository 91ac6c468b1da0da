"""Widens a trained demo model's decoder (hidden size, heads, MLP and expert widths) and deepens
its vision encoder (SAM blocks, CLIP layers) so that the grown model computes exactly what the
source did, as a start for train.py --init-from.

Why exact: a wider model trained from scratch needs far more CPU time than continuing a trained
one; starting from the same function keeps everything the narrow model learnt and gives the new
width to training. How: the residual stream's new channels start at zero and everything that
writes into them (embeddings, projector rows, o_proj / down_proj rows) is zero, so nothing the
old units compute changes; the weights that read from new channels and the new heads' and MLP
units' input weights are random (so the new channels receive gradients), while what the new units
write back is zero; the MoE router's new columns are zero too (routing stays). RMSNorm over
[x, 0] divides by rms(x) * sqrt(old / new): the old channels' norm weights are scaled by
sqrt(old / new) to cancel it. Encoder blocks are added after the source's (`sam_layers`,
`clip_layers`; `sam_global` may name added SAM blocks that attend over the whole page): a block
adds its attention's and MLP's output to its input, so with those two output projections zero
it passes its input on unchanged; the rest of it starts as train.py would start it.

    python3 -m uocr_dev.widen --from models/uocr-demo --out /tmp/wide.pt \
        --dims '{"hidden": 384, "heads": 8, "intermediate": 1024, "moe_intermediate": 384}'
    python3 -m uocr_dev.widen --from models/uocr-demo --out /tmp/deep.pt \
        --dims '{"sam_layers": 6, "sam_global": [5], "clip_layers": 2}'
    python3 -m uocr_dev.train --init-from /tmp/wide.pt ...
"""
import argparse
import json
import math
import re

import torch

from uocr_dev import train
from uocr_dev.model import DEMO_DIMS, UnlimitedOCR, make_config, rswa_mask

# roles of a decoder tensor's dimensions: what the added rows / columns start as
ZERO_NEW = ("embed_tokens.weight", "image_newline", "view_seperator", "projector.layers.weight",
            "projector.layers.bias",
            "o_proj.weight", "down_proj.weight", "mlp.gate.weight")
RANDOM_NEW = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight",
              "lm_head.weight")
NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "model.norm.weight")
# what an added encoder block writes into its input (zero: the block passes its input on)
BLOCK_WRITERS = ("attn.proj.weight", "attn.proj.bias", "mlp.lin2.weight", "mlp.lin2.bias",
                 "self_attn.out_proj.weight", "self_attn.out_proj.bias", "mlp.fc2.weight", "mlp.fc2.bias")


def added_block(name, source_dims):
    """True for a tensor of a SAM block or CLIP layer the source does not have."""
    for pattern, count in ((r"model\.sam_model\.blocks\.(\d+)\.", source_dims.sam_layers),
                           (r"model\.vision_model\.transformer\.layers\.(\d+)\.", source_dims.clip_layers)):
        m = re.match(pattern, name)
        if m and int(m.group(1)) >= count:
            return True
    return False


def widen_tensor(name, old, new_shape, ratio, gen):
    if tuple(old.shape) == tuple(new_shape) and not name.endswith(NORMS):
        return old.clone()
    old = old.float()
    if name.endswith(NORMS):
        scaled = old * math.sqrt(1 / ratio)
        out = torch.full(new_shape, float(scaled.mean()))
        out[:old.shape[0]] = scaled
        return out
    if name.endswith(ZERO_NEW):
        out = torch.zeros(new_shape)
    elif name.endswith(RANDOM_NEW):
        out = torch.randn(new_shape, generator=gen) * float(old.std())
    else:
        raise SystemExit(f"widen.py: no rule for {name} {tuple(old.shape)} -> {tuple(new_shape)}")
    out[tuple(slice(0, s) for s in old.shape)] = old
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="src", required=True, help="model folder or training checkpoint")
    ap.add_argument("--out", required=True, help="checkpoint for train.py --init-from")
    ap.add_argument("--dims", required=True,
                    help="JSON: hidden, heads, intermediate, moe_intermediate, sam_layers, sam_global, clip_layers")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    src = train.init_source(a.src)
    narrow = UnlimitedOCR(src["config"])
    narrow.load_state_dict(src["model"])
    dims = json.loads(a.dims)
    allowed = {"hidden", "heads", "intermediate", "moe_intermediate", "sam_layers", "sam_global", "clip_layers"}
    if not set(dims) <= allowed:
        raise SystemExit(f"widen.py: --dims may set {sorted(allowed)}")
    d0 = narrow.d
    if dims.get("hidden", d0.hidden) // dims.get("heads", d0.heads) != d0.hidden // d0.heads:
        raise SystemExit("widen.py: the head dimension must stay (new heads are added, not widened)")
    if dims.get("sam_layers", d0.sam_layers) < d0.sam_layers or dims.get("clip_layers", d0.clip_layers) < d0.clip_layers:
        raise SystemExit("widen.py: encoder blocks may be added, not removed")
    sam_global = set(dims.get("sam_global", d0.sam_global))
    if {i for i in sam_global if i < d0.sam_layers} != d0.sam_global:
        raise SystemExit("widen.py: the source's SAM blocks keep their attention (only added blocks may be global)")
    if any(i >= dims.get("sam_layers", d0.sam_layers) for i in sam_global):
        raise SystemExit("widen.py: sam_global names a SAM block the model does not have")
    want = dict(DEMO_DIMS)
    want.update(dims)
    cfg = make_config(want, vocab_size=d0.vocab)
    wide = UnlimitedOCR(cfg)
    ratio = wide.d.hidden / d0.hidden
    gen = torch.Generator().manual_seed(a.seed)
    old_state, state = narrow.state_dict(), {}
    for name, t in wide.state_dict().items():
        if added_block(name, d0):
            state[name] = torch.zeros_like(t) if name.endswith(BLOCK_WRITERS) else t.clone()
        elif name not in old_state:
            raise SystemExit(f"widen.py: {name} is not in the source (only widths and encoder depth may change)")
        else:
            state[name] = widen_tensor(name, old_state[name], t.shape, ratio, gen)
    wide.load_state_dict(state)
    check(narrow, wide, d0.image_size)
    torch.save(dict(config=cfg, model=wide.state_dict()), a.out)
    n0 = sum(p.numel() for p in narrow.parameters())
    n1 = sum(p.numel() for p in wide.parameters())
    print(f"{a.out}: {n0:,} -> {n1:,} parameters; logits match the source (above)")


@torch.no_grad()
def check(narrow, wide, size):
    """The widened model's logits on a page must be the source's (fp32 rounding only)."""
    gen = torch.Generator().manual_seed(1)
    pix = torch.rand(1, 3, size, size, generator=gen) * 2 - 1
    ids = torch.randint(2, narrow.d.vocab, (1, 12), generator=gen)
    logits = []
    for m in (narrow, wide):
        m.eval()
        vis = m.encode_pages(pix)
        h = torch.cat([vis, m.model.embed_tokens(ids)], 1)
        pos = torch.arange(h.shape[1])[None]
        mask = rswa_mask(vis.shape[1], ids.shape[1], m.d.window)[None, None]
        out, _ = m.decode(h, pos, mask)
        logits.append(m.lm_head(out))
    a, b = logits
    err = float((a - b).abs().max() / a.abs().max())
    print(f"widened vs source logits: max relative difference {err:.2e}")
    if err > 1e-4:
        raise SystemExit("widen.py: the widened model does not compute the source's function")


if __name__ == "__main__":
    main()
