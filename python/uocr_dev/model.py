"""Unlimited-OCR (DeepSeek-OCR architecture) at any size, in PyTorch, for training the demo model.

The module tree is built so that `state_dict()` names are exactly the upstream checkpoint names
(model.sam_model.*, model.vision_model.*, model.projector.layers.*, model.image_newline,
model.view_seperator, model.embed_tokens.weight, model.layers.L.*, model.norm.weight, lm_head.weight)
and the forward pass is exactly the upstream computation (MODEL-SPEC §3.5-§3.6, §5-§6):

  SAM-ViT:  patch conv 16x16 -> NHWC + pos_embed -> blocks (pre-LN eps 1e-6; windowed blocks zero-pad
            the *normed* map, attend per window over padding too; decomposed rel-pos bias from the
            unscaled q; exact GELU MLP) -> neck (1x1 conv, LayerNorm2d, 3x3 conv, LayerNorm2d, eps 1e-6,
            no bias) -> net_2, net_3 (3x3 stride-2 convs, no bias, no activation).
  CLIP:     [class_embedding; SAM features flattened] + position_embedding -> pre_layrnorm (eps 1e-5)
            -> pre-LN blocks (fused qkv, quick_gelu) ; no post-LN; CLS dropped.
  Glue:     Linear(cat[CLIP, SAM]) ; per page: rows of G/4 tokens + image_newline, then view_seperator.
  Decoder:  DeepSeek-V2 MHA path: RMSNorm 1e-6, q/k/v/o without bias, RoPE theta 10000 over the full
            head_dim (half rotation), layer 0 dense SiLU MLP, other layers MoE (softmax router, greedy
            top-k, weights not renormalised, fused shared expert); untied lm_head.
  R-SWA:    prompt tokens attend causally; a generated token sees the whole prompt plus the last n
            generated tokens including itself.

Nothing outside that computation is part of the model; training-only heads live in train.py.
The real dimensions are kept in the same config.json keys as the published model
(see make_config()).
"""
import copy
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from uocr_dev import ROOT
from uocr_dev.make_random import tensor_list

REAL_CONFIG = os.path.join(ROOT, "tests", "data", "unlimited-ocr", "config.json")

# Demo dimensions (the shipped model). Changing them changes the checkpoint.
DEMO_DIMS = dict(
    image_size=512,
    sam_width=96, sam_layers=3, sam_heads=3, sam_global=[], sam_window=8, sam_out=64, sam_down=[128, 192],
    clip_layers=1, clip_heads=4, clip_ffn=768, clip_image_size=112, clip_patch=14,
    hidden=192, heads=4, layers=4, intermediate=512, moe_intermediate=192, experts=4, topk=2, shared=1,
    vocab=512, sliding_window=64, max_positions=8192,
)


