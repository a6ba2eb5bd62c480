"""A float64 reference for vxqa_torch.decode, in plain torch, for tests and checks.

It gathers each sequence's pages through the block table, dequantizes them (E5M2 codes or
fp16, times the scale) and takes the softmax in float64. A length-0 sequence gives out 0
and lse -inf, as the kernel does.
"""
import math

import torch


def dequantize(cache, scale):
    """float64 values of a cache tensor: E5M2 codes (uint8 or float8_e5m2) or fp16, times scale."""
    if cache.dtype == torch.uint8:
        cache = cache.view(torch.float8_e5m2)
    return cache.to(torch.float64) * float(scale)


def gather_sequence(values, block_table_row, length):
    """The first `length` token rows [length, num_kv_heads, head_dim] of one sequence."""
    page_size = values.shape[1]
    pages = block_table_row[: math.ceil(length / page_size)].long()
    return values[pages].reshape(-1, values.shape[2], values.shape[3])[:length]


def decode_reference(q, k_cache, v_cache, block_table, seq_lens, softmax_scale=None, k_scale=1.0, v_scale=1.0):
    """(out, lse) in float64: out [batch, num_q_heads, head_dim], lse [batch, num_q_heads]."""
    batch, q_heads, head_dim = q.shape
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(head_dim)
    keys, values = dequantize(k_cache, k_scale), dequantize(v_cache, v_scale)
    kv_heads = keys.shape[2]
    out = torch.zeros(batch, q_heads, head_dim, dtype=torch.float64, device=q.device)
    lse = torch.full((batch, q_heads), -math.inf, dtype=torch.float64, device=q.device)
    for b, length in enumerate(seq_lens.tolist()):
        if length == 0:
            continue
        k = gather_sequence(keys, block_table[b], length)
        v = gather_sequence(values, block_table[b], length)
        qb = q[b].to(torch.float64).reshape(kv_heads, q_heads // kv_heads, head_dim)  # head h -> KV head h // group
        scores = torch.einsum("hgd,thd->hgt", qb, k) * softmax_scale
        row_lse = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - row_lse[..., None])
        out[b] = torch.einsum("hgt,thd->hgd", weights, v).reshape(q_heads, head_dim)
        lse[b] = row_lse.reshape(q_heads)
    return out, lse
