#!/usr/bin/env python3
"""One decode layer of a GQA model with vxqa's torch ops, captured once in a CUDA graph and
replayed for every generated token: project q/k/v, append_kv the new k/v into the paged
E5M2 cache, decode, project out. The lengths and slots grow on the device between replays;
the scales are device tensors. At the end the last step's attention is checked against a
float64 reference computed from the k/v history (quantized to E5M2 by torch), not from the
cache. Exits 0 without a GPU, saying so.

    python3 examples/torch_gqa_layer.py [--steps N]
"""
import argparse
import math
import sys

import torch

import vxqa_torch
from vxqa_torch import reference

E5M2_MAX = 57344.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_gqa_layer: no CUDA device: skipped (it runs on a GPU machine, scripts/torch_test.sh)")
        return 0
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(2026)
    # A bf16 GQA layer: 32 query heads over 8 KV heads of 128, hidden 4096, pages of 16 tokens.
    batch, hidden, q_heads, kv_heads, dim, page_size = 4, 4096, 32, 8, 128, 16
    prompt = torch.tensor([37, 250, 1, 511])  # tokens already in each sequence's cache
    max_len = int(prompt.max()) + args.steps
    pages_per_seq = math.ceil(max_len / page_size)
    num_pages = batch * pages_per_seq + 7

    def weight(rows):
        return (torch.randn(rows, hidden, generator=g) / math.sqrt(hidden)).bfloat16().to(dev)

    w_q, w_k, w_v = weight(q_heads * dim), weight(kv_heads * dim), weight(kv_heads * dim)
    w_o = (torch.randn(hidden, q_heads * dim, generator=g) / math.sqrt(q_heads * dim)).bfloat16().to(dev)
    k_scale, v_scale = torch.tensor(0.05, device=dev), torch.tensor(0.04, device=dev)

    # The cache pool and each sequence's pages (a random permutation, as an allocator leaves them).
    k_cache = torch.zeros(num_pages, page_size, kv_heads, dim, dtype=torch.float8_e5m2, device=dev)
    v_cache = torch.zeros_like(k_cache)
    table = torch.randperm(num_pages, generator=g)[: batch * pages_per_seq].view(batch, pages_per_seq)
    block_table = table.int().to(dev)

    # The prompt's k/v, written eagerly; the history keeps every row for the reference.
    history_k = [[] for _ in range(batch)]
    history_v = [[] for _ in range(batch)]
    for b in range(batch):
        n = int(prompt[b])
        k = (torch.randn(n, kv_heads, dim, generator=g) * 2).bfloat16()
        v = torch.randn(n, kv_heads, dim, generator=g).bfloat16()
        pos = torch.arange(n)
        slots = (table[b, pos // page_size] * page_size + pos % page_size).to(dev)
        vxqa_torch.append_kv(k.to(dev), v.to(dev), slots, k_cache, v_cache, k_scale=k_scale, v_scale=v_scale)
        history_k[b].append(k)
        history_v[b].append(v)

    # The graph's static inputs: this step's hidden states, slots and lengths.
    x = torch.zeros(batch, hidden, dtype=torch.bfloat16, device=dev)
    slots = torch.zeros(batch, dtype=torch.long, device=dev)
    lens = torch.zeros(batch, dtype=torch.int32, device=dev)
    errors = torch.zeros(2, dtype=torch.int32, device=dev)  # [append, decode]: their bits overlap

    def layer():
        q = (x @ w_q.T).view(batch, q_heads, dim)
        k = (x @ w_k.T).view(batch, kv_heads, dim)
        v = (x @ w_v.T).view(batch, kv_heads, dim)
        vxqa_torch.append_kv(k, v, slots, k_cache, v_cache, k_scale=k_scale, v_scale=v_scale, errors=errors[0])
        attn = vxqa_torch.decode(q, k_cache, v_cache, block_table, lens, k_scale=k_scale, v_scale=v_scale,
                                 errors=errors[1])
        return q, k, v, attn, attn.view(batch, q_heads * dim) @ w_o.T

    side = torch.cuda.Stream()  # warm up off the capture stream, as torch's graph docs ask
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        lens.zero_()
        slots.fill_(-1)
        layer()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q_out, k_out, v_out, attn_out, y_out = layer()

    for step in range(args.steps):
        pos = prompt + step  # this token's position in each sequence
        x.copy_(torch.randn(batch, hidden, generator=g))
        slots.copy_(table[torch.arange(batch), pos // page_size] * page_size + pos % page_size)
        lens.copy_(pos + 1)
        graph.replay()
        for b in range(batch):
            history_k[b].append(k_out[b : b + 1].cpu())
            history_v[b].append(v_out[b : b + 1].cpu())
    torch.cuda.synchronize()
    if errors.tolist() != [0, 0]:
        print(f"torch_gqa_layer: error words {errors.tolist()}")
        return 1

    # The reference: each sequence's history as one page of a cache, quantized as the cache
    # stores it (x / scale to E5M2, saturating, nearest even); vxqa_torch.reference's float64
    # decode over it, and the bound its error model gives a correct kernel (docs/torch.md).
    def quantized(rows, scale):
        return (rows.float() / scale).clamp(-E5M2_MAX, E5M2_MAX).to(torch.float8_e5m2).unsqueeze(0)

    worst = 0.0
    for b in range(batch):
        ks, vs = k_scale.item(), v_scale.item()
        kc, vc = quantized(torch.cat(history_k[b]), ks), quantized(torch.cat(history_v[b]), vs)
        table, lens = torch.zeros(1, 1, dtype=torch.int32), torch.tensor([kc.shape[1]], dtype=torch.int32)
        qb = q_out[b : b + 1].cpu()
        want, want_lse = reference.decode_reference(qb, kc, vc, table, lens, None, ks, vs)
        bound, _ = reference.decode_bounds(qb, kc, vc, table, lens, None, ks, vs, want, want_lse, attn_out.dtype)
        worst = max(worst, ((attn_out[b : b + 1].cpu().double() - want).abs() / bound).max().item())
    lengths = (prompt + args.steps).tolist()
    print(f"torch_gqa_layer: {args.steps} graph replays, lengths {lengths}, attention vs float64 reference: "
          f"worst error {worst:.3f} of the bound, layer output norm {y_out.float().norm():.3f}")
    if worst > 1:
        print("torch_gqa_layer: FAILED")
        return 1
    print("torch_gqa_layer: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
