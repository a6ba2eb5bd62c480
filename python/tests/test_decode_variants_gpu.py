"""The attention variants on the GPU (sliding window, logit soft-cap, sinks) against the
float64 reference (vxqa_torch.reference, from the variants' definitions) within the tests'
bound, through both paths (decode(), planned every call for its own window; a DecodePlan made
for the variants), each variant alone and all three together, under one chunk and many: a
window shorter than a page and windows cutting a page, sinks with length-0 sequences (out 0,
lse the sink), every head dim and cache family's variant Config (bf16 caches with bf16 q, on
sm_80 and newer), CUDA-graph replay following the sinks tensor, torch.compile and opcheck with
the new arguments; the plan's chunks over the window; NaN and inf inputs under each variant; and
a wrong answer failing (the window off by one token, the sinks or the cap ignored). Skips
without a GPU."""
import math

import pytest
import torch

import vxqa_torch
from problems import CACHES, assert_matches_reference, random_problem, random_sinks, skip_bf16_cache_below_sm80
from vxqa_torch._fake import plan_num_chunks

PATHS = ["plain", "planned"]
CAP = 5.0  # with q 3x larger, scores of several units: the cap bends them


def variant_problem(seed, lengths, *, window=0, cap=0.0, sinks=False, head_dim=128, page_size=16, cache="uint8",
                    q_dtype=torch.float16, device="cuda", max_len=None):
    skip_bf16_cache_below_sm80(CACHES[cache]["cache_dtype"], device)
    p = random_problem(seed, batch=len(lengths), kv_heads=2, group=4, head_dim=head_dim, page_size=page_size,
                       max_len=max_len or max(max(lengths), 1), q_dtype=q_dtype, device=device, lengths=lengths,
                       **CACHES[cache])
    p.q = (p.q.float() * 3).to(q_dtype)
    p.variant = dict(sliding_window=window, logit_softcap=cap,
                     sinks=random_sinks(seed + 1, p.q.shape[1], device) if sinks else None)
    return p


def run(p, path, plan=None, poison=math.nan, **overrides):
    """One decode of problem p with its variant (overrides: other variant arguments), out and
    lse poisoned first (with NaN, or where NaN is expected with a finite `poison`). Returns
    out, lse, the error word and the plan it ran on (for the plain path, the plan decode()
    makes: DecodePlan of the batch, the table and the window)."""
    variant = {**p.variant, **overrides}
    out = torch.full_like(p.q, poison)
    lse = torch.full(p.q.shape[:2], poison, device=p.q.device)
    errors = torch.zeros(1, dtype=torch.int32, device=p.q.device)
    kw = dict(k_scale=p.k_scale, v_scale=p.v_scale, out=out, lse=lse, errors=errors, **variant)
    if path == "plain":
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, kv_cache_dtype=p.kv_cache_dtype, **kw)
        plan = plan or p.plan(sliding_window=variant["sliding_window"], logit_softcap=bool(variant["logit_softcap"]),
                              sinks=variant["sinks"] is not None)
    else:
        plan = plan or p.plan()
        plan.run(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, **kw)
    torch.cuda.synchronize()
    return out, lse, errors.item(), plan


