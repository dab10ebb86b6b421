#!/usr/bin/env python3
"""Cross-check of atrex's operator references against independent PyTorch implementations.

Every operator of the suite is implemented again below, in PyTorch only, from its semantics
(`atrex problems show OP`, the Atrex-Bench reference.py files, shared notes); the code shares
nothing with problems/src. For each dump written by `atrex problems dump` (the generated inputs,
the resolved parameters and the reference outputs of one shape, atrex.dump/1), this script
recomputes the outputs from the same inputs and compares them with the operator's rule:

  allclose      |t - r| <= atol + rtol |r|, NaN/inf matched; a low-signal output (one that an
                all-zero output would pass) gets atol * max|r| instead of atol (compare.h)
  exact         integers (and copied values) bit for bit
  segment-set   token lists whose order within an expert is free: same multiset per segment
  prefix        only the data-dependent valid prefix (num_tokens_post_pad) is compared
  tie-aware     routing ids: equal, or a near-tie of the recomputed scores (1e-5 relative)
  fp8-dequant   fp8 q compared as q * scale, one e4m3 step at the reference's magnitude + rtol
  scale-rel     quantisation scales: |t - r| <= rtol |r|
  fp8-step      fp8 outputs: allclose widened by one e4m3 step; NaN (torch's overflow) only next
                to NaN or +-448

Usage:
  xcheck.py DUMP_DIR...                       check existing dumps (found recursively)
  xcheck.py --atrex build/release/bin/atrex --backend cuda --work /tmp/atrex-xcheck
                                              dump each operator (--shapes xcheck), check it, delete it
Prints one row per (operator, shape); exit code 1 when any row fails. Needs only torch.
"""
import argparse
import json
import math
import pathlib
import shlex
import shutil
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
HAS_FP8 = hasattr(torch, "float8_e4m3fn")
ROUTING_TIE_REL = 1e-5

# ---------------------------------------------------------------------------------------------
# fp8 e4m3fn (OCP): 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN = 0x7f/0xff.


def _e4m3_table():
    vals = []
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            vals.append(float("nan"))
        elif e == 0:
            vals.append(sign * m * 2.0 ** -9)
        else:
            vals.append(sign * (1 + m / 8) * 2.0 ** (e - 7))
    return torch.tensor(vals, dtype=F32)


E4M3_TABLE = _e4m3_table()


def decode_e4m3(u8):
    """uint8 bytes -> float32 values."""
    if HAS_FP8:
        return u8.view(torch.float8_e4m3fn).float()
    return E4M3_TABLE.to(u8.device)[u8.long()]


def e4m3_step(v):
    """Spacing of the e4m3 grid at |v| (the binade's upper spacing at a power of two)."""
    a = v.abs().float()
    _, e = torch.frexp(a)  # a = m 2^e, m in [0.5, 1): binade [2^(e-1), 2^e), step 2^(e-4)
    step = torch.pow(2.0, (e - 4).float())
    return torch.where(a < 2.0 ** -6, torch.full_like(a, 2.0 ** -9), step)


def round_e4m3(x):
    """float -> nearest e4m3fn value (ties to even), as float32; NaN past 464 like torch's cast."""
    x = x.float()
    if HAS_FP8:
        return x.to(torch.float8_e4m3fn).float()
    q = torch.round(x.abs() / e4m3_step(x)) * e4m3_step(x)  # torch.round: half to even
    q = torch.where(q > 448.0, torch.full_like(q, float("nan")), q)
    return torch.copysign(q, x)


# ---------------------------------------------------------------------------------------------
# Dumps (atrex.dump/1): raw little-endian tensors named by manifest.json.

STORAGE = {"bf16": torch.int16, "fp16": F16, "fp32": F32, "fp64": torch.float64, "int32": torch.int32,
           "int64": torch.int64, "uint8": torch.uint8, "bool": torch.uint8, "fp8_e4m3": torch.uint8}


def load_tensor(folder, entry, device):
    """bf16 is read as int16 and viewed; fp8 e4m3 comes back as its float32 values."""
    numel = math.prod(entry["dims"])
    storage = STORAGE[entry["dtype"]]
    path = folder / entry["file"]
    itemsize = torch.tensor([], dtype=storage).element_size()
    if path.stat().st_size != numel * itemsize:
        raise ValueError(f"{path}: {path.stat().st_size} bytes, expected {numel * itemsize}")
    t = torch.from_file(str(path), shared=False, size=numel, dtype=storage)
    if entry["dtype"] == "bf16":
        t = t.view(BF16)
    t = t.reshape(entry["dims"]).to(device)
    return decode_e4m3(t) if entry["dtype"] == "fp8_e4m3" else t


# ---------------------------------------------------------------------------------------------
# The operators, from their semantics. `x` maps input names to tensors, `p` holds the resolved
# parameters; each returns output name -> tensor (fp8 outputs as their float values).

OPS = {}


def op(name):
    def register(fn):
        OPS[name] = fn
        return fn
    return register


def rms(v, eps, mean=True):
    """rsqrt(mean(v^2) + eps) over the last dim (sum instead of mean when mean=False), fp32."""
    ss = (v * v).sum(-1, keepdim=True)
    return torch.rsqrt((ss / v.shape[-1] if mean else ss) + eps)


@op("rms_norm")
def rms_norm(x, p):
    v = x["x"].float()
    return {"out": (v * rms(v, p["eps"]) * x["weight"].float()).to(BF16)}


