"""Multi-token queries on the GPU (speculative-decoding verification, MTP: q [num_tokens, ...]
with q_indptr, a plan's max_q_len) against the float64 reference (vxqa_torch.reference: token
i of a sequence's last n sees keys 0 .. len - n + i, with a window the W ending there) within
the tests' bound, through both paths (decode(), planned every call for its own tokens; a
DecodePlan(max_q_len=N)): 1 to 16 tokens a sequence, uniform and ragged (sequences of 0
tokens, sequences all of whose tokens are queries), groups 1, 4, 8 and 12 (up to three CTAs of
rows a KV head), every head dim and cache family with fp16 and bf16 q (a bf16 cache, on sm_80
and newer, with bf16 q only), a window shorter than the tokens' spread and windows cutting
pages, the soft-cap and sinks, under one chunk and many; each token's rows against a one-token decode over its keys; rows past q_indptr[batch]
(vLLM's padding) left as they were; bad counts (more tokens than keys, more than max_q_len)
flagged; a multi-token plan running one-token steps; vLLM's speculative-decoding layout
(append_kv of every token, then the verification decode); a CUDA graph replaying with other
q_indptr and lengths; torch.compile and opcheck; the refusals on CUDA tensors; and the
kernel's answer failing against a wrong causal rule. Skips without a GPU."""
import math

import pytest
import torch

import vxqa_torch
from problems import (CACHES, assert_matches_reference, encode, expected_outputs, random_problem, random_sinks,
                      skip_bf16_cache_below_sm80)
from vxqa_torch._fake import plan_num_chunks

PATHS = ["plain", "planned"]
CAP = 5.0  # with q 3x larger, scores of several units: the cap bends them


def multi_problem(seed, lengths, q_lens, *, group=4, window=0, cap=0.0, sinks=False, head_dim=128, page_size=16,
                  cache="uint8", q_dtype=torch.float16, device="cuda", max_len=None, extra_rows=0):
    """Sequences of `lengths` cached tokens whose last q_lens[b] are query tokens (q_indptr), 2
    KV heads of `group` query heads, q 3x larger (as the variant tests'), and the variant."""
    skip_bf16_cache_below_sm80(CACHES[cache]["cache_dtype"], device)
    p = random_problem(seed, batch=len(lengths), kv_heads=2, group=group, head_dim=head_dim, page_size=page_size,
                       max_len=max_len or max(max(lengths), 1), q_dtype=q_dtype, device=device, lengths=lengths,
                       q_lens=q_lens, extra_rows=extra_rows, **CACHES[cache])
    p.q = (p.q.float() * 3).to(q_dtype)
    p.variant = dict(sliding_window=window, logit_softcap=cap,
                     sinks=random_sinks(seed + 1, p.q.shape[1], device) if sinks else None)
    return p


def default_q_len(p, plan=None):
    """The max_q_len a call without one runs with: q's rows, at most 16 (or the plan's)."""
    return min(p.q.shape[0], plan.max_q_len if plan is not None else 16)


def run(p, path, plan=None, max_q_len=None, fill=math.nan, **overrides):
    """One decode of problem p (its q_indptr and variant; overrides: other variant arguments),
    out and lse filled with `fill` first. Returns out, lse, the error word and the plan it ran
    on (for the plain path, the plan decode() makes: DecodePlan of the batch, the table, the
    window and max(2, max_q_len))."""
    variant = {**p.variant, **overrides}
    out = torch.full_like(p.q, fill)
    lse = torch.full(p.q.shape[:2], fill, device=p.q.device)
    errors = torch.zeros(1, dtype=torch.int32, device=p.q.device)
    kw = dict(k_scale=p.k_scale, v_scale=p.v_scale, out=out, lse=lse, errors=errors, q_indptr=p.q_indptr,
              max_q_len=max_q_len, **variant)
    if path == "plain":
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, kv_cache_dtype=p.kv_cache_dtype, **kw)
        plan = plan or p.plan(max_q_len=max(2, max_q_len or default_q_len(p)),
                              sliding_window=variant["sliding_window"], logit_softcap=bool(variant["logit_softcap"]),
                              sinks=variant["sinks"] is not None)
    else:
        plan = plan or p.plan()
        plan.run(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, **kw)
    torch.cuda.synchronize()
    return out, lse, errors.item(), plan