# (name, lengths, window, cap, sinks, many chunks): one chunk = lengths (or the window's
# span) of at most 64 keys; many = long sequences, a window of hundreds of keys.
CASES = [
    ("window 5 (shorter than a page), one chunk, long sequences", [900, 3, 5, 6, 517], 5, 0.0, False, False),
    ("window 100 cutting pages, one chunk", [1000, 517, 100, 99, 1], 100, 0.0, False, False),
    ("window 700 cutting pages, many chunks", [2000, 1533, 700, 701, 12], 700, 0.0, False, True),
    ("soft-cap, one chunk", [64, 1, 33, 17], 0, CAP, False, False),
    ("soft-cap, many chunks", [2000, 1, 777, 1500], 0, CAP, False, True),
    ("sinks, one chunk, length-0 sequences", [64, 0, 1, 0], 0, 0.0, True, False),
    ("sinks, many chunks, length-0 sequences", [2000, 0, 5, 1234], 0, 0.0, True, True),
    ("all three, one chunk (window 9), length 0", [1500, 0, 9, 40], 9, CAP, True, False),
    ("all three, many chunks (window 600)", [2000, 0, 601, 1999], 600, CAP, True, True),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("what,lengths,window,cap,sinks,many", CASES, ids=[c[0] for c in CASES])
def test_variant_matches_reference(cuda, path, what, lengths, window, cap, sinks, many):
    p = variant_problem(600 + len(what), lengths, window=window, cap=cap, sinks=sinks, device=cuda)
    out, lse, errors, plan = run(p, path)
    assert errors == 0
    assert (plan.num_chunks > 1) == many, plan  # both kinds of step are tested
    assert plan.max_window == window and plan.config_name.endswith("+window +softcap +sinks")
    assert_matches_reference(out, lse, p.reference(), p.seq_lens)
    if sinks:  # a length-0 sequence: out 0, lse its sink (-inf for the head without one)
        for b in (p.seq_lens == 0).nonzero().flatten().tolist():
            assert out[b].eq(0).all()
            torch.testing.assert_close(lse[b], p.variant["sinks"], rtol=2.0**-20, atol=2.0**-20)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("head_dim,cache,page_size,q_dtype", [
    (64, "uint8", 16, torch.float16), (256, "float8_e5m2", 7, torch.float16), (64, "float16", 16, torch.bfloat16),
    (128, "float16", 32, torch.float16), (256, "float16", 16, torch.bfloat16), (128, "uint8", 5, torch.bfloat16),
    (64, "float8_e4m3fn", 7, torch.float16), (128, "uint8 e4m3", 16, torch.float16),
    (256, "uint8 e4m3", 5, torch.bfloat16), (64, "bfloat16", 16, torch.bfloat16), (128, "bfloat16", 32, torch.bfloat16),
    (256, "bfloat16", 7, torch.bfloat16)])
def test_every_family_runs_the_variants(cuda, path, head_dim, cache, page_size, q_dtype):
    """Each head dim and cache family's variant Config (vxqa::DefaultDecoderConfigs), fp16 and
    bf16 q (bf16 only for a bf16 cache), page sizes that a window cuts mid-page (7, 5) or that
    hold it (32)."""
    p = variant_problem(700 + head_dim + page_size, [1200, 0, 30, 801], window=29, cap=CAP, sinks=True,
                        head_dim=head_dim, page_size=page_size, cache=cache, q_dtype=q_dtype, device=cuda)
    out, lse, errors, _ = run(p, path)
    assert errors == 0
    assert_matches_reference(out, lse, p.reference(), p.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_each_variant_off_at_run_time_on_a_variant_plan(cuda, path):
    """A plan for the soft-cap and sinks runs plain attention when a run passes neither (the
    variant Config takes them off at run time), and the soft-cap alone, and the sinks alone."""
    p = variant_problem(710, [1500, 0, 64, 700], cap=CAP, sinks=True, device=cuda)
    plan = p.plan(logit_softcap=True, sinks=True)
    for variant in (dict(logit_softcap=0.0, sinks=None), dict(sinks=None), dict(logit_softcap=0.0)):
        out, lse, errors, _ = run(p, path, plan if path == "planned" else None, **variant)
        assert errors == 0
        assert_matches_reference(out, lse, p.reference(**variant), p.seq_lens)


def test_a_window_plan_chunks_over_the_window(cuda):
    """DecodePlan(sliding_window=W): chunks over W + 15 keys (vxqa::plan_span), not over
    max_context; a plan for a window as long as max_context chunks as a plain plan's span."""
    p = variant_problem(720, [4000, 3000], device=cuda)
    plain = p.plan()
    windowed = p.plan(sliding_window=128)
    wide = p.plan(sliding_window=10**6)
    assert plain.max_window == 0 and not plain.config_name.endswith("+sinks")
    assert windowed.max_window == 128 and windowed.variant == vxqa_torch.VARIANT_SLIDING_WINDOW
    for plan in (plain, windowed, wide):
        assert plan.num_chunks == plan_num_chunks(plan.max_context, plan.max_window, plan.chunk_tokens), plan
    assert windowed.num_chunks * windowed.chunk_tokens < 128 + 15 + windowed.chunk_tokens < plain.max_context
    assert wide.num_chunks * wide.chunk_tokens >= wide.max_context


def set_element(cache, p, b, t, h, d, value):
    """Dim d of KV head h at token t of sequence b: an fp16 value, or in a uint8 (E5M2) cache
    the code of +inf, -inf or NaN."""
    page_size = cache.shape[1]
    page = p.block_table[b, t // page_size].item()
    if cache.dtype == torch.uint8:
        value = 0x7C if value == math.inf else 0xFC if value == -math.inf else 0x7F
    cache[page, t % page_size, h, d] = value


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cache", ["uint8", "float16"])
def test_non_finite_inputs_under_the_variants(cuda, path, cache):
    """What each variant changes about NaN and inf inputs (the C++ suite's
    non_finite_under_the_variants, through the ops), out and lse poisoned with finite values:
    a sink is the one weight of a head whose every score is -inf (out 0, lse the sink; NaN where
    the sink is -inf); the soft-cap makes an infinite score a finite logit (+-cap), a NaN one
    stays NaN; a NaN V inside a window is NaN at its dim, one before it nothing."""
    kv = dict(head_dim=64, cache=cache, device=cuda)
    p = variant_problem(780, [300, 500, 40], sinks=True, **kv)
    p.q[1, 4:8, 2] = 1.0  # sequence 1, KV head 1: every score -inf
    for t in range(500):
        set_element(p.k_cache, p, 1, t, 1, 2, -math.inf)
    p.variant["sinks"][7] = -math.inf
    want = p.reference()
    assert want.out[1, 4:7].eq(0).all() and want.lse[1, 4:7].eq(p.variant["sinks"][4:7].double()).all()
    assert want.out[1, 7].isnan().all() and want.lse[1, 7].isnan() and want.out.isnan().sum() == 64
    out, lse, errors, _ = run(p, path, poison=7.0)
    assert errors == 0
    assert_matches_reference(out, lse, want, p.seq_lens)

    p = variant_problem(781, [300, 500, 40], cap=CAP, **kv)
    p.q[0, 0:4, 2] = 1.0  # sequence 0, KV head 0: a score of +inf, fifty of -inf, all capped
    set_element(p.k_cache, p, 0, 100, 0, 2, math.inf)
    for t in range(200, 250):
        set_element(p.k_cache, p, 0, t, 0, 2, -math.inf)
    set_element(p.k_cache, p, 2, 10, 1, 7, math.nan)  # sequence 2, KV head 1: NaN scores
    want = p.reference()
    assert want.out[0].isfinite().all() and want.out[2, 4:8].isnan().all() and want.out.isnan().sum() == 4 * 64
    out, lse, errors, _ = run(p, path, poison=7.0)
    assert errors == 0
    assert_matches_reference(out, lse, want, p.seq_lens)

    p = variant_problem(782, [300, 500, 40], window=37, cap=CAP, sinks=True, **kv)
    set_element(p.v_cache, p, 0, 299, 1, 5, math.nan)  # inside the window: dim 5 of heads 4..7
    set_element(p.v_cache, p, 0, 260, 0, 5, math.nan)  # before it: nothing
    want = p.reference()
    assert want.out[0, 4:8, 5].isnan().all() and want.out.isnan().sum() == 4 and want.lse.isfinite().all()
    out, lse, errors, _ = run(p, path, poison=7.0)
    assert errors == 0
    assert_matches_reference(out, lse, want, p.seq_lens)
    with pytest.raises(AssertionError, match="out off by"):  # a NaN written where none belongs fails
        out[0, 0, 0] = math.nan
        assert_matches_reference(out, lse, want, p.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_a_wrong_variant_fails_the_comparison(cuda, path):
    """The kernel's answer against the reference of a wrong variant: the window one token
    longer or shorter, the sinks or the soft-cap ignored; each fails the bound (the right one
    passes)."""
    p = variant_problem(730, [2000, 300, 517], window=100, cap=CAP, sinks=True, device=cuda)
    out, lse, errors, _ = run(p, path)
    assert errors == 0
    assert_matches_reference(out, lse, p.reference(), p.seq_lens)
    for wrong in (dict(sliding_window=101), dict(sliding_window=99), dict(sinks=None), dict(logit_softcap=0.0)):
        with pytest.raises(AssertionError, match="out off by"):
            assert_matches_reference(out, None, p.reference(**wrong), p.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_variants_in_a_cuda_graph_follow_lengths_and_sinks(cuda, path):
    """The sinks tensor is read at every launch: a replayed graph follows its updates (and
    the lengths') with the window and the cap baked in."""
    p = variant_problem(740, [1000] * 4, window=200, cap=CAP, sinks=True, device=cuda)
    plan = p.plan() if path == "planned" else None  # made before the capture: it asks the device
    out = torch.empty_like(p.q)
    lse = torch.empty(p.q.shape[:2], device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    lens = torch.zeros(4, dtype=torch.int32, device=cuda)
    sinks = p.variant["sinks"].clone()
    p.seq_lens = lens
    kw = dict(k_scale=p.k_scale, v_scale=p.v_scale, out=out, lse=lse, errors=errors, sliding_window=200,
              logit_softcap=CAP, sinks=sinks)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        if path == "plain":
            vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, lens, kv_cache_dtype=p.kv_cache_dtype, **kw)
        else:
            plan.run(p.q, p.k_cache, p.v_cache, p.block_table, lens, **kw)
    for step, (lengths, shift) in enumerate([([1, 17, 400, 999], 0.0), ([0, 600, 128, 1000], 3.0),
                                             ([300, 0, 0, 5], -4.0)]):
        lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        sinks.copy_(p.variant["sinks"] + shift)
        out.fill_(math.nan)
        lse.fill_(math.nan)
        errors.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert errors.item() == 0, f"replay {step}"
        assert_matches_reference(out, lse, p.reference(seq_lens=lens, sinks=sinks.clone()), lens)


@pytest.mark.parametrize("path", PATHS)
def test_variants_under_torch_compile_match_eager(cuda, path):
    p = variant_problem(750, [700, 0, 33], window=64, cap=CAP, sinks=True, head_dim=64, device=cuda)
    plan = p.plan()
    sinks = p.variant["sinks"]

    def attention(q, k_cache, v_cache, block_table, seq_lens, sinks):
        kw = dict(k_scale=p.k_scale, v_scale=p.v_scale, sliding_window=64, logit_softcap=CAP, sinks=sinks)
        if path == "plain":
            out = vxqa_torch.decode(q * 0.5, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype="fp8_e5m2", **kw)
        else:
            out = plan.run(q * 0.5, k_cache, v_cache, block_table, seq_lens, **kw)
        return out + 1

    compiled = torch.compile(attention, fullgraph=True, dynamic=True)
    got = compiled(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, sinks)
    want = attention(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, sinks)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-3)


def test_opcheck_with_variants_on_cuda_tensors(cuda):
    p = variant_problem(760, [150, 0], window=40, cap=CAP, sinks=True, head_dim=64, device=cuda, max_len=200)
    out = torch.empty_like(p.q)
    lse = torch.empty(p.q.shape[:2], device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    variant = dict(sliding_window=40, logit_softcap=CAP, sinks=p.variant["sinks"])
    torch.library.opcheck(torch.ops.vxqa.decode_out.default,
                          (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, "fp8_e5m2", None, p.k_scale,
                           p.v_scale, None, None, 0, out, lse, errors), variant)
    plan = p.plan()
    torch.library.opcheck(torch.ops.vxqa.decode_planned.default,
                          (plan.ints, plan.workspace, p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens,
                           "fp8_e5m2", None, p.k_scale, p.v_scale, None, None, out, lse, errors), variant)


@pytest.mark.parametrize("path", PATHS)
def test_variant_refusals_name_the_argument(cuda, path):
    """On CUDA tensors: a soft-cap so small that softmax_scale * k_scale / cap overflows fp32
    (vxqa's validate names it), sinks on the CPU, a window above the plan's."""
    p = variant_problem(770, [100, 50], window=16, cap=CAP, sinks=True, head_dim=64, device=cuda)
    with pytest.raises(ValueError, match=r"^logit_softcap: "):
        run(p, path, logit_softcap=1e-45)
    with pytest.raises(ValueError, match=r"^sinks: must be a CUDA tensor"):
        run(p, path, sinks=p.variant["sinks"].cpu())
    if path == "planned":
        with pytest.raises(ValueError, match=r"^sliding_window: 17 is outside 1\.\.16"):
            run(p, path, sliding_window=17)
        with pytest.raises(ValueError, match=r"^sinks: given to a plan made without sinks"):
            run(p, path, p.plan(sliding_window=16, logit_softcap=True))