def make_config(dims, vocab_size=None, name="uocr-demo"):
    """config.json in the upstream key layout (copied from the published one), with our sizes."""
    d = dict(DEMO_DIMS)
    d.update(dims or {})
    if vocab_size is not None:
        d["vocab"] = vocab_size
    if os.path.exists(REAL_CONFIG):
        with open(REAL_CONFIG) as f:
            cfg = json.load(f)
    else:  # minimal skeleton with the same keys
        cfg = {"language_config": {}, "vision_config": {"width": {"clip-l-14-224": {}, "sam_vit_b": {}}},
               "projector_config": {"model_type": "mlp_projector", "projector_type": "linear"}}
    cfg = copy.deepcopy(cfg)
    cfg["_name_or_path"] = name
    cfg["candidate_resolutions"] = [[d["image_size"], d["image_size"]]]
    dec = {
        "bos_token_id": 0, "eos_token_id": 1, "first_k_dense_replace": 1,
        "hidden_size": d["hidden"], "intermediate_size": d["intermediate"],
        "max_position_embeddings": d["max_positions"], "moe_intermediate_size": d["moe_intermediate"],
        "n_routed_experts": d["experts"], "n_shared_experts": d["shared"],
        "num_attention_heads": d["heads"], "num_experts_per_tok": d["topk"],
        "num_hidden_layers": d["layers"], "num_key_value_heads": d["heads"],
        "v_head_dim": d["hidden"] // d["heads"], "vocab_size": d["vocab"],
    }
    for k, v in dec.items():
        cfg[k] = v
        if k in cfg["language_config"] or not cfg["language_config"]:
            cfg["language_config"][k] = v
    cfg["language_config"]["sliding_window_size"] = d["sliding_window"]
    cfg["sliding_window_size"] = d["sliding_window"]
    cfg["sliding_window"] = d["sliding_window"]
    cfg["model_type"] = "unlimited-ocr"
    cfg["projector_config"]["input_dim"] = d["sam_down"][1] * 2
    cfg["projector_config"]["n_embed"] = d["hidden"]
    vc = cfg["vision_config"]
    vc["image_size"] = d["image_size"]
    vc["width"]["clip-l-14-224"] = {
        "heads": d["clip_heads"], "image_size": d["clip_image_size"], "layers": d["clip_layers"],
        "patch_size": d["clip_patch"], "width": d["sam_down"][1], "ffn_hidden_size": d["clip_ffn"]}
    vc["width"]["sam_vit_b"] = {
        "downsample_channels": list(d["sam_down"]), "global_attn_indexes": list(d["sam_global"]),
        "heads": d["sam_heads"], "layers": d["sam_layers"], "width": d["sam_width"],
        "out_chans": d["sam_out"], "window_size": d["sam_window"]}
    return cfg