@op("fused_add_rms_norm")
def fused_add_rms_norm(x, p):
    r = (x["x"].float() + x["residual"].float()).to(BF16)
    v = r.float()
    return {"out": (v * rms(v, p["eps"]) * x["weight"].float()).to(BF16), "residual": r}


@op("l2_norm")
def l2_norm(x, p):
    v = x["x"].float()
    return {"out": (v * rms(v, p["eps"], mean=False)).to(BF16)}


@op("silu_and_mul")
def silu_and_mul(x, p):
    v = x["x"]
    d = v.shape[-1] // 2
    gate = v[..., :d].float()
    act = (gate * torch.sigmoid(gate)).to(BF16)
    return {"out": (act.float() * v[..., d:2 * d].float()).to(BF16)}


@op("moe_sum_reduce")
def moe_sum_reduce(x, p):
    return {"out": (x["expert_outputs"].float().sum(1) * p["routed_scaling_factor"]).to(BF16)}


def quantise_rows(v, fp8_max, scale):
    """fp8 values of v / scale, clamped to +-fp8_max (scale broadcasts over rows or groups)."""
    return round_e4m3(torch.clamp(v / scale, -fp8_max, fp8_max))


@op("fp8_dynamic_per_token_quant")
def fp8_dynamic_per_token_quant(x, p):
    v = x["x"].float()
    scale = v.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 240.0  # e4m3fnuz range
    return {"q": quantise_rows(v, 240.0, scale), "scale": scale.squeeze(-1)}


