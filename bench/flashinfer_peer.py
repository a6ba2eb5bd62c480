#!/usr/bin/env python3
"""FlashInfer side by side with vxqa's benchmark: runs FlashInfer's paged decode on the
shapes of a vxqa_decode_bench JSON file (the same lengths, page size, heads, E5M2 pages in
NHD, one K and one V pool) and writes its own JSON in the same format.

A measuring instrument only, never a dependency: it needs torch and the FlashInfer wheel
(../shared/peers/README.md says how to carry it to the GPU machine).

Usage: flashinfer_peer.py VXQA_BENCH.json OUT.json [--tensor-cores-only] [--variants | --queries | --formats]
--variants: the rows of a `vxqa_decode_bench --variants` file instead ("plain", a sliding
window as FlashInfer's window_left = W - 1, a soft-cap as its logits_soft_cap; rows with
sinks are left out), tensor-core path only. Those settings are JIT-compiled by FlashInfer
on the GPU machine (its prebuilt modules have neither): a row whose module fails to build
is reported and left out.
--queries: the rows of a `vxqa_decode_bench --queries` file: each shape's q_len (1: its
paged decode; > 1: its paged prefill, causal, q_len query tokens a sequence as qo_indptr,
the prebuilt modules) once, on the same lengths and heads.
--formats: the rows of a `vxqa_decode_bench --formats` file: each shape once a cache type
(E5M2, E4M3 as torch.float8_e4m3fn, fp16, bf16 with bf16 q; head dims 128, 256 and 512),
tensor-core path only. All but E5M2 at 128 and 256 are JIT-compiled there: a row whose
module fails to build is reported and left out.
Timing: CUDA-graph replay of plan-once / run (eager if the capture fails), median of 200
after warm-up, CUDA events; caches rotated over enough copies to cover 4x the L2; copy
bandwidth measured in the same run as read + write bytes of a 1 GiB device copy."""
import json
import statistics
import sys

import torch


def median_us(fn, reps=200):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def copy_gbs():
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * n / (median_us(lambda: dst.copy_(src), 50) * 1e3)


# A vxqa --formats row's cache type, by its Config's name (None: a row FlashInfer repeats).
def formats_kv(config):
    if config.startswith("E5M2"):
        return "e5m2"
    if config == "E4M3":
        return "e4m3"
    return {"fp16 cache": "fp16", "bf16 cache, bf16 q": "bf16"}.get(config)


def random_cache(kv, shape, gen):
    """Finite values only, like a real cache: no exponent-all-ones E5M2 code, no E4M3 NaN."""
    if kv in ("fp16", "bf16"):
        return torch.randn(shape, dtype=torch.float16 if kv == "fp16" else torch.bfloat16, device="cuda", generator=gen)
    x = torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda", generator=gen)
    if kv == "e5m2":
        return torch.where((x & 0x7C) == 0x7C, x & 0xBB, x).view(torch.float8_e5m2)
    return torch.where((x & 0x7F) == 0x7F, x & 0xFE, x).view(torch.float8_e4m3fn)


KV_DTYPES = {"e5m2": torch.float8_e5m2, "e4m3": torch.float8_e4m3fn, "fp16": torch.float16, "bf16": torch.bfloat16}