class Dims:
    """Sizes read from a config.json dict the way uocr's C++ loader reads them."""

    def __init__(self, cfg):
        vw = cfg.get("vision_config", {}).get("width", {})
        sam, clip = vw.get("sam_vit_b", {}), vw.get("clip-l-14-224", {})
        self.image_size = cfg.get("vision_config", {}).get("image_size", 1024)
        self.patch = 16
        self.grid = self.image_size // self.patch
        self.sam_width, self.sam_layers, self.sam_heads = sam.get("width", 768), sam.get("layers", 12), sam.get("heads", 12)
        self.sam_window = sam.get("window_size", 14)
        self.sam_global = set(sam.get("global_attn_indexes", [2, 5, 8, 11]))
        self.sam_out = sam.get("out_chans", 256)
        self.net2, self.net3 = sam.get("downsample_channels", [512, 1024])
        self.clip_width, self.clip_layers, self.clip_heads = clip.get("width", 1024), clip.get("layers", 24), clip.get("heads", 16)
        self.clip_ffn = clip.get("ffn_hidden_size", 4096)
        self.clip_patch = clip.get("patch_size", 14)
        self.clip_positions = (clip.get("image_size", 224) // self.clip_patch) ** 2 + 1
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = self.hidden // self.heads
        self.layers = cfg["num_hidden_layers"]
        self.intermediate = cfg["intermediate_size"]
        self.moe_intermediate = cfg.get("moe_intermediate_size", 0)
        self.experts = cfg.get("n_routed_experts", 0) or 0
        self.shared = cfg.get("n_shared_experts", 0) or 0
        self.topk = cfg.get("num_experts_per_tok", 0) or 0
        self.first_dense = cfg.get("first_k_dense_replace", 0)
        self.vocab = cfg["vocab_size"]
        self.rope_theta = cfg.get("rope_theta", 10000.0)
        self.rms_eps = cfg.get("rms_norm_eps", 1e-6)
        self.window = cfg.get("sliding_window_size", cfg.get("sliding_window", 0)) or 0
        self.proj_in = cfg.get("projector_config", {}).get("input_dim", 2048)
        self.tok_grid = self.grid // 4
        self.tokens_per_page = self.tok_grid * (self.tok_grid + 1) + 1
        assert self.clip_width == self.net3 and self.proj_in == self.clip_width + self.net3
        assert self.clip_positions == self.tok_grid ** 2 + 1, "CLIP positions must be (G/4)^2+1 (no interpolation)"


# ----------------------------------------------------------------------------------------- SAM


class LayerNorm2d(nn.Module):
    def __init__(self, c, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class PatchEmbed(nn.Module):
    def __init__(self, dim, patch=16):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)

    def forward(self, x):
        return self.proj(x).permute(0, 2, 3, 1)


def get_rel_pos(q_size, k_size, rel_pos):
    max_rel_dist = int(2 * max(q_size, k_size) - 1)
    if rel_pos.shape[0] != max_rel_dist:
        r = F.interpolate(rel_pos.float().reshape(1, rel_pos.shape[0], -1).permute(0, 2, 1), size=max_rel_dist, mode="linear")
        rel_pos = r.reshape(-1, max_rel_dist).permute(1, 0).to(rel_pos.dtype)
    q_coords = torch.arange(q_size, device=rel_pos.device)[:, None] * max(k_size / q_size, 1.0)
    k_coords = torch.arange(k_size, device=rel_pos.device)[None, :] * max(q_size / k_size, 1.0)
    rel = (q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)
    return rel_pos[rel.long()]


class SamAttention(nn.Module):
    def __init__(self, dim, heads, span):
        super().__init__()
        self.heads = heads
        hd = dim // heads
        self.scale = hd ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * span - 1, hd))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * span - 1, hd))

    def forward(self, x):
        B, H, W, _ = x.shape
        qkv = self.qkv(x).reshape(B, H * W, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, B * self.heads, H * W, -1).unbind(0)
        Rh = get_rel_pos(H, H, self.rel_pos_h)
        Rw = get_rel_pos(W, W, self.rel_pos_w)
        r_q = q.reshape(B * self.heads, H, W, -1)
        rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, Rh)  # unscaled q
        rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, Rw)
        bias = (rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]).reshape(B * self.heads, H * W, H * W)
        attn = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=self.scale).softmax(-1)
        o = torch.bmm(attn, v)
        o = o.view(B, self.heads, H, W, -1).permute(0, 2, 3, 1, 4).reshape(B, H, W, -1)
        return self.proj(o)


class SamMLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.lin1 = nn.Linear(dim, hidden)
        self.lin2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.lin2(F.gelu(self.lin1(x)))  # exact (erf) GELU


