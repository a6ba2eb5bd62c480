#!/usr/bin/env python3
"""What one eager decode call costs the host, through torch: vxqa's plain op (plans every
call), a vxqa_torch.DecodePlan made once (run() validates and launches only), and
FlashInfer's BatchDecodeWithPagedKVCacheWrapper.run after one plan() (when the flashinfer
package is importable: its wheels are carried as ../shared/peers/README.md says; else that
row is skipped, saying why). All in one process, on one small shape where the host, not the
GPU, should set the pace: B 4, Hq 32, Hkv 8, D 128, page 16, 1K tokens a sequence, E5M2 cache.

Per API, `rounds` loops of `calls` eager calls (the APIs interleaved round by round), each
loop timed three ways, synchronising only at its ends:
  host_us      each call's own time.perf_counter() span (mean and median over every call)
  loop_us      the loop's perf_counter span, per call (the issue rate)
  wall_us      the same up to the synchronisation after the loop, per call
  gpu_us       CUDA events recorded before and after the loop, per call
When loop_us is close to gpu_us the launch queue was full and the host waited for the GPU:
the host cost is then at most loop_us (the JSON says which, per API: "gpu_bound").

Usage: torch_host_overhead.py OUT.json [--calls 1000] [--rounds 5] [--commit HASH]
Needs a CUDA GPU and vxqa_torch installed (scripts/torch_test.sh); gpu_all.sh's step
"torch" runs it after the tests.
"""
import argparse
import datetime
import inspect
import json
import math
import statistics
import subprocess
import sys
import time

import torch

BATCH, Q_HEADS, KV_HEADS, HEAD_DIM, PAGE, CONTEXT = 4, 32, 8, 128, 16, 1024


def make_inputs(device):
    g = torch.Generator(device="cpu").manual_seed(5)
    pages_per_seq = CONTEXT // PAGE
    num_pages = BATCH * pages_per_seq
    shape = (num_pages, PAGE, KV_HEADS, HEAD_DIM)
    k = torch.randn(shape, generator=g).to(torch.float8_e5m2).to(device)
    v = torch.randn(shape, generator=g).to(torch.float8_e5m2).to(device)
    table = torch.randperm(num_pages, generator=g).int().view(BATCH, pages_per_seq).to(device)
    return dict(q=torch.randn(BATCH, Q_HEADS, HEAD_DIM, generator=g).half().to(device), k_cache=k, v_cache=v,
                block_table=table, seq_lens=torch.full((BATCH,), CONTEXT, dtype=torch.int32, device=device))


def vxqa_apis(x):
    import vxqa_torch

    out_plain, out_planned = torch.empty_like(x["q"]), torch.empty_like(x["q"])
    args = (x["q"], x["k_cache"], x["v_cache"], x["block_table"], x["seq_lens"])
    plan = vxqa_torch.DecodePlan(num_q_heads=Q_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, page_size=PAGE,
                                 max_batch=BATCH, max_context=CONTEXT, q_dtype=torch.float16,
                                 kv_cache_dtype="fp8_e5m2", device=x["q"].device)
    plain = lambda: vxqa_torch.decode(*args, kv_cache_dtype="fp8_e5m2", out=out_plain)  # noqa: E731
    planned = lambda: plan.run(*args, out=out_planned)  # noqa: E731
    plain()
    planned()
    torch.cuda.synchronize()
    # The same Config and plan (capacity = this batch and context): the same answer, bit for bit.
    assert torch.equal(out_plain, out_planned), "the plain and planned decodes differ"
    note = f"{plan.config_name}, {plan.num_chunks} chunk(s) of {plan.chunk_tokens}"
    return [("vxqa_torch.decode (plans every call)", plain, note),
            ("vxqa_torch.DecodePlan.run", planned, note)], out_planned