@op("per_token_group_quant_fp8")
def per_token_group_quant_fp8(x, p):
    v = x["x"].float()
    t, h = v.shape
    groups = v.reshape(t, h // p["group_size"], p["group_size"])
    scales = (groups.abs().amax(-1) / 448.0).clamp(min=1e-10)
    q = quantise_rows(groups, 448.0, scales.unsqueeze(-1)).reshape(t, h)
    return {"quantized": q, "scales": scales}


@op("fused_rmsnorm_quant")
def fused_rmsnorm_quant(x, p):
    r = (x["x"].float() + x["residual"].float()).to(BF16)
    v = r.float()
    # F.rms_norm's composite: the normalised rows round to bf16, then the bf16 weight multiply.
    normed = ((v * rms(v, p["eps"])).to(BF16).float() * x["weight"].float()).to(BF16).float()
    scale = normed.abs().amax(-1, keepdim=True) / 240.0
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return {"quantized": round_e4m3(normed / scale), "scale": scale, "residual_out": r}


def gate_activation(z, name):
    return z * torch.sigmoid(z) if name in ("silu", "swish") else torch.sigmoid(z)


@op("gated_rms_norm")
def gated_rms_norm(x, p):
    v, z = x["x"].float(), x["z"].float()
    act = gate_activation(z, p["activation"])
    if not p["norm_before_gate"]:
        v = v * act
    out = v * rms(v, p["eps"]) * x["weight"].float()
    if p["norm_before_gate"]:
        out = out * act
    return {"out": out.to(BF16)}


@op("layer_norm")
def layer_norm(x, p):
    v = x["x"].float()
    mean = v.mean(-1, keepdim=True)
    var = ((v - mean) ** 2).mean(-1, keepdim=True)  # biased
    out = (v - mean) * torch.rsqrt(var + 1e-5) * x["weight"].float() + x["bias"].float()
    return {"out": out.to(BF16)}


@op("fused_qk_rmsnorm")
def fused_qk_rmsnorm(x, p):
    hs, d = x["hidden_states"], p["size_per_head"]
    t = hs.shape[0]
    nq, nkv = p["head_num"] * d, p["kv_head_num"] * d

    def norm(part, w):
        v = part.reshape(t, -1, d).float()
        return ((v * rms(v, p["eps"])).to(F16).float() * w.float()).to(F16).reshape(t, -1)

    out = torch.cat([norm(hs[:, :nq], x["q_weight"]), norm(hs[:, nq:nq + nkv], x["k_weight"]), hs[:, nq + nkv:]], 1)
    return {"out": out}


@op("linear_sigmoid_mul")
def linear_sigmoid_mul(x, p):
    gate = (x["hidden_states"].float() @ x["weight"].float().t() + x["bias"].float()).to(BF16)
    return {"out": (torch.sigmoid(gate.float()) * x["post_mul_mat"].float()).to(BF16)}


def expert_segments(flat_ids, experts):
    """Flat indices grouped by ascending expert (ascending within one), and the counts."""
    order = torch.sort(flat_ids.long(), stable=True).indices
    return order.to(torch.int32), torch.bincount(flat_ids.long(), minlength=experts)[:experts]


@op("moe_align_block_size")
def moe_align_block_size(x, p):
    ids = x["topk_ids"].reshape(-1)
    pairs, experts, bs = ids.numel(), p["num_experts"], p["block_size"]
    order, counts = expert_segments(ids, experts)
    total = pairs + experts * (bs - 1)
    sorted_ids = torch.full((total,), pairs, dtype=torch.int32, device=ids.device)
    expert_ids = torch.full(((total + bs - 1) // bs,), -1, dtype=torch.int32, device=ids.device)
    src = dst = 0
    for e, c in enumerate(counts.tolist()):
        if c == 0:
            continue
        padded = (c + bs - 1) // bs * bs
        sorted_ids[dst:dst + c] = order[src:src + c]
        expert_ids[dst // bs:(dst + padded) // bs] = e
        src, dst = src + c, dst + padded
    return {"sorted_token_ids": sorted_ids, "expert_ids": expert_ids,
            "num_tokens_post_pad": torch.tensor([dst], dtype=torch.int32, device=ids.device)}


@op("moe_count_and_sort")
def moe_count_and_sort(x, p):
    ids = x["topk_ids"].reshape(-1)
    order, counts = expert_segments(ids, p["num_experts"])
    cumsum = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)
    return {"sorted_token_ids": order, "expert_token_counts": counts.to(torch.int32), "cumsum": cumsum}


def gating_scores(logits, p):
    scores = torch.softmax(logits.float(), -1)
    groups, keep = p["num_expert_groups"], p["topk_group"]
    if groups > 0 and keep > 0:
        t, e = scores.shape
        best = scores.reshape(t, groups, e // groups).amax(-1)
        kept = torch.zeros_like(best, dtype=torch.bool).scatter(1, best.topk(keep, -1).indices, True)
        scores = scores.masked_fill(~kept.repeat_interleave(e // groups, 1), 0.0)
    return scores


@op("moe_topk_gating_softmax")
def moe_topk_gating_softmax(x, p):
    w, ids = gating_scores(x["gating_output"], p).topk(p["top_k"], -1)
    return {"topk_weights": w, "topk_ids": ids.to(torch.int32)}


@op("topk_filter")
def topk_filter(x, p):
    v = x["logits"]
    k = min(p["top_k"], v.shape[-1])
    threshold = v.topk(k, -1).values[..., -1:]
    return {"out": torch.where(v < threshold, torch.full_like(v, float("-inf")), v)}


def silu_gated(h, inter):
    gate, up = h[:, :inter], h[:, inter:]
    return gate * torch.sigmoid(gate) * up


@op("fused_moe")
def fused_moe(x, p):
    hs = x["hidden_states"].float()
    ids, weights = x["topk_ids"], x["topk_weights"]
    out = torch.zeros_like(hs)
    for e in torch.unique(ids).tolist():
        hit = ids == e
        tokens = hit.any(1).nonzero().squeeze(1)
        w = (weights * hit).sum(1)[tokens]
        h = hs[tokens] @ x["w1"][e].float().t()
        y = silu_gated(h, p["intermediate_size"]) @ x["w2"][e].float().t()
        out.index_add_(0, tokens, y * w[:, None])
    return {"out": out}


def expand_blocks(scales, rows_per, cols_per):
    return scales.repeat_interleave(rows_per, 0).repeat_interleave(cols_per, 1)


@op("fp8_blockscale_fused_moe")
def fp8_blockscale_fused_moe(x, p):
    bn, bk = p["scale_block_n"], p["scale_block_k"]
    hs = x["hidden_states"] * x["a_scale"].repeat_interleave(bk, 1)
    ids, weights = x["topk_ids"], x["topk_weights"]
    out = torch.zeros_like(hs)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        w1 = x["w1"][e] * expand_blocks(x["fc1_scale"][e], bn, bk)
        w2 = x["w2"][e] * expand_blocks(x["fc2_scale"][e], bk, bn)
        y = silu_gated(hs[tok] @ w1.t(), p["intermediate_size"]) @ w2.t()
        out.index_add_(0, tok, y * weights[tok, slot][:, None])
    return {"out": round_e4m3(out)}


@op("block_scaled_mm")
def block_scaled_mm(x, p):
    a, b, sa = x["a"], x["b"], x["a_scales"]
    sb = x["b_scales"].repeat_interleave(p["group_n"], 0)  # [N, K / group_k]
    gk = p["group_k"]
    out = torch.empty(a.shape[0], b.shape[0], dtype=F32, device=a.device)
    for m0 in range(0, a.shape[0], 16384):
        m1 = min(m0 + 16384, a.shape[0])
        acc = torch.zeros(m1 - m0, b.shape[0], dtype=F32, device=a.device)
        for kb in range(sa.shape[1]):
            dot = a[m0:m1, kb * gk:(kb + 1) * gk] @ b[:, kb * gk:(kb + 1) * gk].t()
            acc += dot * sa[m0:m1, kb:kb + 1] * sb[:, kb][None, :]
        out[m0:m1] = acc
    return {"out": out}


def attention(q, k, v, scale, causal=False):
    """softmax(q k^T scale) v per head in fp32: q [H, Lq, d], k [H, Lk, d], v [H, Lk, dv].
    Causal: query i attends keys 0..i. Query rows are chunked to bound the score matrix."""
    out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
    chunk = max(1, (1 << 28) // max(1, q.shape[0] * k.shape[1]))
    for s in range(0, q.shape[1], chunk):
        e = min(s + chunk, q.shape[1])
        scores = torch.matmul(q[:, s:e], k.transpose(1, 2)) * scale
        if causal:
            rows = torch.arange(s, e, device=q.device)[:, None]
            cols = torch.arange(k.shape[1], device=q.device)[None, :]
            scores = scores.masked_fill(cols > rows, float("-inf"))
        out[:, s:e] = torch.matmul(torch.softmax(scores, -1), v)
    return out


def heads_first(t, repeat=1):
    """[L, H, d] -> [H * repeat, L, d] fp32 (each kv head repeated for its query heads)."""
    t = t.float().transpose(0, 1)
    return t.repeat_interleave(repeat, 0) if repeat > 1 else t


@op("attention_forward")
def attention_forward(x, p):
    q, k, v = x["q"], x["k"], x["v"]
    cq, ck = x["cu_seqlens_q"].tolist(), x["cu_seqlens_k"].tolist()
    out = torch.zeros_like(q)
    for s in range(len(cq) - 1):
        if cq[s + 1] <= cq[s]:
            continue
        o = attention(heads_first(q[cq[s]:cq[s + 1]]), heads_first(k[ck[s]:ck[s + 1]]),
                      heads_first(v[ck[s]:ck[s + 1]]), q.shape[-1] ** -0.5)
        out[cq[s]:cq[s + 1]] = o.transpose(0, 1).to(q.dtype)
    return {"out": out}


def paged_rows(table_row, n_keys, block_size):
    j = torch.arange(n_keys, device=table_row.device)
    return table_row.long()[j // block_size] * block_size + j % block_size


@op("unified_attention")
def unified_attention(x, p):
    q, kc, vc = x["q"], x["k_cache"], x["v_cache"]
    nb, bs, hkv, d = kc.shape
    rep = q.shape[1] // hkv
    k_rows, v_rows = kc.reshape(nb * bs, hkv, d), vc.reshape(nb * bs, hkv, d)
    cq, used = x["cu_seqlens_q"].tolist(), x["seqused_k"].tolist()
    out = torch.zeros_like(q)
    for s in range(len(used)):
        q_len, kv_len = cq[s + 1] - cq[s], used[s]
        if q_len == 0:
            continue
        rows = paged_rows(x["block_table"][s], kv_len, bs)
        o = attention(heads_first(q[cq[s]:cq[s + 1]]), heads_first(k_rows[rows], rep), heads_first(v_rows[rows], rep),
                      d ** -0.5, causal=q_len == kv_len)
        out[cq[s]:cq[s + 1]] = o.transpose(0, 1).to(q.dtype)
    return {"out": out}


@op("paged_attention_decode")
def paged_attention_decode(x, p):
    q, kc, vc = x["query"], x["k_cache"], x["v_cache"]
    nb, hkv, d, bs = vc.shape
    rep = q.shape[1] // hkv
    k_rows = kc.permute(0, 3, 1, 2, 4).reshape(nb * bs, hkv, d)  # [nb, hkv, d/8, bs, 8] -> slots
    v_rows = vc.permute(0, 3, 1, 2).reshape(nb * bs, hkv, d)
    out = torch.zeros_like(q)
    for s, n in enumerate(x["seq_lens"].tolist()):
        if n <= 0:
            continue
        rows = paged_rows(x["block_tables"][s], n, bs)
        o = attention(q[s].float()[:, None, :], heads_first(k_rows[rows], rep), heads_first(v_rows[rows], rep),
                      d ** -0.5)
        out[s] = o[:, 0].to(q.dtype)
    return {"out": out}


@op("mla_decode_attention")
def mla_decode_attention(x, p):
    q, kv = x["q"], x["kv_cache"][:, 0]
    rank = p["kv_lora_rank"]
    out = torch.zeros(q.shape[0], q.shape[1], rank, dtype=q.dtype, device=q.device)
    start = 0
    for b, n in enumerate(x["seq_lens"].tolist()):
        keys = kv[start:start + n].float()
        o = attention(q[b].float()[None], keys[None], keys[None, :, :rank], q.shape[-1] ** -0.5)
        out[b] = o[0].to(q.dtype)
        start += n
    return {"out": out}


@op("reshape_and_cache")
def reshape_and_cache(x, p):
    slots = x["slot_mapping"].long()
    valid = slots >= 0
    outs = {}
    for src, cache in (("key", "key_cache"), ("value", "value_cache")):
        c = x[cache].clone()
        t = x[src]
        c.view(-1, t.shape[1], t.shape[2])[slots[valid]] = t[valid]
        outs[cache] = c
    return outs


def rotate_pairs(v, c, s, first, second):
    """(a, b) -> (a c - b s, b c + a s) on lanes first/second of v (fp32), other lanes unchanged."""
    a, b = v[..., first], v[..., second]
    v[..., first], v[..., second] = a * c - b * s, b * c + a * s
    return v


@op("fused_qkv_rope")
def fused_qkv_rope(x, p):
    qkv = x["qkv"]
    t, d, rope = qkv.shape[0], p["head_dim"], p["rope_dim"]
    nq, nkv = p["num_heads"], p["num_kv_heads"]
    heads = qkv.reshape(t, nq + 2 * nkv, d)
    half = rope // 2
    inv_freq = 1.0 / torch.pow(torch.tensor(float(p["rope_base"]), device=qkv.device),
                               torch.arange(0, rope, 2, device=qkv.device, dtype=F32) / rope)
    angle = x["positions"].float()[:, None] * inv_freq[None, :]  # [T, rope / 2]
    c, s = angle.cos()[:, None, :], angle.sin()[:, None, :]
    lanes = torch.arange(half, device=qkv.device)
    qk = rotate_pairs(heads[:, :nq + nkv].float(), c, s, lanes, lanes + half).to(qkv.dtype)
    return {"q": qk[:, :nq].contiguous(), "k": qk[:, nq:].contiguous(), "v": heads[:, nq + nkv:].contiguous()}


def mrope_axes(half, section, interleaved, device):
    f = torch.arange(half, device=device)
    if interleaved:
        axis = torch.zeros_like(f)
        axis[(f % 3 == 1) & (f <= 3 * section[1])] = 1
        axis[(f % 3 == 2) & (f <= 3 * section[2])] = 2
        return axis
    return (f >= section[0]).long() + (f >= section[0] + section[1]).long()


@op("mrope")
def mrope(x, p):
    hs, rot = p["head_size"], p["rotary_dim"]
    half = rot // 2
    t = x["q"].shape[0]
    axis = mrope_axes(half, p["mrope_section"], p["mrope_interleaved"], x["q"].device)
    tok = torch.arange(t, device=axis.device)[:, None]
    freq = torch.arange(half, device=axis.device)[None, :]
    c, s = x["cos"][axis[None, :], tok, freq][:, None, :], x["sin"][axis[None, :], tok, freq][:, None, :]
    lanes = torch.arange(half, device=axis.device)
    first, second = (lanes, lanes + half) if p["is_neox_style"] else (2 * lanes, 2 * lanes + 1)
    outs = {}
    for name in ("q", "k"):
        v = x[name].reshape(t, -1, hs)
        y = rotate_pairs(v.float(), c, s, first, second).to(BF16)
        outs[name] = y.reshape(t, -1)
    return outs


@op("causal_conv1d")
def causal_conv1d(x, p):
    w = x["weight"].float()
    width = w.shape[1]
    padded = torch.cat([x["initial_state"][0].float(), x["x"].float()], 1)  # [D, W - 1 + T]
    windows = padded.unfold(1, width, 1)  # [D, T, W]
    conv = ((windows * w[:, None, :]).sum(-1) + x["bias"].float()[:, None]).to(BF16).float()
    out = conv * torch.sigmoid(conv) if p["activation"] in ("silu", "swish") else conv
    return {"out": out.to(BF16)}


def head_map(num_heads, num_shared, device):
    per = max(num_heads // num_shared, 1)
    return torch.tensor([min(h // per, num_shared - 1) for h in range(num_heads)], device=device)


def by_head(t, s, e):
    """[B, T, H, D] -> [B, H, e - s, D] fp32 (tokens s..e)."""
    return t[:, s:e].float().transpose(1, 2)


def decay_weights(diff):
    """exp(diff) where diff <= 0, else 0."""
    return torch.where(diff <= 0, torch.exp(torch.clamp(diff, max=0.0)), torch.zeros_like(diff))


def delta_scale(p):
    return p["scale"] if p.get("scale") is not None else p["key_dim"] ** -0.5


@op("chunk_delta_rule_output")
def chunk_delta_rule_output(x, p):
    v, g, h = x["v"], x["g"].float(), x["h"]
    hm = head_map(v.shape[2], x["q"].shape[2], v.device)
    q, k = x["q"][:, :, hm], x["k"][:, :, hm]
    t, cs = v.shape[1], p["chunk_size"]
    out = torch.empty_like(v)
    for c in range((t + cs - 1) // cs):
        s, e = c * cs, min(t, (c + 1) * cs)
        qc, kc, vc = by_head(q, s, e), by_head(k, s, e), by_head(v, s, e)
        gc = g[:, s:e].transpose(1, 2)  # [B, H, L]
        inter = (qc @ h[:, c].float()) * torch.exp(gc)[..., None]
        attn = (qc @ kc.transpose(-1, -2)) * decay_weights(gc[..., :, None] - gc[..., None, :])
        attn = torch.tril(attn).to(BF16).float()
        out[:, s:e] = ((inter + attn @ vc) * delta_scale(p)).transpose(1, 2).to(v.dtype)
    return {"out": out}


@op("chunk_gated_delta_rule_state")
def chunk_gated_delta_rule_state(x, p):
    k, w, u, g = x["k"], x["w"], x["u"], x["g"].float()
    slots = x["initial_state_indices"].long()
    final = x["initial_state"].float().clone()
    state = final[slots]  # [B, H, dk, dv]
    k = k[:, :, head_map(u.shape[2], k.shape[2], u.device)]
    t, cs = u.shape[1], p["chunk_size"]
    chunks = (t + cs - 1) // cs
    h_out = torch.empty(u.shape[0], chunks, *state.shape[1:], dtype=u.dtype, device=u.device)
    v_new = torch.empty_like(u)
    for c in range(chunks):
        s, e = c * cs, min(t, (c + 1) * cs)
        h_out[:, c] = state.to(u.dtype)
        v = by_head(u, s, e) - by_head(w, s, e) @ state.to(u.dtype).float()
        v_new[:, s:e] = v.transpose(1, 2).to(u.dtype)
        gc = g[:, s:e].transpose(1, 2)  # [B, H, L]
        g_last = gc[..., -1:]
        scaled = (v * decay_weights(g_last - gc)[..., None]).to(u.dtype).float()
        state = state * torch.exp(g_last)[..., None] + by_head(k, s, e).transpose(-1, -2) @ scaled
    final[slots] = state
    return {"h": h_out, "v_new": v_new, "final_state": final}


@op("gated_delta_rule_update")
def gated_delta_rule_update(x, p):
    v = x["v"]
    hm = head_map(v.shape[2], x["q"].shape[2], v.device)
    q, k = x["q"][:, :, hm].float(), x["k"][:, :, hm].float()
    if p["use_qk_l2norm"]:
        q = q / q.norm(dim=-1, keepdim=True).clamp(min=1e-6)
        k = k / k.norm(dim=-1, keepdim=True).clamp(min=1e-6)
    gate = F.softplus(x["a"].float() + x["dt_bias"].float(), beta=p["softplus_beta"],
                      threshold=p["softplus_threshold"]) * -torch.exp(x["A_log"].float())  # [B, T, H]
    beta = torch.sigmoid(x["b"].float())
    slots = x["initial_state_indices"].long()
    final = x["initial_state"].float().clone()
    state = final[slots]  # [B, H, dk, dv]
    out = torch.empty_like(v)
    scale = delta_scale(p)
    for t in range(v.shape[1]):
        kt = k[:, t]  # [B, H, dk]
        state = state * torch.exp(gate[:, t])[..., None, None]
        recalled = (state * kt[..., None]).sum(2)  # [B, H, dv]
        delta = (v[:, t].float() - recalled) * beta[:, t][..., None]
        state = state + kt[..., None] * delta[..., None, :]
        out[:, t] = (state * (q[:, t] * scale)[..., None]).sum(2).to(v.dtype)
    final[slots] = state
    return {"out": out, "final_state": final}


# ---------------------------------------------------------------------------------------------
# Comparisons. `t` is this script's output, `r` the dumped reference output.

CHUNK = 1 << 26  # elements per pass over large outputs


class Verdict:
    def __init__(self):
        self.ok, self.max_abs, self.max_rel, self.kinds, self.notes = True, 0.0, 0.0, [], []

    def kind(self, k):
        if k not in self.kinds:
            self.kinds.append(k)

    def errors(self, diff, ref):
        if diff.numel():
            self.max_abs = max(self.max_abs, float(diff.max()))
            nz = ref != 0
            if bool(nz.any()):
                self.max_rel = max(self.max_rel, float((diff[nz] / ref[nz].abs()).max()))

    def fail(self, msg):
        self.ok = False
        if len(self.notes) < 6:
            self.notes.append(msg)


def first_bad(name, bad, t, r, dims, offset=0, why=""):
    i = int(bad.nonzero()[0, 0])
    idx, rest = [], offset + i
    for d in reversed(dims):
        idx.insert(0, rest % d)
        rest //= d
    return (f"{name}{idx}: torch {float(t[i]):.7g}, reference {float(r[i]):.7g}{why} "
            f"({int(bad.sum())} bad in this block of {bad.numel()})")


def same_size(v, name, t, r):
    if t.numel() != r.numel():
        v.fail(f"{name}: torch output has {t.numel()} elements {list(t.shape)}, reference {r.numel()} {list(r.shape)}")
    return t.numel() == r.numel()


def allclose(v, name, t, r, atol, rtol):
    """torch.allclose with NaN/inf matching and the low-signal rule of problems/compare.h."""
    if not same_size(v, name, t, r):
        return
    dims = list(r.shape)
    t, r = t.reshape(-1), r.reshape(-1)
    n = r.numel()
    ref_max, zero_passes = 0.0, True
    for s in range(0, n, CHUNK):
        rc = r[s:s + CHUNK].double()
        rc = rc[torch.isfinite(rc)].abs()
        if rc.numel():
            ref_max = max(ref_max, float(rc.max()))
            zero_passes = zero_passes and bool((rc <= atol + rtol * rc).all())
    low = zero_passes and n > 0
    v.kind("allclose+low-signal" if low else "allclose")
    abs_tol = atol * ref_max if low else atol
    for s in range(0, n, CHUNK):
        tc, rc = t[s:s + CHUNK].double(), r[s:s + CHUNK].double()
        fin_r, fin_t = torch.isfinite(rc), torch.isfinite(tc)
        both = fin_r & fin_t
        diff = (tc - rc).abs()
        v.errors(diff[both], rc[both])
        bad = (torch.isnan(rc) & ~torch.isnan(tc)) | (torch.isinf(rc) & (tc != rc)) | (fin_r & ~fin_t)
        bad |= both & (diff > abs_tol + rtol * rc.abs())
        if bool(bad.any()):
            v.fail(first_bad(name, bad, tc, rc, dims, s, f"; tol {abs_tol:.3g} + {rtol:.3g}|r|"))
            return


def exact(v, name, t, r):
    v.kind("exact")
    if not same_size(v, name, t, r):
        return
    dims = list(r.shape)
    t, r = t.reshape(-1), r.reshape(-1)
    if t.dtype.is_floating_point or r.dtype.is_floating_point:
        tc, rc = t.double(), r.double()
        bad = (tc != rc) & ~(torch.isnan(tc) & torch.isnan(rc))
        fin = torch.isfinite(rc) & torch.isfinite(tc)
        v.errors((tc - rc)[fin].abs(), rc[fin])
    else:
        bad = t.long() != r.long()
        v.errors((t.long() - r.long()).abs().double(), r.double())
    if bool(bad.any()):
        v.fail(first_bad(name, bad, t, r, dims))


def segment_set(v, name, t, r, segment):
    """Same multiset of values per segment (segment[i] names element i's segment)."""
    v.kind("segment-set")
    key = lambda x: torch.sort(segment.long() * (1 << 32) + x.long()).values
    kt, kr = key(t), key(r)
    bad = kt != kr
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        v.fail(f"{name}: segment {int(kr[i]) >> 32} holds {int(kt[i]) & 0xffffffff} where the reference's holds "
               f"{int(kr[i]) & 0xffffffff} (sorted within segments; {int(bad.sum())} of {bad.numel()} differ)")


def fp8_dequantised(v, name, q_t, s_t, q_r, s_r, rtol):
    v.kind("fp8-dequant")
    per = q_r.numel() // s_r.numel()
    q_t, q_r = q_t.reshape(-1, per).double(), q_r.reshape(-1, per).double()
    s_t, s_r = s_t.reshape(-1, 1).double(), s_r.reshape(-1, 1).double()
    d_t, d_r = q_t * s_t, q_r * s_r
    diff = (d_t - d_r).abs()
    fin = torch.isfinite(d_r) & torch.isfinite(d_t)
    v.errors(diff[fin], d_r[fin])
    tol = e4m3_step(q_r).double() * s_r.abs() + rtol * d_r.abs()
    bad = (torch.isnan(d_r) & ~torch.isnan(d_t)) | (torch.isfinite(d_r) & ~torch.isfinite(d_t)) | (fin & (diff > tol))
    if bool(bad.any()):
        v.fail(first_bad(name + " (dequantised)", bad.reshape(-1), d_t.reshape(-1), d_r.reshape(-1), [d_r.numel()]))


def fp8_step(v, name, t, r, atol, rtol):
    v.kind("fp8-step")
    t, r = t.reshape(-1).double(), r.reshape(-1).double()
    nan_t, nan_r = torch.isnan(t), torch.isnan(r)
    same_sign = torch.signbit(t) == torch.signbit(r)
    nan_ok = same_sign & ((nan_t & nan_r) | (nan_r & (t.abs() == 448)) | (nan_t & (r.abs() == 448)))
    fin = ~nan_t & ~nan_r
    diff = (t - r).abs()
    v.errors(diff[fin], r[fin])
    tol = atol + rtol * r.abs() + e4m3_step(torch.maximum(t.abs(), r.abs())).double()
    bad = ((nan_t | nan_r) & ~nan_ok) | (fin & (diff > tol))
    if bool(bad.any()):
        v.fail(first_bad(name, bad, t, r, [t.numel()]))


def routing_ids(v, t_ids, r_ids, scores):
    """Ids equal, or the torch scores of both choices a near-tie (1e-5 relative)."""
    v.kind("tie-aware")
    differ = t_ids != r_ids
    if not bool(differ.any()):
        return
    st = scores.gather(1, t_ids.long())
    sr = scores.gather(1, r_ids.long())
    bad = differ & ((st - sr).abs() > ROUTING_TIE_REL * sr.abs())
    if bool(bad.any()):
        v.fail(first_bad("topk_ids", bad.reshape(-1), t_ids.reshape(-1), r_ids.reshape(-1), [t_ids.numel()]))


def compare(m, outs, refs, ins):
    """Applies each output's rule (the operator's custom rule where it has one)."""
    v = Verdict()
    name, p, atol, rtol = m["operator"], m["params"], m["atol"], m["rtol"]
    if name == "moe_align_block_size":
        bs, n_ref = p["block_size"], int(refs["num_tokens_post_pad"][0])
        exact(v, "num_tokens_post_pad", outs["num_tokens_post_pad"], refs["num_tokens_post_pad"])
        v.kind("prefix")
        exact(v, "expert_ids", outs["expert_ids"][:n_ref // bs], refs["expert_ids"][:n_ref // bs])
        segment = refs["expert_ids"][:n_ref // bs].repeat_interleave(bs)
        segment_set(v, "sorted_token_ids", outs["sorted_token_ids"][:n_ref], refs["sorted_token_ids"][:n_ref], segment)
        return v
    if name == "moe_count_and_sort":
        exact(v, "expert_token_counts", outs["expert_token_counts"], refs["expert_token_counts"])
        exact(v, "cumsum", outs["cumsum"], refs["cumsum"])
        counts = refs["expert_token_counts"].long()
        segment = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
        segment_set(v, "sorted_token_ids", outs["sorted_token_ids"], refs["sorted_token_ids"], segment)
        return v
    if name == "moe_topk_gating_softmax":
        allclose(v, "topk_weights", outs["topk_weights"], refs["topk_weights"], atol, rtol)
        routing_ids(v, outs["topk_ids"], refs["topk_ids"], gating_scores(ins["gating_output"], p))
        return v
    fp8_pairs = {"fp8_dynamic_per_token_quant": ("q", "scale"), "per_token_group_quant_fp8": ("quantized", "scales"),
                 "fused_rmsnorm_quant": ("quantized", "scale")}
    done = set()
    if name in fp8_pairs:
        q, s = fp8_pairs[name]
        fp8_dequantised(v, q, outs[q], outs[s], refs[q], refs[s], rtol)
        v.kind("scale-rel")
        allclose(v, s, outs[s], refs[s], 0.0, rtol)
        done = {q, s}
    for out_name, ref in refs.items():
        if out_name in done:
            continue
        if out_name not in outs:
            v.fail(f"the torch implementation has no output {out_name}")
        elif name == "fp8_blockscale_fused_moe":
            fp8_step(v, out_name, outs[out_name], ref, atol, rtol)
        elif name in ("topk_filter", "reshape_and_cache") or not ref.dtype.is_floating_point:
            exact(v, out_name, outs[out_name], ref)
        else:
            allclose(v, out_name, outs[out_name], ref, atol, rtol)
    return v


# ---------------------------------------------------------------------------------------------
# Driver: one row per (operator, shape).

HEADER = f"{'operator':<29} {'shape':>5} {'max abs err':>11} {'max rel err':>11} {'atol':>7} {'rtol':>7}  " \
         f"{'comparison':<36} {'result':<6} {'dump s':>6} {'check s':>7}"


def check_dump(folder, device, dump_s=float("nan")):
    t0 = time.time()
    m = json.loads((folder / "manifest.json").read_text())
    row = {"operator": m["operator"], "shape": m["shape_id"], "atol": m["atol"], "rtol": m["rtol"], "dump_s": dump_s}
    try:
        ins = {e["name"]: load_tensor(folder, e, device) for e in m["tensors"] if e["role"] == "input"}
        refs = {e["name"]: load_tensor(folder, e, device) for e in m["tensors"] if e["role"] == "output"}
        if m["operator"] not in OPS:
            raise KeyError(f"no torch implementation of {m['operator']}")
        outs = OPS[m["operator"]](ins, m["params"])
        v = compare(m, outs, refs, ins)
        row.update(ok=v.ok, max_abs=v.max_abs, max_rel=v.max_rel, kinds="+".join(v.kinds), notes=v.notes)
    except Exception as e:  # a broken dump or implementation is a failed row, not a crash
        row.update(ok=False, max_abs=float("nan"), max_rel=float("nan"), kinds="-", notes=[f"{type(e).__name__}: {e}"])
    row["seconds"] = time.time() - t0
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def print_row(row, out):
    dump_s = "-" if math.isnan(row["dump_s"]) else f"{row['dump_s']:.1f}"
    print(f"{row['operator']:<29} {row['shape']:>5} {row['max_abs']:>11.3e} {row['max_rel']:>11.3e} {row['atol']:>7.0e} "
          f"{row['rtol']:>7.0e}  {row['kinds']:<36} {'PASS' if row['ok'] else 'FAIL':<6} {dump_s:>6} "
          f"{row['seconds']:>7.1f}",
          file=out, flush=True)
    for n in row["notes"]:
        print(f"    {n}", file=out, flush=True)


def manifests(root):
    found = [pathlib.Path(f).parent for f in pathlib.Path(root).rglob("manifest.json")]
    key = lambda d: (d.parent.name, int(d.name) if d.name.isdigit() else 0, d.name)
    return sorted(found, key=key)


def failed_row(op_name, shape, why):
    return {"operator": op_name, "shape": shape, "atol": float("nan"), "rtol": float("nan"), "ok": False,
            "max_abs": float("nan"), "max_rel": float("nan"), "kinds": "-", "dump_s": float("nan"), "seconds": 0.0,
            "notes": [why]}


def dump_operator(args, op_name):
    """`atrex problems dump OP --json`: ((folder, dump seconds) pairs, shapes skipped, rows of failed dumps)."""
    cmd = shlex.split(args.atrex) + ["problems", "dump", op_name, "--shapes", args.shapes, "--seed", str(args.seed), "--backend",
           args.backend, "--out", str(args.work), "--max-input-mib", str(args.max_input_mib), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 2:
        sys.exit(f"xcheck: {' '.join(cmd)}: {proc.stderr.strip()}")
    try:
        summary = json.loads(proc.stdout)
    except ValueError:
        return [], [], [failed_row(op_name, "-", f"dump failed (exit {proc.returncode}): "
                                                 f"{(proc.stderr or proc.stdout).strip()[-400:]}")]
    failed = [failed_row(op_name, it["shape_id"], f"dump {it['status']}: {it['error']}")
              for it in summary["items"] if it["status"] != "ok"]
    folders = [(pathlib.Path(it["out_dir"]), it["wall_s"]) for it in summary["items"] if it["status"] == "ok"]
    return folders, summary["skipped"], failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dumps", nargs="*", help="folders holding atrex.dump/1 dumps (searched recursively)")
    ap.add_argument("--atrex", help="dump each operator with this atrex command (binary and global flags, e.g. "
                                    "'atrex --suite DIR'), check it, then delete it")
    ap.add_argument("--backend", default="cuda", help="--atrex: the reference's backend (cpu or cuda)")
    ap.add_argument("--shapes", default="xcheck", help="--atrex: `atrex problems dump --shapes` spec")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-input-mib", type=float, default=2048, help="--atrex: skip shapes with larger inputs")
    ap.add_argument("--work", default="/tmp/atrex-xcheck", help="--atrex: scratch folder for the dumps")
    ap.add_argument("--operators", default="all", help="comma-separated operators (default: all 30)")
    ap.add_argument("--keep", action="store_true", help="--atrex: keep the dumps")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    args = ap.parse_args()
    if not args.dumps and not args.atrex:
        ap.error("give dump folders or --atrex")
    device = torch.device(args.device)
    # fp32 means fp32: no TF32 tensor-core matmuls or convolutions on Ampere and later.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ops = sorted(OPS) if args.operators == "all" else args.operators.split(",")
    t_start = time.time()
    print(f"atrex reference vs independent PyTorch {torch.__version__} on {device}"
          f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}; fp8 "
          f"{'torch.float8_e4m3fn' if HAS_FP8 else 'decoded by table'}", flush=True)
    print(HEADER, flush=True)
    rows, skipped = [], []
    if args.atrex:
        shutil.rmtree(args.work, ignore_errors=True)
        for name in ops:
            folders, notes, failed = dump_operator(args, name)
            skipped += notes
            for row in failed:
                rows.append(row)
                print_row(row, sys.stdout)
            for folder, dump_s in folders:
                rows.append(check_dump(folder, device, dump_s))
                print_row(rows[-1], sys.stdout)
            if not args.keep:
                shutil.rmtree(pathlib.Path(args.work) / name, ignore_errors=True)
    for root in args.dumps:
        for folder in manifests(root):
            if args.operators == "all" or folder.parent.name in ops:
                rows.append(check_dump(folder, device))
                print_row(rows[-1], sys.stdout)
    failed = [r for r in rows if not r["ok"]]
    per_op = {}
    for r in rows:
        per_op[r["operator"]] = per_op.get(r["operator"], 0) + (1 if r["ok"] else 0)
    expected = ops if args.atrex else sorted(per_op)
    thin = [f"{o} ({per_op.get(o, 0)})" for o in expected if per_op.get(o, 0) < 3]
    for s in skipped:
        print(f"skipped (too large for this run): {s}")
    print(f"{len(rows)} rows over {len(per_op)} operators: {len(rows) - len(failed)} PASS, {len(failed)} FAIL "
          f"in {time.time() - t_start:.0f} s")
    if thin:
        print("operators with fewer than 3 passing shapes: " + ", ".join(thin))
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