def window_partition(x, ws):
    B, H, W, C = x.shape
    ph, pw = (ws - H % ws) % ws, (ws - W % ws) % ws
    if ph or pw:
        x = F.pad(x, (0, 0, 0, pw, 0, ph))  # zeros after norm1
    Hp, Wp = H + ph, W + pw
    x = x.view(B, Hp // ws, ws, Wp // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws, ws, C)
    return x, (Hp, Wp)


def window_unpartition(w, ws, pad_hw, hw):
    Hp, Wp = pad_hw
    H, W = hw
    B = w.shape[0] // (Hp * Wp // ws // ws)
    x = w.view(B, Hp // ws, Wp // ws, ws, ws, -1).permute(0, 1, 3, 2, 4, 5).reshape(B, Hp, Wp, -1)
    return x[:, :H, :W, :].contiguous()


class SamBlock(nn.Module):
    def __init__(self, dim, heads, window, grid):
        super().__init__()
        self.window = window  # 0 = global
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = SamAttention(dim, heads, window if window > 0 else grid)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = SamMLP(dim, 4 * dim)

    def forward(self, x):
        shortcut = x
        x = self.norm1(x)
        if self.window > 0:
            H, W = x.shape[1], x.shape[2]
            x, pad_hw = window_partition(x, self.window)
        x = self.attn(x)
        if self.window > 0:
            x = window_unpartition(x, self.window, pad_hw, (H, W))
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class SamEncoder(nn.Module):
    def __init__(self, d: Dims):
        super().__init__()
        self.patch_embed = PatchEmbed(d.sam_width, d.patch)
        self.pos_embed = nn.Parameter(torch.zeros(1, d.grid, d.grid, d.sam_width))
        self.blocks = nn.ModuleList(
            [SamBlock(d.sam_width, d.sam_heads, 0 if i in d.sam_global else d.sam_window, d.grid) for i in range(d.sam_layers)])
        self.neck = nn.Sequential(
            nn.Conv2d(d.sam_width, d.sam_out, 1, bias=False), LayerNorm2d(d.sam_out),
            nn.Conv2d(d.sam_out, d.sam_out, 3, padding=1, bias=False), LayerNorm2d(d.sam_out))
        self.net_2 = nn.Conv2d(d.sam_out, d.net2, 3, stride=2, padding=1, bias=False)
        self.net_3 = nn.Conv2d(d.net2, d.net3, 3, stride=2, padding=1, bias=False)

    def forward(self, x):
        x = self.patch_embed(x)
        assert x.shape[1] == self.pos_embed.shape[1], "page size must equal vision_config.image_size"
        x = x + self.pos_embed
        for b in self.blocks:
            x = b(x)
        x = self.neck(x.permute(0, 3, 1, 2))
        return self.net_3(self.net_2(x))


# ----------------------------------------------------------------------------------------- CLIP


class ClipEmbeddings(nn.Module):
    def __init__(self, d: Dims):
        super().__init__()
        self.class_embedding = nn.Parameter(torch.zeros(d.clip_width))
        self.patch_embedding = nn.Conv2d(3, d.clip_width, d.clip_patch, d.clip_patch, bias=False)  # unused upstream
        self.position_embedding = nn.Embedding(d.clip_positions, d.clip_width)

    def forward(self, feats):  # feats [B, C, g, g] from SAM
        p = feats.flatten(2).transpose(1, 2)
        cls = self.class_embedding.expand(p.shape[0], 1, -1)
        x = torch.cat([cls, p], 1)
        assert x.shape[1] == self.position_embedding.weight.shape[0]
        return x + self.position_embedding.weight[None]


class ClipAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv_proj(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(o.transpose(1, 2).reshape(B, T, C))


class ClipMLP(nn.Module):
    def __init__(self, dim, ffn):
        super().__init__()
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(h * torch.sigmoid(1.702 * h))  # quick_gelu


class ClipLayer(nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.self_attn = ClipAttention(dim, heads)
        self.layer_norm2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = ClipMLP(dim, ffn)

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class ClipTransformer(nn.Module):
    def __init__(self, d: Dims):
        super().__init__()
        self.layers = nn.ModuleList([ClipLayer(d.clip_width, d.clip_heads, d.clip_ffn) for _ in range(d.clip_layers)])


class ClipEncoder(nn.Module):
    def __init__(self, d: Dims):
        super().__init__()
        self.embeddings = ClipEmbeddings(d)
        self.pre_layrnorm = nn.LayerNorm(d.clip_width, eps=1e-5)
        self.transformer = ClipTransformer(d)

    def forward(self, sam_feats):
        x = self.pre_layrnorm(self.embeddings(sam_feats))
        for layer in self.transformer.layers:
            x = layer(x)
        return x


class Projector(nn.Module):
    def __init__(self, d: Dims):
        super().__init__()
        self.layers = nn.Linear(d.proj_in, d.hidden)

    def forward(self, x):
        return self.layers(x)


# ----------------------------------------------------------------------------------------- decoder


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(v + self.eps)).to(x.dtype)


def rope_cos_sin(positions, head_dim, theta, dtype=torch.float32):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    ang = positions.float()[..., None] * inv
    emb = torch.cat([ang, ang], -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class DecoderAttention(nn.Module):
    def __init__(self, d: Dims):
        super().__init__()
        self.heads, self.kv_heads, self.hd = d.heads, d.kv_heads, d.head_dim
        self.q_proj = nn.Linear(d.hidden, d.heads * d.head_dim, bias=False)
        self.k_proj = nn.Linear(d.hidden, d.kv_heads * d.head_dim, bias=False)
        self.v_proj = nn.Linear(d.hidden, d.kv_heads * d.head_dim, bias=False)
        self.o_proj = nn.Linear(d.heads * d.head_dim, d.hidden, bias=False)

    def forward(self, x, cos, sin, mask, want_probs=None, cache=None):
        """x [B,T,C]; mask: additive [B or 1, 1, T, S] or None; cache: dict with 'k','v' [B,H,S0,hd]
        that the new keys are appended to (the caller applies R-SWA by passing a mask)."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], 2)
                v = torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        if self.kv_heads != self.heads:
            r = self.heads // self.kv_heads
            k, v = k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd)
        if mask is not None:
            s = s + mask
        p = s.float().softmax(-1).to(q.dtype)
        o = torch.matmul(p, v).transpose(1, 2).reshape(B, T, -1)
        probs = p[:, want_probs] if want_probs is not None else None
        return self.o_proj(o), probs


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoEGate(nn.Module):
    def __init__(self, hidden, n):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, hidden))


class MoE(nn.Module):
    def __init__(self, d: Dims):
        super().__init__()
        self.topk, self.n = d.topk, d.experts
        self.gate = MoEGate(d.hidden, d.experts)
        self.experts = nn.ModuleList([MLP(d.hidden, d.moe_intermediate) for _ in range(d.experts)])
        self.shared_experts = MLP(d.hidden, d.moe_intermediate * d.shared) if d.shared else None

    def forward(self, x):
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        scores = F.linear(h, self.gate.weight).float().softmax(-1)
        w, idx = torch.topk(scores, self.topk, dim=-1, sorted=False)  # greedy, not renormalised
        y = torch.zeros_like(h, dtype=torch.float32)
        for e in range(self.n):
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            out = self.experts[e](h[tok]).float() * w[tok, slot, None]
            y = y.index_add(0, tok, out)
        y = y.to(h.dtype)
        if self.shared_experts is not None:
            y = y + self.shared_experts(h)
        # load-balancing statistics for the training-only auxiliary loss
        self.last_aux = (scores, idx)
        return y.view(shape)


class DecoderLayer(nn.Module):
    def __init__(self, d: Dims, moe: bool):
        super().__init__()
        self.self_attn = DecoderAttention(d)
        self.mlp = MoE(d) if moe else MLP(d.hidden, d.intermediate)
        self.input_layernorm = RMSNorm(d.hidden, d.rms_eps)
        self.post_attention_layernorm = RMSNorm(d.hidden, d.rms_eps)

    def forward(self, x, cos, sin, mask, want_probs=None, cache=None):
        a, probs = self.self_attn(self.input_layernorm(x), cos, sin, mask, want_probs, cache)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), probs


class Inner(nn.Module):
    """`model.` prefix of the checkpoint."""

    def __init__(self, d: Dims):
        super().__init__()
        self.sam_model = SamEncoder(d)
        self.vision_model = ClipEncoder(d)
        self.projector = Projector(d)
        self.image_newline = nn.Parameter(torch.zeros(d.hidden))
        self.view_seperator = nn.Parameter(torch.zeros(d.hidden))
        self.embed_tokens = nn.Embedding(d.vocab, d.hidden)
        self.layers = nn.ModuleList([DecoderLayer(d, d.experts > 0 and i >= d.first_dense) for i in range(d.layers)])
        self.norm = RMSNorm(d.hidden, d.rms_eps)


def sincos_2d(h, w, dim):
    """Fixed 2-D sin-cos table [h, w, dim] (MAE style): init only."""
    assert dim % 4 == 0
    q = dim // 4
    omega = 1.0 / (10000 ** (torch.arange(q, dtype=torch.float32) / q))
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    oy, ox = ys[..., None] * omega, xs[..., None] * omega
    return torch.cat([oy.sin(), oy.cos(), ox.sin(), ox.cos()], -1)


class UnlimitedOCR(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.d = d = Dims(cfg)
        self.model = Inner(d)
        self.lm_head = nn.Linear(d.hidden, d.vocab, bias=False)
        self.reset_parameters()

    # -------------------------------------------------------------- init (upstream-compatible)
    @torch.no_grad()
    def reset_parameters(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        d = self.d

        def normal_(t, std):
            t.copy_(torch.randn(t.shape, generator=g) * std)

        for name, p in self.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                normal_(p, 1.0 / math.sqrt(fan_in))
            elif name.endswith("bias"):
                p.zero_()
            elif "norm" in name or name.endswith("layernorm.weight") or ".neck." in name:
                p.fill_(1.0)
        m = self.model
        # fixed 2-D sin-cos positions as the starting point of both learned tables
        m.sam_model.pos_embed.copy_(sincos_2d(d.grid, d.grid, d.sam_width)[None] * 0.5)
        tg = d.tok_grid
        pe = torch.zeros(d.clip_positions, d.clip_width)
        pe[1:] = sincos_2d(tg, tg, d.clip_width).reshape(tg * tg, -1) * 0.5
        m.vision_model.embeddings.position_embedding.weight.copy_(pe)
        normal_(m.vision_model.embeddings.class_embedding, 0.02)
        for blk in m.sam_model.blocks:
            blk.attn.rel_pos_h.zero_()
            blk.attn.rel_pos_w.zero_()
        normal_(m.embed_tokens.weight, 1.0)
        normal_(m.image_newline, 1.0)
        normal_(m.view_seperator, 1.0)
        normal_(self.lm_head.weight, 1.0 / math.sqrt(d.hidden))
        # residual output projections start small (GPT-2 style)
        for layer in m.layers:
            layer.self_attn.o_proj.weight.mul_(0.5 / math.sqrt(d.layers))
        for layer in m.vision_model.transformer.layers:
            layer.self_attn.out_proj.weight.mul_(0.5)
            layer.mlp.fc2.weight.mul_(0.5)
        for blk in m.sam_model.blocks:
            blk.attn.proj.weight.mul_(0.5)
            blk.mlp.lin2.weight.mul_(0.5)

    # -------------------------------------------------------------- vision
    def encode_pages(self, pixels, return_grid=False):
        """pixels [N,3,S,S] normalised to [-1,1] -> per-page tokens [N, g*(g+1)+1, hidden] and the
        projected grid [N, g, g, hidden] (before newline/separator insertion)."""
        m = self.model
        sam = m.sam_model(pixels)  # [N, C, g, g]
        clip = m.vision_model(sam)  # [N, g*g+1, C]
        feat = torch.cat([clip[:, 1:], sam.flatten(2).transpose(1, 2)], -1)
        E = m.projector(feat)  # [N, g*g, hidden]
        N, g = E.shape[0], self.d.tok_grid
        grid = E.view(N, g, g, -1)
        nl = m.image_newline.view(1, 1, 1, -1).expand(N, g, 1, -1)
        rows = torch.cat([grid, nl], 2).reshape(N, g * (g + 1), -1)
        sep = m.view_seperator.view(1, 1, -1).expand(N, 1, -1)
        tokens = torch.cat([rows, sep], 1)
        return (tokens, grid) if return_grid else tokens

    # -------------------------------------------------------------- decoder
    def decode(self, h, positions, mask, want_probs=None, caches=None, probs_layers=()):
        """h [B,T,C] input embeddings; positions [T] or [B,T]; mask additive [.,1,T,S] or None."""
        cos, sin = rope_cos_sin(positions, self.d.head_dim, self.d.rope_theta, h.dtype)
        if cos.dim() == 2:
            cos, sin = cos[None, None], sin[None, None]
        else:
            cos, sin = cos[:, None], sin[:, None]
        all_probs = {}
        for i, layer in enumerate(self.model.layers):
            wp = want_probs if i in probs_layers else None
            h, probs = layer(h, cos, sin, mask, wp, caches[i] if caches is not None else None)
            if probs is not None:
                all_probs[i] = probs
        h = self.model.norm(h)
        return h, all_probs

    def moe_aux_loss(self):
        loss = 0.0
        for layer in self.model.layers:
            if isinstance(layer.mlp, MoE) and hasattr(layer.mlp, "last_aux"):
                scores, idx = layer.mlp.last_aux
                n = scores.shape[-1]
                f = torch.zeros(n, device=scores.device).index_add_(
                    0, idx.reshape(-1), torch.ones(idx.numel(), device=scores.device)) / idx.numel()
                loss = loss + n * (f * scores.mean(0)).sum()
        return loss

    def export_state_dict(self):
        """Exactly the checkpoint tensors (no buffers, nothing training-only)."""
        return {k: v.detach() for k, v in self.state_dict().items()}


def rswa_mask(P, T, n, dtype=torch.float32, device=None):
    """Additive [P+T, P+T] mask: prefix causal; generated rows see the prefix + last n generated."""
    L = P + T
    i = torch.arange(L, device=device)[:, None]
    j = torch.arange(L, device=device)[None, :]
    ok = j <= i
    if n and n > 0:
        ok = ok & ((j < P) | (i - j < n))
    m = torch.zeros(L, L, dtype=dtype, device=device)
    m.masked_fill_(~ok, float("-inf"))
    return m


def count_params(model):
    return sum(v.numel() for v in model.export_state_dict().values())


def check_tensor_set(model, cfg):
    """Compare names/shapes with uocr_dev.make_random's tensor_list(cfg).

    make_random.py sizes the SAM pos_embed and global rel-pos tables for a 1024 page (grid 64)
    whatever vision_config.image_size says, while uocr's loader (include/uocr/model/weights.hpp)
    expects grid = image_size/16; for those tensors the loader's shape is the one checked."""
    want = {n: list(s) for n, s, _ in tensor_list(cfg)}
    d = Dims(cfg)
    notes = []
    g_loader = d.grid
    for n in list(want):
        if n.endswith("sam_model.pos_embed") and want[n][1] != g_loader:
            notes.append(f"{n}: make_random {want[n]} vs loader grid {g_loader}")
            want[n] = [1, g_loader, g_loader, want[n][3]]
        if (n.endswith("rel_pos_h") or n.endswith("rel_pos_w")):
            b = int(n.split("blocks.")[1].split(".")[0])
            if b in d.sam_global and want[n][0] != 2 * g_loader - 1:
                notes.append(f"{n}: make_random {want[n]} vs loader {2 * g_loader - 1} rows")
                want[n] = [2 * g_loader - 1, want[n][1]]
    have = {n: list(v.shape) for n, v in model.export_state_dict().items()}
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    bad = sorted(n for n in set(want) & set(have) if want[n] != have[n])
    return missing, extra, bad, notes


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Tensor-set check of the demo model against make_random.tensor_list")
    ap.add_argument("--config", help="config.json (default: the demo dims)")
    args = ap.parse_args()
    if args.config:
        with open(args.config) as f:
            cfg = json.load(f)
    else:
        cfg = make_config({})
    torch.manual_seed(0)
    m = UnlimitedOCR(cfg)
    missing, extra, bad, notes = check_tensor_set(m, cfg)
    sd = m.export_state_dict()
    print(f"{len(sd)} tensors, {count_params(m):,} parameters")
    for n in notes:
        print("note:", n)
    print("missing:", missing)
    print("extra:", extra)
    print("shape mismatches:", bad)
    raise SystemExit(1 if (missing or extra or bad) else 0)