def flashinfer_api(x, reference):
    try:
        import flashinfer
    except ImportError as e:
        return None, f"flashinfer not importable ({e}): carry its wheels (../shared/peers/README.md)"
    device = x["q"].device
    pages_per_seq = CONTEXT // PAGE
    indptr = torch.arange(0, BATCH * pages_per_seq + 1, pages_per_seq, dtype=torch.int32, device=device)
    last = torch.full((BATCH,), CONTEXT - (pages_per_seq - 1) * PAGE, dtype=torch.int32, device=device)
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True)
    wrapper.plan(indptr, x["block_table"].flatten(), last, Q_HEADS, KV_HEADS, HEAD_DIM, PAGE,
                 pos_encoding_mode="NONE", q_data_type=torch.float16, kv_data_type=torch.float8_e5m2)
    out = torch.empty_like(x["q"])
    kv = (x["k_cache"], x["v_cache"])
    if "out" in inspect.signature(wrapper.run).parameters:
        run = lambda: wrapper.run(x["q"], kv, out=out)  # noqa: E731
    else:  # an older run() allocates its output every call
        run = lambda: out.copy_(wrapper.run(x["q"], kv))  # noqa: E731
    run()
    torch.cuda.synchronize()
    diff = (out.float() - reference.float()).abs().max().item()
    note = f"FlashInfer {flashinfer.__version__}, tensor-core decode; max |out - vxqa| = {diff:.3g}"
    return ("flashinfer BatchDecodeWithPagedKVCacheWrapper.run", run, note), None


def time_loop(fn, calls):
    """One loop of `calls` calls: per-call host spans and the loop's host, wall and GPU times (us)."""
    torch.cuda.synchronize()
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spans = []
    clock = time.perf_counter
    t0 = clock()
    start_event.record()
    for _ in range(calls):
        a = clock()
        fn()
        spans.append(clock() - a)
    end_event.record()
    t1 = clock()
    torch.cuda.synchronize()
    t2 = clock()
    return dict(spans=[s * 1e6 for s in spans], loop_us=(t1 - t0) * 1e6 / calls, wall_us=(t2 - t0) * 1e6 / calls,
                gpu_us=start_event.elapsed_time(end_event) * 1e3 / calls)


def commit_of(given):
    if given:
        return given
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commit", default="")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_host_overhead: no CUDA device, nothing measured")
        return 0
    device = torch.device("cuda")
    x = make_inputs(device)
    apis, reference = vxqa_apis(x)
    skipped = []
    peer, why = flashinfer_api(x, reference)
    if peer:
        apis.append(peer)
    else:
        skipped.append(dict(api="flashinfer BatchDecodeWithPagedKVCacheWrapper.run", skipped=why))
    for _, fn, _ in apis:  # warm-up: allocator pools, lazy module loads, the opt-in
        for _ in range(100):
            fn()
    loops = {name: [] for name, _, _ in apis}
    for _ in range(args.rounds):
        for name, fn, _ in apis:
            loops[name].append(time_loop(fn, args.calls))
    results = []
    for name, _, note in apis:
        spans = [s for loop in loops[name] for s in loop["spans"]]
        per_loop = {k: statistics.median(loop[k] for loop in loops[name]) for k in ("loop_us", "wall_us", "gpu_us")}
        results.append(dict(api=name, note=note, host_us_mean=statistics.fmean(spans),
                            host_us_median=statistics.median(spans), **per_loop,
                            gpu_bound=per_loop["loop_us"] < 1.1 * per_loop["gpu_us"]))
        r = results[-1]
        print(f"{name:52s} host {r['host_us_mean']:7.2f} us mean {r['host_us_median']:7.2f} median; loop "
              f"{r['loop_us']:7.2f}, wall {r['wall_us']:7.2f}, GPU {r['gpu_us']:7.2f} us/call"
              f"{'  (GPU-bound)' if r['gpu_bound'] else ''}  [{note}]", flush=True)
    for s in skipped:
        print(f"{s['api']:52s} skipped: {s['skipped']}")
    report = dict(device=torch.cuda.get_device_name(device), date=datetime.date.today().isoformat(),
                  commit=commit_of(args.commit), torch=torch.__version__, cuda=torch.version.cuda,
                  shape=dict(batch=BATCH, q_heads=Q_HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, page=PAGE,
                             context=CONTEXT, cache="e5m2", q="float16"),
                  calls=args.calls, rounds=args.rounds, results=results + skipped)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0 if all(math.isfinite(r["host_us_mean"]) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