def rows_of(p, sequences):
    """The q rows of `sequences` (their tokens, in order)."""
    offsets = p.q_indptr.tolist()
    return [r for b in sequences for r in range(offsets[b], offsets[b + 1])]


# (name, lengths, query tokens a sequence, group, window, cap, sinks, many chunks): one chunk =
# spans of at most 128 keys (a multi-token plan's chunk is at least two SM80 rounds: 2 x 16 x
# 8 warps, or 2 x 16 x 4 for D 256 fp16), many = long sequences of few heads.
CASES = [
    ("4 tokens each, group 4 (16 rows a KV head), one chunk", [40, 64, 5, 17], [4, 4, 4, 4], 4, 0, 0.0, False,
     False),
    ("ragged 0..16: sequences of 0 tokens and one all queries, many chunks", [2000, 700, 16, 0, 1500, 33],
     [16, 0, 16, 0, 7, 1], 4, 0, 0.0, False, True),
    ("16 tokens each, group 1, many chunks", [1000, 999, 17], [16, 16, 16], 1, 0, 0.0, False, True),
    ("8 tokens each, group 8 (64 rows: one CTA's), many chunks", [800, 300], [8, 8], 8, 0, 0.0, False, True),
    ("3 tokens each, group 12 (36 rows), many chunks", [1200, 64, 3], [3, 3, 3], 12, 0, 0.0, False, True),
    ("13 tokens each, group 12 (156 rows: three CTAs a KV head), one chunk", [120, 13], [13, 13], 12, 0, 0.0, False,
     False),
    ("one token each through q_indptr (vLLM's metadata of decodes), one chunk", [100, 1, 128], [1, 1, 1], 4, 0, 0.0,
     False, False),
    ("window 5, shorter than the 16 tokens' spread, one chunk", [900, 16, 100], [16, 16, 9], 4, 5, 0.0, False, False),
    ("window 600 cutting pages, many chunks", [2000, 1533, 601], [16, 5, 16], 4, 600, 0.0, False, True),
    ("soft-cap, many chunks", [2000, 1, 777], [9, 1, 16], 4, 0, CAP, False, True),
    ("sinks, sequences of 0 tokens, one chunk", [64, 0, 16, 40], [16, 0, 2, 0], 4, 0, 0.0, True, False),
    ("all three, group 12, many chunks (window 300)", [2000, 0, 301, 1999], [16, 0, 16, 4], 12, 300, CAP, True,
     True),
    ("all three, 2 tokens each (MTP), one chunk (window 9)", [1500, 9, 40, 2], [2, 2, 2, 2], 4, 9, CAP, True, False),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("what,lengths,q_lens,group,window,cap,sinks,many", CASES, ids=[c[0] for c in CASES])
def test_multi_token_matches_reference(cuda, path, what, lengths, q_lens, group, window, cap, sinks, many):
    p = multi_problem(800 + len(what), lengths, q_lens, group=group, window=window, cap=cap, sinks=sinks, device=cuda)
    out, lse, errors, plan = run(p, path)
    assert errors == 0
    assert (plan.num_chunks > 1) == many, plan  # both kinds of step are tested
    assert plan.max_q_len >= max(q_lens) and plan.config_name.endswith(" q16"), plan.config_name
    assert_matches_reference(out, lse, p.reference(), p.seq_lens, p.q_indptr)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("head_dim,cache,page_size,q_dtype", [
    (64, "uint8", 16, torch.float16), (256, "float8_e5m2", 7, torch.float16), (64, "float16", 16, torch.bfloat16),
    (128, "float16", 32, torch.float16), (256, "float16", 16, torch.bfloat16), (128, "uint8", 5, torch.bfloat16),
    (256, "uint8", 16, torch.bfloat16), (128, "float8_e5m2", 16, torch.float16),
    (64, "uint8 e4m3", 16, torch.bfloat16), (128, "float8_e4m3fn", 7, torch.float16),
    (256, "uint8 e4m3", 5, torch.float16), (256, "float8_e4m3fn", 16, torch.bfloat16),
    (64, "bfloat16", 16, torch.bfloat16), (128, "bfloat16", 32, torch.bfloat16), (256, "bfloat16", 16, torch.bfloat16),
    (128, "bfloat16", 5, torch.bfloat16)])
def test_every_family_runs_multi_token_queries(cuda, path, head_dim, cache, page_size, q_dtype):
    """Each head dim and cache family's multi-token Config (vxqa::DefaultDecoderConfigs'
    opt::MaxQueryLen<16>: 8 warps, 4 for D 256 16-bit caches), fp16 and bf16 q (bf16 only for a
    bf16 cache), ragged tokens, a window of 29 cutting pages of 7 and 5, the soft-cap and sinks."""
    p = multi_problem(900 + head_dim + page_size, [1200, 0, 30, 801], [16, 0, 5, 3], window=29, cap=CAP, sinks=True,
                      head_dim=head_dim, page_size=page_size, cache=cache, q_dtype=q_dtype, device=cuda)
    out, lse, errors, _ = run(p, path)
    assert errors == 0
    assert_matches_reference(out, lse, p.reference(), p.seq_lens, p.q_indptr)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("window", [0, 37])
def test_each_token_is_a_one_token_decode_over_its_keys(cuda, path, window):
    """Token i of n is the one-token decode of the sequence's first len - n + i + 1 keys (with
    a window, the W of them ending there): vxqa's one-token decode of those rows as sequences of
    their own (each row's table, that many keys) and the multi-token decode both pass the same
    reference; token n - 1 is the sequence's own one-token decode."""
    p = multi_problem(950 + window, [700, 16, 230], [16, 16, 5], window=window, cap=CAP, sinks=True, device=cuda)
    out, lse, errors, _ = run(p, path)
    assert errors == 0
    offsets, lengths = p.q_indptr.tolist(), p.seq_lens.tolist()
    seq_of = [b for b in range(len(lengths)) for _ in range(offsets[b], offsets[b + 1])]
    keys = [lengths[b] - (offsets[b + 1] - offsets[b]) + (r - offsets[b]) + 1 for r, b in enumerate(seq_of)]
    one = multi_problem(950 + window, [700, 16, 230], [16, 16, 5], window=window, cap=CAP, sinks=True, device=cuda)
    one.q_indptr = None  # each row a sequence of its own, of its token's keys
    one.block_table = p.block_table[seq_of]
    one.seq_lens = torch.tensor(keys, dtype=torch.int32, device=cuda)
    want = one.reference()
    one_out, one_lse, one_errors, _ = run(one, path)
    assert one_errors == 0
    assert_matches_reference(one_out, one_lse, want, one.seq_lens)
    assert_matches_reference(out, lse, want, one.seq_lens)  # (one row a "sequence": the rows' own reference)
    multi = p.reference()  # the same reference (bit for bit on the CPU: test_reference_bounds.py)
    torch.testing.assert_close(want.out, multi.out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(want.lse, multi.lse, rtol=1e-12, atol=1e-12)
    # the last tokens: the one-token decode of the whole sequences
    last = [o - 1 for o in offsets[1:]]
    whole = multi_problem(950 + window, [700, 16, 230], [16, 16, 5], window=window, cap=CAP, sinks=True, device=cuda)
    whole.q, whole.q_indptr = p.q[last], None
    whole_out, whole_lse, _, _ = run(whole, path)
    assert_matches_reference(whole_out, whole_lse, whole.reference(), whole.seq_lens)
    assert_matches_reference(out[last], lse[last], whole.reference(), whole.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_rows_past_q_indptr_are_left_as_they_were(cuda, path):
    """vLLM pads the query rows for CUDA graphs: rows past q_indptr[batch] are neither read
    (NaN there changes nothing) nor written (they keep what out and lse held)."""
    p = multi_problem(960, [300, 40, 0], [4, 3, 0], device=cuda, extra_rows=5)
    p.q[-5:] = math.nan
    out, lse, errors, _ = run(p, path, fill=7.0)
    assert errors == 0
    assert out[-5:].eq(7.0).all() and lse[-5:].eq(7.0).all()
    assert_matches_reference(out, lse, p.reference(), p.seq_lens, p.q_indptr)


@pytest.mark.parametrize("path", PATHS)
def test_bad_token_counts_are_flagged(cuda, path):
    """A sequence with more query tokens than cached tokens: DECODE_ERROR_BAD_LENGTH and its
    rows NaN; one with more tokens than max_q_len: the bit, and nothing of it written (its
    rows keep what they held); the other sequences right."""
    p = multi_problem(970, [300, 12, 500], [4, 4, 6], device=cuda)
    good = rows_of(p, [0])
    lens = p.seq_lens.clone()
    p.seq_lens[1] = 3  # 4 tokens, 3 keys
    plan = p.plan(max_q_len=6) if path == "planned" else None
    out, lse, errors, _ = run(p, path, plan, max_q_len=6, fill=7.0)
    assert errors == vxqa_torch.DECODE_ERROR_BAD_LENGTH
    assert out[rows_of(p, [1])].isnan().all() and lse[rows_of(p, [1])].isnan().all()
    want = p.reference(seq_lens=lens)
    rows = torch.tensor(good + rows_of(p, [2]), device=cuda)
    assert_matches_reference(out[rows], lse[rows], want.select(rows), lens[[0, 0, 0, 0] + [2] * 6])
    p.seq_lens.copy_(lens)
    out, lse, errors, _ = run(p, path, plan, max_q_len=5, fill=7.0)  # sequence 2 has 6
    assert errors == vxqa_torch.DECODE_ERROR_BAD_LENGTH
    assert out[rows_of(p, [2])].eq(7.0).all() and lse[rows_of(p, [2])].eq(7.0).all()
    rows = torch.tensor(rows_of(p, [0, 1]), device=cuda)
    assert_matches_reference(out[rows], lse[rows], want.select(rows), lens[[0] * 4 + [1] * 4])


def test_a_multi_token_plan_runs_one_token_steps(cuda):
    """DecodePlan(max_q_len=8): its chunks cover plan_span(max_context, max_window, 8), it runs
    on the multi-token Config, and a step without q_indptr (one token a sequence) runs on it."""
    p = multi_problem(980, [1500, 0, 33, 900], [8, 0, 8, 1], window=200, cap=CAP, sinks=True, device=cuda)
    plan = p.plan(max_q_len=8)
    assert plan.max_q_len == 8 and plan.config_name.endswith("+window +softcap +sinks q16"), plan.config_name
    assert plan.num_chunks == plan_num_chunks(plan.max_context, plan.max_window, plan.chunk_tokens, 8), plan
    out, lse, errors, _ = run(p, "planned", plan)
    assert errors == 0
    assert_matches_reference(out, lse, p.reference(), p.seq_lens, p.q_indptr)
    one = random_problem(981, batch=4, kv_heads=2, group=4, head_dim=128, page_size=16, max_len=1500, device=cuda,
                         lengths=[1500, 0, 33, 900])  # one token a sequence, the same shape and table width
    one.q = (one.q.float() * 3).half()
    one.variant = p.variant
    out, lse, errors, _ = run(one, "planned", plan)
    assert errors == 0
    assert_matches_reference(out, lse, one.reference(), one.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_a_wrong_causal_rule_fails_the_comparison(cuda, path):
    """The kernel's answer against references of a wrong rule (each row one key short, every
    token seeing the whole sequence, the tokens one key late) and with two tokens' rows
    swapped: each fails the bound (the right one passes)."""
    p = multi_problem(990, [2000, 300], [16, 5], window=100, cap=CAP, sinks=True, device=cuda)
    out, lse, errors, _ = run(p, path)
    assert errors == 0
    want = p.reference()
    assert_matches_reference(out, lse, want, p.seq_lens, p.q_indptr)
    offsets, lengths = p.q_indptr.tolist(), p.seq_lens.tolist()
    seq_of = [b for b in range(2) for _ in range(offsets[b], offsets[b + 1])]
    position = [lengths[b] - (offsets[b + 1] - offsets[b]) + (r - offsets[b]) for r, b in enumerate(seq_of)]
    last = [r + 1 == offsets[seq_of[r] + 1] for r in range(len(seq_of))]
    wrong_keys = {"one key short": position, "the whole sequence": [lengths[b] for b in seq_of],
                  "one key late": [q + 1 + (not is_last) for q, is_last in zip(position, last)]}
    for name, keys in wrong_keys.items():
        bad = expected_outputs(p.q, p.k_cache, p.v_cache, p.block_table[seq_of],
                               torch.tensor(keys, dtype=torch.int32, device=cuda), None, p.k_scale, p.v_scale,
                               **p.variant)
        with pytest.raises(AssertionError, match=r"out off by"):
            assert_matches_reference(out, None, want._replace(out=bad.out), p.seq_lens, p.q_indptr)
    swapped = out.clone()
    swapped[[3, 4]] = out[[4, 3]]
    with pytest.raises(AssertionError, match=r"sequence 0 token 3 \(row 3\): out off by"):
        assert_matches_reference(swapped, None, want, p.seq_lens, p.q_indptr)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kv_cache_dtype", ["fp8_e5m2", "fp8"])
def test_vllm_speculative_decoding_layout(cuda, path, kv_cache_dtype):
    """vLLM's speculative-decoding verification step: each request's bonus token and its
    drafts are this step's tokens (query_start_loc = q_indptr, max_query_len = max_q_len);
    reshape_and_cache_flash (append_kv) writes every token's K/V first, so seq_lens counts them
    all; then attention over the cache, token i seeing keys 0 .. seq_len - n + i. The cache is
    uint8, E5M2 ("fp8_e5m2") or E4M3 (vLLM's "fp8"), with the layer's scale tensors; the batch
    is padded (a request of 0 tokens, key/value and query rows past the real ones)."""
    num_heads, num_kv_heads, head_size, block_size = 8, 2, 128, 16
    context = [700, 31, 0, 95]  # tokens already cached before this step
    q_lens = [4, 4, 0, 2]  # bonus + 3 drafts; none (a padding request); bonus + 1 draft
    p = multi_problem(1000, [c + n for c, n in zip(context, q_lens)], q_lens, head_dim=head_size, device=cuda,
                      max_len=800, extra_rows=2, cache="uint8" if kv_cache_dtype == "fp8_e5m2" else "uint8 e4m3")
    k_scale, v_scale = torch.tensor(p.k_scale, device=cuda), torch.tensor(p.v_scale, device=cuda)
    tokens = sum(q_lens)
    g = torch.Generator().manual_seed(1001)
    key = torch.randn(tokens + 2, num_kv_heads, head_size, generator=g).half().to(cuda) * 2
    value = torch.randn(tokens + 2, num_kv_heads, head_size, generator=g).half().to(cuda) * 2
    key[tokens:] = value[tokens:] = math.nan  # padding rows: never read
    slots = []
    for b, (c, n) in enumerate(zip(context, q_lens)):
        for t in range(c, c + n):
            slots.append(p.block_table[b, t // block_size].item() * block_size + t % block_size)
    slot_mapping = torch.tensor(slots, dtype=torch.int64, device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    vxqa_torch.append_kv(key, value, slot_mapping, p.k_cache, p.v_cache, kv_cache_dtype=kv_cache_dtype,
                         k_scale=k_scale, v_scale=v_scale, errors=errors)
    query_start_loc, max_query_len = p.q_indptr, max(q_lens)
    output = torch.full_like(p.q, math.nan)
    kw = dict(k_scale=k_scale, v_scale=v_scale, out=output, errors=errors, q_indptr=query_start_loc,
              max_q_len=max_query_len)
    if path == "plain":
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, kv_cache_dtype=kv_cache_dtype, **kw)
    else:
        plan = vxqa_torch.DecodePlan(num_q_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_size,
                                     page_size=block_size, max_batch=8, max_context=800, q_dtype=torch.float16,
                                     kv_cache_dtype=kv_cache_dtype, max_q_len=4, device=p.q.device)
        plan.run(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, **kw)
    torch.cuda.synchronize()
    assert errors.item() == 0
    assert output[tokens:].isnan().all()
    for cache, rows, scale in ((p.k_cache, key, p.k_scale), (p.v_cache, value, p.v_scale)):  # the rows appended
        written = cache[slot_mapping // block_size, slot_mapping % block_size]
        assert torch.equal(written, encode(rows[:tokens], scale, torch.uint8, kv_cache_dtype))
    assert_matches_reference(output, None, p.reference(), p.seq_lens, p.q_indptr)


@pytest.mark.parametrize("path", PATHS)
def test_multi_token_in_a_cuda_graph_follows_q_indptr_and_lengths(cuda, path):
    """q_indptr and the lengths are read at every launch: a graph captured once replays with
    other token counts (ragged, 0 included, fewer rows than q has) and lengths."""
    p = multi_problem(1010, [1000] * 4, [4] * 4, window=200, sinks=True, device=cuda)
    plan = p.plan(max_q_len=8) if path == "planned" else None  # made before the capture
    out = torch.empty_like(p.q)
    lse = torch.empty(p.q.shape[:2], device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    lens = torch.zeros(4, dtype=torch.int32, device=cuda)
    q_indptr = torch.zeros(5, dtype=torch.int32, device=cuda)
    sinks = p.variant["sinks"]
    kw = dict(k_scale=p.k_scale, v_scale=p.v_scale, out=out, lse=lse, errors=errors, sliding_window=200, sinks=sinks,
              q_indptr=q_indptr, max_q_len=8)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        if path == "plain":
            vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, lens, kv_cache_dtype=p.kv_cache_dtype, **kw)
        else:
            plan.run(p.q, p.k_cache, p.v_cache, p.block_table, lens, **kw)
    for step, (lengths, counts) in enumerate([([17, 400, 999, 8], [4, 4, 4, 4]), ([600, 0, 128, 1000], [8, 0, 1, 7]),
                                              ([300, 5, 0, 2], [1, 5, 0, 2])]):
        offsets = [0]
        for n in counts:
            offsets.append(offsets[-1] + n)
        lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        q_indptr.copy_(torch.tensor(offsets, dtype=torch.int32))
        out.fill_(math.nan)
        lse.fill_(math.nan)
        errors.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert errors.item() == 0, f"replay {step}"
        assert out[offsets[-1]:].isnan().all()  # rows past q_indptr[batch]: not written
        assert_matches_reference(out, lse, p.reference(seq_lens=lens, q_indptr=q_indptr.clone()), lens, q_indptr)


@pytest.mark.parametrize("path", PATHS)
def test_multi_token_under_torch_compile_matches_eager(cuda, path):
    p = multi_problem(1020, [700, 0, 33], [5, 0, 3], window=64, cap=CAP, sinks=True, head_dim=64, device=cuda)
    plan = p.plan()
    sinks = p.variant["sinks"]

    def attention(q, k_cache, v_cache, block_table, seq_lens, q_indptr, sinks):
        kw = dict(k_scale=p.k_scale, v_scale=p.v_scale, sliding_window=64, logit_softcap=CAP, sinks=sinks,
                  q_indptr=q_indptr)
        if path == "plain":
            out = vxqa_torch.decode(q * 0.5, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype="fp8_e5m2",
                                    max_q_len=5, **kw)
        else:
            out = plan.run(q * 0.5, k_cache, v_cache, block_table, seq_lens, **kw)
        return out + 1

    compiled = torch.compile(attention, fullgraph=True, dynamic=True)
    args = (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, p.q_indptr, sinks)
    torch.testing.assert_close(compiled(*args), attention(*args), rtol=0, atol=2e-3)


def test_opcheck_with_multi_token_queries_on_cuda_tensors(cuda):
    p = multi_problem(1030, [150, 0, 9], [4, 0, 2], window=40, cap=CAP, sinks=True, head_dim=64, device=cuda,
                      max_len=200)
    out = torch.empty_like(p.q)
    lse = torch.empty(p.q.shape[:2], device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    kw = dict(sliding_window=40, logit_softcap=CAP, sinks=p.variant["sinks"], q_indptr=p.q_indptr, max_q_len=4)
    torch.library.opcheck(torch.ops.vxqa.decode_out.default,
                          (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, "fp8_e5m2", None, p.k_scale,
                           p.v_scale, None, None, 0, out, lse, errors), kw)
    plan = p.plan()
    torch.library.opcheck(torch.ops.vxqa.decode_planned.default,
                          (plan.ints, plan.workspace, p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens,
                           "fp8_e5m2", None, p.k_scale, p.v_scale, None, None, out, lse, errors), kw)


@pytest.mark.parametrize("path", PATHS)
def test_multi_token_refusals_name_the_argument(cuda, path):
    """On CUDA tensors: q_indptr on the CPU, max_q_len past 16; against a plan, a max_q_len
    above the plan's and q_indptr on a plan for one token."""
    p = multi_problem(1040, [100, 50], [4, 2], head_dim=64, device=cuda)
    plan = p.plan() if path == "planned" else None
    on_cpu = multi_problem(1040, [100, 50], [4, 2], head_dim=64, device=cuda)
    on_cpu.q_indptr = on_cpu.q_indptr.cpu()
    with pytest.raises(ValueError, match=r"^q_indptr: must be a CUDA tensor"):
        run(on_cpu, path, plan)
    with pytest.raises(ValueError, match=r"^max_q_len: 17 must be in 0\.\.16"):
        run(p, path, max_q_len=17)
    if path == "planned":
        with pytest.raises(ValueError, match=r"^max_q_len: 5 is above the plan's 4"):
            run(p, path, p.plan(max_q_len=4), max_q_len=5)
        with pytest.raises(ValueError, match=r"^q_indptr: given to a plan made for one query token a sequence"):
            run(p, path, p.plan(max_q_len=1))