def run_shape(flashinfer, r, l2_bytes, tensor_cores, kv="e5m2"):
    lens = r["lens"]
    window, softcap = r.get("window", 0), r.get("softcap", 0.0)
    q_len = r.get("q_len", 1)
    page, hkv, group, d = r["page"], r["kv_heads"], r["group"], r["head_dim"]
    batch = len(lens)
    pages_of = [(n + page - 1) // page for n in lens]
    num_pages = sum(pages_of)
    gen = torch.Generator(device="cuda").manual_seed(11)
    elem = 2 if kv in ("fp16", "bf16") else 1
    kv_bytes = 2 * num_pages * page * hkv * d * elem
    copies = min(16, max(1, int(4 * l2_bytes / kv_bytes) + 1))
    caches = []
    for _ in range(copies):
        caches.append(tuple(random_cache(kv, (num_pages, page, hkv, d), gen) for _ in range(2)))
    q_dtype, kv_dtype = torch.bfloat16 if kv == "bf16" else torch.float16, KV_DTYPES[kv]
    perm = torch.randperm(num_pages, device="cuda", generator=gen).to(torch.int32)
    indptr = torch.tensor([0] + list(torch.tensor(pages_of).cumsum(0).tolist()), dtype=torch.int32, device="cuda")
    last = torch.tensor([n - (p - 1) * page for n, p in zip(lens, pages_of)], dtype=torch.int32, device="cuda")
    q = torch.randn(batch * q_len, hkv * group, d, dtype=q_dtype, device="cuda", generator=gen)
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    variant = {}
    if window > 0:
        variant["window_left"] = window - 1
    if softcap > 0:
        variant["logits_soft_cap"] = softcap
    if q_len > 1:  # the sequence's last q_len tokens, causal among them: its prefill
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
        qo_indptr = torch.arange(0, (batch + 1) * q_len, q_len, dtype=torch.int32, device="cuda")
        wrapper.plan(qo_indptr, indptr, perm, last, hkv * group, hkv, d, page, causal=True, pos_encoding_mode="NONE",
                     q_data_type=q_dtype, kv_data_type=kv_dtype, **variant)
    else:
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores)
        wrapper.plan(indptr, perm, last, hkv * group, hkv, d, page, pos_encoding_mode="NONE",
                     q_data_type=q_dtype, kv_data_type=kv_dtype, **variant)

    def step_all():
        for k, v in caches:
            wrapper.run(q, (k, v))

    eager = median_us(step_all) / copies
    graph_us, how = None, "eager"
    try:
        graph = torch.cuda.CUDAGraph()
        step_all()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            step_all()
        graph_us = median_us(graph.replay) / copies
        how = "graph"
    except Exception as e:  # noqa: BLE001 - the eager number stands
        print(f"graph capture failed for {r['shape']}: {e}", file=sys.stderr)
    best = min(eager, graph_us) if graph_us else eager
    tokens = sum(min(n, window) if window > 0 else n for n in lens)
    mbytes = (tokens * hkv * d * 2 * elem + 4 * batch * q_len * hkv * group * d) / 1e6
    what = f"FlashInfer {'tensor-core' if tensor_cores else 'CUDA-core'} decode"
    if q_len > 1:
        what = f"FlashInfer paged prefill, causal, q_len {q_len}"
    if window > 0:
        what += f", window {window}"
    if softcap > 0:
        what += f", soft-cap {softcap:g}"
    if kv != "e5m2":
        what += f", {kv} cache"
    return dict(shape=r["shape"], config=what, window=window, softcap=softcap, q_len=q_len,
                batch=batch, context=r["context"], page=page, group=group, kv_heads=hkv, head_dim=d,
                tokens=tokens, mbytes=mbytes, eager_us=eager, graph_us=graph_us or eager, timing=how,
                gbs=mbytes * 1e6 / (best * 1e3), cache_copies=copies)


def main(src, dst, tensor_cores_only=False, variants=False, queries=False, formats=False):
    import flashinfer

    with open(src) as f:
        bench = json.load(f)
    prop = torch.cuda.get_device_properties(0)
    copy = copy_gbs()
    rows, seen = [], set()
    for r in bench["results"]:
        if queries:
            key = (r["shape"], r.get("q_len", 1))
            if not (r["config"].startswith("multi-token, 8 warps") or r["config"] == "plain, q_len 1") or key in seen:
                continue
        elif formats:
            key = (r["shape"], formats_kv(r["config"]))
            if key[1] is None or key in seen:
                continue
        elif variants:
            key = (r["shape"], r.get("window", 0), r.get("softcap", 0.0))
            if r["config"] not in ("plain", "soft-cap 30", "window 4096") or r.get("sinks") or key in seen:
                continue
        else:
            key = r["shape"]
            if r["config"] != "default atom" or key in seen:
                continue
        seen.add(key)
        only_tc = variants or queries or formats or tensor_cores_only or r["tokens"] > 200000 * 4
        for tc in (True,) if only_tc else (True, False):
            try:
                row = run_shape(flashinfer, r, prop.L2_cache_size, tc, key[1] if formats else "e5m2")
            except Exception as e:  # noqa: BLE001 - a JIT build that fails leaves its row out
                if not (variants or queries or formats):
                    raise
                print(f"{r['shape']} {r['config']}: FlashInfer could not run it: {e}", file=sys.stderr, flush=True)
                continue
            row["pct_copy"] = 100 * row["gbs"] / copy
            rows.append(row)
            print(f"{row['shape']:40s} {row['config']:34s} {min(row['eager_us'], row['graph_us']):8.1f} us "
                  f"{row['pct_copy']:5.1f} % of copy", flush=True)
    out = dict(device=prop.name, date=bench["date"], commit=bench["commit"], label="FlashInfer "
               + flashinfer.__version__, copy_gbs=copy, results=rows)
    with open(dst, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--tensor-cores-only" in sys.argv[3:], "--variants" in sys.argv[3:],
         "--queries" in sys.argv[3:], "--formats" in sys.argv[3:])
