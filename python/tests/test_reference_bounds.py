"""The tests' bound (vxqa_torch.reference.decode_error_model and error_bounds, used by
problems.assert_matches_reference), on the CPU: a port of the C++ error model
(testing/include/vxqa/testing/error_model.h) and of compare.h's bounds.

- Outputs with a correct kernel's roundings pass: the reference rounded to fp16 / bf16 (out)
  and fp32 (lse), and a simulation of the kernels' arithmetic (fp32 scores, fp16 weights (bf16
  for a bf16 cache, whose MMA takes bf16 P), fp32 sums, 64-token chunks merged by their LSE).
- A wrong answer fails where the old bound (2e-3 max|V| + |ref| / 1024) passed it: one
  sequence of 16K and 64K tokens with flat scores, a 16-token tile or the last token dropped;
  two heads of a group swapped fails too.
- The port agrees with the C++ model's formulas: a 2-token problem computed by hand in closed
  form, and the C++ loops transcribed literally (scalar Python) on small problems with a
  masked token, a second chunk, a length-0 sequence and a row of infinite scores.
- The attention variants (sliding window, logit soft-cap, sinks): the reference against
  their definitions written out in scalar Python; their model terms on small problems by
  hand; a simulated kernel with each variant, and all three, passes the bound (one chunk and
  64-token chunks, windows shorter than a page and cutting one mid-page, sinks with a
  length-0 sequence); and a wrong answer fails it: the window off by one token either way,
  the sinks ignored or given to the wrong heads, the soft-cap ignored.
- Multi-token queries (q_indptr): each query token's row of the reference and of its model is
  the one-token decode of its keys, bit for bit (token n - 1: the whole sequence's); the
  reference follows the causal rule written out in scalar Python (with every variant); a
  sequence all of whose tokens are queries by hand; a bad q_indptr refused; a simulated kernel
  with ragged counts passes; and rows of a wrong rule fail (no causal mask, a key short, a key
  late, the window at the sequence's end, two tokens' rows swapped).
- The caches' formats: dequantize reads all 256 E4M3 codes (uint8 under "fp8" / "fp8_e4m3",
  float8_e4m3fn) and E5M2 codes by the OCP definitions, and refuses what the ops refuse; an
  E4M3 problem's reference and model are those of its values in fp16, bit for bit, and its
  bytes read as E5M2 fail the bound; the rounded reference and the simulated kernel pass with
  E4M3 caches too. bf16 caches: dequantize reads every bf16 bit pattern as the fp32 of its 16
  top bits (torch.bfloat16 to float64); their weights' bf16 rounding term is 2^3 times fp16's.
"""
import math

import pytest
import torch

from problems import CACHES, assert_matches_reference, expected_outputs, random_problem, random_sinks
from vxqa_torch.reference import (LN2, LOG2E, decode_error_model, decode_reference, dequantize, error_bounds,
                                  query_rows, visible_keys, weight_rounding_sigma)


def ratios(out, lse, want):
    """max |got - ref| / bound over the non-empty sequences, for out and for lse."""
    out_bound, lse_bound = error_bounds(want.model, want.out, out.dtype)
    live = want.lse.isfinite()
    out_r = ((out.double() - want.out).abs() / out_bound)[live].max().item()
    lse_r = ((lse.double() - want.lse).abs() / lse_bound)[live].max().item()
    return out_r, lse_r


def old_bound_ratios(out, lse, want, v_cache, v_scale):
    """The same against the bound these tests had before: 2e-3 max|V| + |ref| / 1024 for out,
    2e-3 + |ref| 2^-20 for lse."""
    v_max = dequantize(v_cache, v_scale).abs().max().item()
    out_r = ((out.double() - want.out).abs() / (2e-3 * v_max + want.out.abs() / 1024)).max().item()
    lse_r = ((lse.double() - want.lse).abs() / (2e-3 + want.lse.abs() * 2.0**-20)).max().item()
    return out_r, lse_r


def simulated_kernel(p, chunk=64):
    """out (q's dtype) and lse (fp32) of problem p as the kernels round: fp32 scores times the
    fp32 product softmax_scale * k_scale * log2(e), each chunk's weights exp2(s - chunk max)
    rounded to fp16 (bf16 for a bf16 cache: its MMA takes bf16 P) and summed in fp32 with P.V,
    the chunks merged by their LSE in fp32, times
    v_scale, rounded to the output type. (One frame per chunk: the kernels' running frames
    and warps are not simulated; test/cpu/compare_power.cpp does that.)
    p.variant's: a window's keys only, its chunks from the multiple of 16 at or below its
    first key; a soft-cap as the kernel computes it (the argument x = q.k * (scale / (cap
    log2 e)) in fp32, tanh x = 1 - 2 / (e^(2|x|) + 1) in fp32, times cap log2 e); sinks folded
    into the merged (m, l) in fp32 (a length-0 sequence: out 0, lse = the sink).
    p.q_indptr's query tokens: each row over the keys it sees, its chunks from the sequence's
    base (the first token's window start, 16-aligned; 0 without a window), the keys before its
    own window start and after its position masked."""
    batch, q_heads, dim = p.q.shape
    kv_heads = p.k_cache.shape[2]
    group = q_heads // kv_heads
    softmax_scale = p.softmax_scale if p.softmax_scale is not None else 1 / math.sqrt(dim)
    f32 = torch.float32

    def t32(x):
        return torch.tensor(x, dtype=f32)

    qk_scale = t32(softmax_scale) * t32(p.k_scale) * t32(LOG2E)
    window = p.variant.get("sliding_window") or 0
    cap = p.variant.get("logit_softcap") or 0.0
    sinks = p.variant.get("sinks")
    if cap > 0:
        cap_log2 = t32(cap) * t32(LOG2E)
        qk_scale = qk_scale / cap_log2  # the argument's factor
    sink_log2 = None if sinks is None else sinks.cpu().to(f32).reshape(kv_heads, group) * t32(LOG2E)
    keys = dequantize(p.k_cache, 1.0, p.kv_cache_dtype).to(f32)  # exact
    values = dequantize(p.v_cache, 1.0, p.kv_cache_dtype).to(f32)
    weights_dtype = torch.bfloat16 if p.k_cache.dtype == torch.bfloat16 else torch.float16
    out = torch.full((batch, q_heads, dim), math.nan, dtype=p.q.dtype)
    lse = torch.full((batch, q_heads), math.nan)
    page = keys.shape[1]
    rows = query_rows(p.seq_lens, p.q_indptr)
    for b, length, (first_row, tokens), i in ((b, length, rows[b], i) for b, length in enumerate(p.seq_lens.tolist())
                                               for i in range(rows[b][1])):
        row = first_row + i
        out[row], lse[row] = 0.0, -math.inf
        if length == 0:
            if sink_log2 is not None:
                lse[row] = (sink_log2 * t32(LN2)).reshape(q_heads)
            continue
        first, end = visible_keys(length, tokens, i, window)  # this row's keys
        base = visible_keys(length, tokens, 0, window)[0] // 16 * 16 if window > 0 else 0  # the chunks start here
        pages = p.block_table[b, : math.ceil(length / page)].long()
        k = keys[pages].reshape(-1, kv_heads, dim)[base:end]
        v = values[pages].reshape(-1, kv_heads, dim)[base:end]
        q = p.q[row].to(f32).reshape(kv_heads, group, dim)
        s = torch.einsum("hgd,thd->hgt", q, k) * qk_scale  # [h, g, t], fp32, base 2 (soft-cap: s / cap)
        if cap > 0:
            e = torch.exp2(t32(2.8853900817779268) * s.abs())
            s = cap_log2 * torch.copysign(1 - 2 / (e + 1), s)
        s[..., : first - base] = -math.inf  # before the window
        span = end - base
        c = chunk if 0 < chunk < span else span
        n = math.ceil(span / c)
        pad = n * c - span
        s = torch.cat([s, torch.full((kv_heads, group, pad), -math.inf)], dim=2).reshape(kv_heads, group, n, c)
        vp = torch.cat([v, v.new_zeros(pad, kv_heads, dim)]).reshape(n, c, kv_heads, dim)
        m = s.amax(dim=-1)  # [h, g, n]; a chunk wholly before the window: -inf, weight 0
        w = torch.exp2(s - torch.where(m.isfinite(), m, 0.0)[..., None]).to(weights_dtype).to(f32)  # the P.V weights
        l = w.sum(dim=-1)
        o = torch.einsum("hgnc,nchd->hgnd", w, vp) / torch.where(l > 0, l, 1.0)[..., None]
        part_lse = m + torch.log2(l)
        mx = part_lse.amax(dim=-1)
        cw = torch.exp2(part_lse - mx[..., None])
        o_sum, l_sum = torch.einsum("hgn,hgnd->hgd", cw, o), cw.sum(dim=-1)
        if sink_log2 is not None:  # fold_sink: the frame max(m, sink), the sink's weight in it
            m_new = torch.maximum(mx, sink_log2)
            factor = torch.where(m_new == -math.inf, 1.0, torch.exp2(mx - m_new))
            l_sum = l_sum * factor + torch.where(sink_log2 == -math.inf, 0.0, torch.exp2(sink_log2 - m_new))
            o_sum, mx = o_sum * factor[..., None], m_new
        o = o_sum / l_sum[..., None]
        out[row] = (o * t32(p.v_scale)).reshape(q_heads, dim).to(p.q.dtype)
        lse[row] = ((mx + torch.log2(l_sum)) * t32(LN2)).reshape(q_heads)
    return out, lse


# ---- a correct kernel's roundings pass ----

ROUNDED_CASES = [(cache, q_dtype) for cache in ("uint8", "float16", "uint8 e4m3")
                 for q_dtype in (torch.float16, torch.bfloat16)] + [("bfloat16", torch.bfloat16)]  # bf16 q only


@pytest.mark.parametrize("cache,q_dtype", ROUNDED_CASES)
def test_the_reference_rounded_and_a_simulated_kernel_pass(cache, q_dtype):
    worst = {}
    for seed, lengths in enumerate([[1, 0, 2], [17, 100, 64], [900, 65, 129], [5000, 3, 0]]):
        p = random_problem(100 + seed, batch=3, head_dim=64, page_size=16, max_len=max(lengths), q_dtype=q_dtype,
                           device="cpu", lengths=lengths, **CACHES[cache])
        want = p.reference()
        rounded = want.out.to(q_dtype), want.lse.float()
        assert_matches_reference(*rounded, want, p.seq_lens)
        for chunk in (64, 0):
            simulated = simulated_kernel(p, chunk)
            assert_matches_reference(*simulated, want, p.seq_lens)
            worst[(tuple(lengths), chunk)] = ratios(*simulated, want)
        assert ratios(*rounded, want)[0] <= 1
    # The simulated kernel's error is a fair share of the bound, not a sliver of it (the
    # output's own rounding takes up to its half-ulp share).
    assert max(r[0] for r in worst.values()) > 0.1, worst


# ---- a wrong answer fails ----

def long_problem(length):
    """One sequence of `length` tokens, D 64, G 4, 2 KV heads, E5M2 (float8_e5m2), flat
    scores (softmax_scale 0.125: score spread about 0.75), as compare_power.cpp's."""
    p = random_problem(7 + length, batch=1, kv_heads=2, group=4, head_dim=64, page_size=16, max_len=length,
                       cache_dtype=torch.float8_e5m2, device="cpu", lengths=[length])
    p.k_scale, p.v_scale, p.softmax_scale = 0.75, 1.25, 0.125
    return p


@pytest.mark.parametrize("length", [16384, 65536])
def test_a_dropped_tile_or_token_or_swapped_heads_fail_where_the_old_bound_passed(length):
    p = long_problem(length)
    want = p.reference()
    args = (p.q, p.k_cache, p.v_cache)
    scales = (p.softmax_scale, p.k_scale, p.v_scale)
    # The control: a correct kernel's roundings pass.
    simulated = simulated_kernel(p, chunk=1024)
    assert_matches_reference(*simulated, want, p.seq_lens)
    # A 16-token tile dropped (mid-sequence: the tile is a page), the last token dropped.
    row = p.block_table[0]
    tile = length // 2 // 16
    without_tile = torch.cat([row[:tile], row[tile + 1:]])[None]
    shorter = p.seq_lens - 16
    swapped = [1, 0] + list(range(2, p.q.shape[1]))  # heads 0 and 1 (KV head 0) trade outputs
    mutated = {
        "a 16-token tile dropped": decode_reference(*args, without_tile, shorter, *scales),
        "the last token dropped": decode_reference(*args, p.block_table, p.seq_lens - 1, *scales),
        "two heads of a group swapped": (want.out[:, swapped], want.lse[:, swapped]),
    }
    report = {}
    for name, (wrong_out, wrong_lse) in mutated.items():
        out, lse = wrong_out.half(), wrong_lse.float()  # as a kernel would write them
        new, old = ratios(out, lse, want), old_bound_ratios(out, lse, want, p.v_cache, p.v_scale)
        report[name] = new, old
        with pytest.raises(AssertionError, match="sequence 0: out off by"):  # out alone fails
            assert_matches_reference(out, None, want, p.seq_lens)
        if name != "two heads of a group swapped":  # (the old bound caught that one too, at 1.4 to 2.5 times)
            assert max(old) <= 1, (name, old)  # what the old bound let through
    print(f"{length} tokens: worst error / bound (out, lse), new and old: {report}")


# ---- the port agrees with the C++ model ----

def close(a, b, rel=1e-12):
    """a and b within rel of the larger, both finite (or equal)."""
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel * max(abs(a), abs(b)))


def test_a_2_token_problem_by_hand():
    """q = 0: both scores 0, both weights 1 (l = 2), out the mean of the two V rows. Then
    e2 = (2^-10 / sqrt 12)^2 + 2^-44 per token (score error 0), |v_j - out| = |v0 - v1| / 2 and
        out_sigma = sqrt(2 e2) |v0 - v1| / 4,  out_fixed = 2^-22 |v0 - v1| / 2 (no shift),
        lse_sigma = sqrt(2 e2) / 2,           lse_fixed = 2^-20 (ln 2 + 1)."""
    k = torch.tensor([[1.0, -2.0, 0.5, 4.0], [3.0, 0.25, -1.0, 2.0]]).half()
    v = torch.tensor([[0.5, -1.5, 2.0, 8.0], [-0.25, 1.0, 1.0, -3.0]]).half()
    k_cache, v_cache = k.view(1, 2, 1, 4), v.view(1, 2, 1, 4)  # one page of 2 tokens, 1 KV head
    q = torch.zeros(1, 1, 4, dtype=torch.half)
    table, lens = torch.zeros(1, 1, dtype=torch.int32), torch.tensor([2], dtype=torch.int32)
    want = expected_outputs(q, k_cache, v_cache, table, lens, 0.5, 1.0, 1.0)
    e2 = (2.0**-10 / math.sqrt(12)) ** 2 + 2.0**-44
    diff = (v[0] - v[1]).double().abs().tolist()
    m = want.model
    assert close(want.lse[0, 0].item(), math.log(2))
    for d in range(4):
        assert close(want.out[0, 0, d].item(), (v[0, d].item() + v[1, d].item()) / 2)
        assert close(m.out_sigma[0, 0, d].item(), math.sqrt(2 * e2) * diff[d] / 4)
        assert close(m.out_fixed[0, 0, d].item(), 2.0**-22 * diff[d] / 2)
    assert close(m.lse_sigma[0, 0].item(), math.sqrt(2 * e2) / 2)
    assert close(m.lse_fixed[0, 0].item(), 2.0**-20 * (math.log(2) + 1))
    # The bounds of dim 0 (out 0.125, in [2^-3, 2^-2) with its error): 8 sigma + fixed + half
    # an ulp there, fp16's 2^-14 or bf16's 2^-11 + 2^-25, + 2^-22 of (0.125 + error) for the
    # fp32 steps before the output's rounding; lse: 8 sigma + fixed.
    error = 8 * math.sqrt(2 * e2) * 0.75 / 4 + 2.0**-22 * 0.75 / 2
    for dtype, half_ulp in ((torch.float16, 2.0**-14), (torch.bfloat16, 2.0**-11 + 2.0**-25)):
        out_bound, lse_bound = error_bounds(m, want.out, dtype)
        assert close(out_bound[0, 0, 0].item(), error + half_ulp + 2.0**-22 * (0.125 + error))
        assert close(lse_bound[0, 0].item(), 8 * math.sqrt(2 * e2) / 2 + 2.0**-20 * (math.log(2) + 1))


def scalar_model(q, k_cache, v_cache, block_table, seq_lens, softmax_scale, k_scale, v_scale, ref_out, ref_lse,
                 chunk_tokens=64, window=0, cap=0.0, sinks=None):
    """decode_error_model of error_model.h, its loops transcribed into scalar Python (one query
    token a sequence; the variants' terms as error_model.h has them)."""
    kLog2e, kLn2, kScaleEps = 1.4426950408889634, 0.6931471805599453, 2.0**-22
    kTanhError, kSinkEps = 2.0**-20, 2.0**-21

    def fp16_ulp(x):
        a = abs(x)
        return 2.0**-24 if not a >= 2.0**-14 else math.ldexp(1.0, math.frexp(a)[1] - 1 - 10)

    def weight_rounding_sigma(p):
        return p if p < 2.0**-25 else fp16_ulp(p) / math.sqrt(12.0)

    batch, heads, dim = q.shape
    kv_heads, page_size, group = k_cache.shape[2], k_cache.shape[1], heads // k_cache.shape[2]
    qs, ks, vs = q.double().tolist(), dequantize(k_cache, k_scale).tolist(), dequantize(v_cache, v_scale).tolist()
    table, out_ref, lse_ref = block_table.tolist(), ref_out.tolist(), ref_lse.tolist()
    sink_values = None if sinks is None else sinks.double().tolist()
    out_sigma = [[[0.0] * dim for _ in range(heads)] for _ in range(batch)]
    out_fixed = [[[0.0] * dim for _ in range(heads)] for _ in range(batch)]
    lse_sigma = [[0.0] * heads for _ in range(batch)]
    lse_fixed = [[0.0] * heads for _ in range(batch)]
    for b, length in enumerate(seq_lens.tolist()):
        if length <= 0:  # the one query sees no key: out exactly 0, lse -inf or the sink
            if length == 0 and sink_values is not None:
                for hq in range(heads):
                    if math.isfinite(lse_ref[b][hq]):
                        lse_fixed[b][hq] = 2.0**-20 * (abs(lse_ref[b][hq]) + 1)
            continue
        first = max(0, length - window) if window > 0 else 0  # visible_keys(len, 1, 0, window)
        count = length - first
        chunk = chunk_tokens if 0 < chunk_tokens < count else count
        row = lambda cache, j, h: cache[table[b][j // page_size]][j % page_size][h]  # noqa: E731
        for h in range(kv_heads):
            for g in range(group):
                hq = h * group + g
                s, ag, cg = [], [], []
                for j in range(first, length):
                    k = row(ks, j, h)
                    dot = sum(qs[b][hq][d] * k[d] for d in range(dim))
                    dot_abs = sum(abs(qs[b][hq][d] * k[d]) for d in range(dim))
                    s.append(softmax_scale * dot)
                    ag.append(abs(softmax_scale) * dot_abs)
                    if cap > 0:
                        x = s[-1] / cap
                        sech2 = 1 / math.cosh(x) ** 2 if math.isfinite(x) else 0.0
                        s[-1] = cap * math.tanh(x)
                        ag[-1] = ag[-1] * sech2 if sech2 > 0 else 0.0
                        cg.append(cap * sech2 * x if sech2 > 0 else 0.0)
                out, lse = out_ref[b][hq], lse_ref[b][hq]
                mx = max(s)
                if not math.isfinite(mx) or not math.isfinite(lse):
                    continue
                l = e2_sum = shift_sum = cap_sum = 0.0
                p, e2 = [0.0] * count, [0.0] * count
                for j in range(count):
                    p[j] = math.exp(s[j] - mx)
                    if p[j] == 0:
                        continue
                    score_error = 2.0**-22 * (ag[j] + abs(s[j])) * kLog2e
                    rounding = weight_rounding_sigma(p[j])
                    rel2 = kLn2 * kLn2 * score_error * score_error / 3 + 2.0**-44
                    if cap > 0:
                        rel2 += (kTanhError * cap) * (kTanhError * cap) / 3
                    e2[j] = rounding * rounding + p[j] * p[j] * rel2
                    l += p[j]
                    e2_sum += e2[j]
                    shift_sum += p[j] * (s[j] - mx) * kLog2e
                    if cap > 0:
                        cap_sum += p[j] * cg[j]
                w = e2_w = 0.0
                max2 = abs(mx) * kLog2e
                if sink_values is not None:
                    sink = sink_values[hq]
                    w = math.exp(sink - mx)
                    e2_w = (kSinkEps * w) * (kSinkEps * w) / 3
                    # (error_model.h takes |sink| as is: infinite for a head without a sink)
                    max2 = max(abs(mx), abs(sink) if math.isfinite(sink) else 0.0) * kLog2e
                total = l + w
                chunk_eps = 2.0**-21 * (max2 + 24)
                lse_sigma[b][hq] = math.sqrt(e2_sum + e2_w) / total
                lse_fixed[b][hq] = (kLn2 * kScaleEps * (abs(shift_sum) / total + abs(mx) * kLog2e * (l / total))
                                    + kScaleEps * abs(cap_sum) / total + 2.0**-20 * (abs(lse) + 1)
                                    + (chunk_eps if chunk < count else 0.0))
                var, shift, spread = [0.0] * dim, [0.0] * dim, [0.0] * dim
                chunk_sum, chunk_var, cap_shift = [0.0] * dim, [0.0] * dim, [0.0] * dim
                for j in range(count):
                    if p[j] != 0:
                        v = row(vs, first + j, h)
                        for d in range(dim):
                            dv = v[d] - out[d]
                            var[d] += e2[j] * dv * dv
                            shift[d] += p[j] * (s[j] - mx) * kLog2e * dv
                            spread[d] += p[j] * abs(dv)
                            chunk_sum[d] += p[j] * dv
                            if cap > 0:
                                cap_shift[d] += p[j] * cg[j] * dv
                    if (j + 1) % chunk == 0 or j + 1 == count:
                        for d in range(dim):
                            chunk_var[d] += chunk_sum[d] * chunk_sum[d]
                            chunk_sum[d] = 0.0
                if w != 0:
                    for d in range(dim):
                        var[d] += e2_w * out[d] * out[d]
                        shift[d] += mx * kLog2e * w * out[d]
                        spread[d] += w * abs(out[d])
                for d in range(dim):
                    combine_var = chunk_eps * chunk_eps / 3 * chunk_var[d] if chunk < count else 0.0
                    out_sigma[b][hq][d] = math.sqrt(var[d] + combine_var) / total
                    out_fixed[b][hq][d] = (kLn2 * kScaleEps * abs(shift[d]) + kScaleEps * abs(cap_shift[d])
                                           + 2.0**-22 * spread[d]) / total
    return out_sigma, out_fixed, lse_sigma, lse_fixed


def assert_all_close(got, want, what):
    got = got.flatten().tolist()
    want = torch.tensor(want, dtype=torch.float64).flatten().tolist()
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(got, want)) if not close(a, b)]
    assert not bad, f"{what}: {len(bad)} elements differ, first {bad[0]}"


@pytest.mark.parametrize("chunk_tokens", [64, 16, 0])
def test_the_port_agrees_with_the_cpp_loops(chunk_tokens):
    """Sequences of 3, 70 (two chunks of 64), 0 and 5 tokens, E5M2, Hkv 2, G 2, D 8, page 4;
    sequence 0's token 1 has K = (-inf, 0, ...) against q > 0 in dim 0: a -inf score, weight
    0 (masked); sequence 3's token 2 has K = (+inf, 0, ...): scores +inf, rows left to the
    NaN/inf rules (model 0)."""
    p = random_problem(5, batch=4, kv_heads=2, group=2, head_dim=8, page_size=4, max_len=70, cache_dtype=torch.uint8,
                       device="cpu", lengths=[3, 70, 0, 5])
    p.q[..., 0] = p.q[..., 0].abs() + 0.5
    k = p.k_cache.view(torch.float8_e5m2)
    for b, j, value in ((0, 1, -math.inf), (3, 2, math.inf)):
        page, slot = p.block_table[b, j // 4].item(), j % 4
        k[page, slot] = 0.0
        k[page, slot, :, 0] = value
    args = (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, 1 / math.sqrt(8), p.k_scale, p.v_scale)
    ref_out, ref_lse = decode_reference(*args)
    model = decode_error_model(*args, ref_out, ref_lse, chunk_tokens)
    scalar = scalar_model(*args, ref_out, ref_lse, chunk_tokens)
    for got, ref, what in zip(model, scalar, ("out_sigma", "out_fixed", "lse_sigma", "lse_fixed")):
        assert_all_close(got, ref, what)
    assert ref_lse[3].isinf().all() and ref_out[3].isnan().all()  # the rules' row
    assert all(t[2].eq(0).all() and t[3].eq(0).all() for t in model)  # length 0, and rows of +inf scores
    assert model.lse_sigma[:2].gt(0).all() and model.lse_fixed[:2].gt(0).all()
    assert ref_lse[0].isfinite().all()  # the masked token took no part
    want = p.reference().select(slice(0, 3))  # and the comparison, of the 3 sequences it applies to
    assert_matches_reference(want.out.half(), want.lse.float(), want, p.seq_lens[:3])


# ---- the attention variants ----

def naive_reference(p, window=0, cap=0.0, sinks=None):
    """out and lse from the variants' definitions, one (sequence, head) at a time in scalar
    Python: key t of sequence b is row t % page_size of page block_table[b][t // page_size];
    the query (position len - 1) sees keys t >= len - window; each score s = softmax_scale q.k
    becomes cap tanh(s / cap); the sink joins the denominator with no value."""
    batch, q_heads, dim = p.q.shape
    kv_heads, page = p.k_cache.shape[2], p.k_cache.shape[1]
    group = q_heads // kv_heads
    scale = p.softmax_scale if p.softmax_scale is not None else 1 / math.sqrt(dim)
    keys = dequantize(p.k_cache, p.k_scale, p.kv_cache_dtype).tolist()
    values = dequantize(p.v_cache, p.v_scale, p.kv_cache_dtype).tolist()
    table, qs = p.block_table.tolist(), p.q.double().tolist()
    out = [[[0.0] * dim for _ in range(q_heads)] for _ in range(batch)]
    lse = [[-math.inf] * q_heads for _ in range(batch)]
    for b, length in enumerate(p.seq_lens.tolist()):
        for h in range(q_heads):
            logits, rows = [], []
            for t in range(length):
                if window > 0 and t < length - window:
                    continue
                k = keys[table[b][t // page]][t % page][h // group]
                score = scale * sum(qs[b][h][d] * k[d] for d in range(dim))
                logits.append(cap * math.tanh(score / cap) if cap > 0 else score)
                rows.append(values[table[b][t // page]][t % page][h // group])
            terms = logits + ([float(sinks[h])] if sinks is not None else [])
            if not terms or max(terms) == -math.inf:
                continue
            m = max(terms)
            denominator = sum(math.exp(x - m) for x in terms)
            lse[b][h] = m + math.log(denominator)
            for d in range(dim):
                out[b][h][d] = sum(math.exp(x - m) * row[d] for x, row in zip(logits, rows)) / denominator
    return torch.tensor(out, dtype=torch.float64), torch.tensor(lse, dtype=torch.float64)


VARIANTS = {  # name: (sliding_window, logit_softcap, sinks?)
    "window": (5, 0.0, False), "window mid-page": (37, 0.0, False), "soft-cap": (0, 3.0, False),
    "sinks": (0, 0.0, True), "all three": (37, 3.0, True),
}


@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
def test_the_reference_follows_the_definitions(variant):
    window, cap, with_sinks = VARIANTS[variant]
    p = random_problem(300, batch=4, kv_heads=2, group=2, head_dim=8, page_size=4, max_len=70, device="cpu",
                       lengths=[70, 0, 3, 45])
    p.q *= 3  # scores of a few units: the soft-cap bends them
    sinks = random_sinks(301, 4, "cpu", center=2.0) if with_sinks else None
    args = (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, None, p.k_scale, p.v_scale)
    out, lse = decode_reference(*args, sliding_window=window, logit_softcap=cap, sinks=sinks)
    want_out, want_lse = naive_reference(p, window, cap, sinks)
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)
    if with_sinks:  # length 0: out 0, lse = the sink (the last head has none: -inf)
        assert out[1].eq(0).all() and torch.equal(lse[1], sinks.double())
    # Each variant changes the answer (so that the tests of it can tell).
    plain_out, _ = decode_reference(*args)
    assert not torch.allclose(out[0], plain_out[0], atol=1e-3)


def test_the_variants_off_are_plain_attention():
    p = random_problem(302, batch=3, head_dim=64, page_size=16, max_len=300, device="cpu", lengths=[300, 0, 17])
    args = (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, None, p.k_scale, p.v_scale)
    plain = decode_reference(*args)
    for kw in (dict(sliding_window=None, logit_softcap=None), dict(sliding_window=300),
               dict(sinks=torch.full((8,), -math.inf))):
        out, lse = decode_reference(*args, **kw)
        assert torch.equal(out, plain[0]) and torch.equal(lse, plain[1]), kw
    out, lse = decode_reference(*args, logit_softcap=1e9)  # tanh(x) = x to 1e-16 here
    torch.testing.assert_close(out, plain[0], rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match=r"^sliding_window: -1 must be >= 0"):
        decode_reference(*args, sliding_window=-1)
    with pytest.raises(ValueError, match=r"^logit_softcap: nan must be finite"):
        decode_reference(*args, logit_softcap=math.nan)
    with pytest.raises(ValueError, match=r"^sinks: must be \[num_q_heads\] = \[8\]"):
        decode_reference(*args, sinks=torch.zeros(2))


def test_the_variants_terms_by_hand():
    """q = 0: every score 0, every weight 1. The 2-token problem of test_a_2_token_problem_by_hand
    as the last 2 of 3 tokens under a window of 2 (the first token's V is far off: it must
    take no part); then with a sink of 0 (a third weight of 1, on a value of 0: l = 3); then
    with a soft-cap of 4 (score 0, sech^2 = 1: each score's error the cap's 4 * 2^-20)."""
    k = torch.tensor([[9.0, 9.0, 9.0, 9.0], [1.0, -2.0, 0.5, 4.0], [3.0, 0.25, -1.0, 2.0]]).half()
    v = torch.tensor([[100.0, -100.0, 50.0, 7.0], [0.5, -1.5, 2.0, 8.0], [-0.25, 1.0, 1.0, -3.0]]).half()
    k_cache, v_cache = k.view(1, 3, 1, 4), v.view(1, 3, 1, 4)
    q = torch.zeros(1, 1, 4, dtype=torch.half)
    table, lens = torch.zeros(1, 1, dtype=torch.int32), torch.tensor([3], dtype=torch.int32)
    rounding2 = (2.0**-10 / math.sqrt(12)) ** 2  # a weight of 1 rounded to fp16
    v1, v2 = v[1].double(), v[2].double()

    want = expected_outputs(q, k_cache, v_cache, table, lens, 0.5, 1.0, 1.0, sliding_window=2)
    e2 = rounding2 + 2.0**-44
    m = want.model
    torch.testing.assert_close(want.out[0, 0], (v1 + v2) / 2, rtol=1e-12, atol=0)
    assert close(want.lse[0, 0].item(), math.log(2))
    torch.testing.assert_close(m.out_sigma[0, 0], math.sqrt(2 * e2) * (v1 - v2).abs() / 4, rtol=1e-12, atol=0)
    torch.testing.assert_close(m.out_fixed[0, 0], 2.0**-22 * (v1 - v2).abs() / 2, rtol=1e-12, atol=0)
    assert close(m.lse_sigma[0, 0].item(), math.sqrt(2 * e2) / 2)
    assert close(m.lse_fixed[0, 0].item(), 2.0**-20 * (math.log(2) + 1))

    sink = torch.zeros(1)
    want = expected_outputs(q, k_cache, v_cache, table, lens, 0.5, 1.0, 1.0, sliding_window=2, sinks=sink)
    out = (v1 + v2) / 3
    e2_sink = (2.0**-21) ** 2 / 3
    m = want.model
    torch.testing.assert_close(want.out[0, 0], out, rtol=1e-12, atol=0)
    assert close(want.lse[0, 0].item(), math.log(3))
    torch.testing.assert_close(m.out_sigma[0, 0], (e2 * ((v1 - out) ** 2 + (v2 - out) ** 2) + e2_sink * out**2).sqrt()
                               / 3, rtol=1e-12, atol=0)
    torch.testing.assert_close(m.out_fixed[0, 0], 2.0**-22 * ((v1 - out).abs() + (v2 - out).abs() + out.abs()) / 3,
                               rtol=1e-12, atol=0)
    assert close(m.lse_sigma[0, 0].item(), math.sqrt(2 * e2 + e2_sink) / 3)
    assert close(m.lse_fixed[0, 0].item(), 2.0**-20 * (math.log(3) + 1))

    want = expected_outputs(q, k_cache, v_cache, table, lens, 0.5, 1.0, 1.0, sliding_window=2, logit_softcap=4.0)
    e2_cap = rounding2 + 2.0**-44 + (4.0 * 2.0**-20) ** 2 / 3
    assert close(want.model.lse_sigma[0, 0].item(), math.sqrt(2 * e2_cap) / 2)
    assert close(want.model.lse_fixed[0, 0].item(), 2.0**-20 * (math.log(2) + 1))

    lens[0] = 0  # the sink alone: out 0, lse = the sink (3), within 2^-20 (|sink| + 1)
    want = expected_outputs(q, k_cache, v_cache, table, lens, 0.5, 1.0, 1.0, sinks=sink + 3)
    assert want.out.eq(0).all() and want.lse[0, 0].item() == 3.0
    assert want.model.out_sigma.eq(0).all() and want.model.out_fixed.eq(0).all()
    assert want.model.lse_sigma[0, 0].item() == 0 and close(want.model.lse_fixed[0, 0].item(), 2.0**-20 * 4)


def test_a_row_whose_every_score_is_minus_inf_is_nan_unless_a_sink_weighs():
    """K holds -inf, q > 0: both scores -inf. The softmax is 0 / 0: out and lse NaN, as the C++
    reference (decode_reference.h) and the kernels ("an all -inf row is NaN",
    test/gpu/decode_nonfinite.cu) have it, not logsumexp's -inf; a sink of -inf is none. A
    finite sink is the one weight: out 0, lse = the sink."""
    k = torch.tensor([[-math.inf, 1.0, 0.0, 0.0], [-math.inf, -2.0, 0.0, 0.0]]).half()
    v = torch.tensor([[0.5, -1.5, 2.0, 8.0], [-0.25, 1.0, 1.0, -3.0]]).half()
    k_cache, v_cache = k.view(1, 2, 1, 4), v.view(1, 2, 1, 4)
    q = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]], dtype=torch.half)
    table, lens = torch.zeros(1, 1, dtype=torch.int32), torch.tensor([2], dtype=torch.int32)
    for sinks in (None, torch.tensor([-math.inf])):
        out, lse = decode_reference(q, k_cache, v_cache, table, lens, 0.5, sinks=sinks)
        assert out.isnan().all() and lse.isnan().all()
    out, lse = decode_reference(q, k_cache, v_cache, table, lens, 0.5, sinks=torch.tensor([1.5]))
    assert out.eq(0).all() and lse.item() == 1.5
    # Its bounds: the sink alone, as in a length-0 sequence (error_model.h likewise): out
    # exactly 0, the lse within 2^-20 (|sink| + 1) for the kernels' base-2 round trip.
    m = expected_outputs(q, k_cache, v_cache, table, lens, 0.5, 1.0, 1.0, sinks=torch.tensor([1.5])).model
    assert m.out_sigma.eq(0).all() and m.out_fixed.eq(0).all() and m.lse_sigma.eq(0).all()
    assert m.lse_fixed[0, 0].item() == 2.0**-20 * 2.5
    q[0, 0, 0] = 0.0  # q . k = 0 * -inf: NaN scores, NaN whatever the sink
    out, lse = decode_reference(q, k_cache, v_cache, table, lens, 0.5, sinks=torch.tensor([1.5]))
    assert out.isnan().all() and lse.isnan().all()


def variant_problem(seed, variant, lengths, *, head_dim=64, page_size=16, cache_dtype=torch.uint8,
                    q_dtype=torch.float16, device="cpu", window=None):
    """A problem of `lengths` with a VARIANTS variant: q 3x larger (scores of a few units,
    which the soft-cap of 3 bends) and sinks around log(a few hundred)."""
    default_window, cap, with_sinks = VARIANTS[variant]
    p = random_problem(seed, batch=len(lengths), kv_heads=2, group=4, head_dim=head_dim, page_size=page_size,
                       max_len=max(max(lengths), 1), cache_dtype=cache_dtype, q_dtype=q_dtype, device=device,
                       lengths=lengths)
    p.q = (p.q.float() * 3).to(q_dtype)
    p.variant = dict(sliding_window=default_window if window is None else window, logit_softcap=cap,
                     sinks=random_sinks(seed + 1, 8, device) if with_sinks else None)
    return p


@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
@pytest.mark.parametrize("cache_dtype,q_dtype", [(torch.uint8, torch.float16), (torch.float16, torch.bfloat16)])
def test_a_simulated_kernel_with_variants_passes(variant, cache_dtype, q_dtype):
    worst = 0.0
    for seed, lengths in enumerate([[1, 0, 2, 5], [17, 100, 64, 41], [900, 65, 129, 0], [3000, 3, 0, 1000]]):
        p = variant_problem(400 + seed, variant, lengths, cache_dtype=cache_dtype, q_dtype=q_dtype)
        want = p.reference()
        assert_matches_reference(want.out.to(q_dtype), want.lse.float(), want, p.seq_lens)
        for chunk in (64, 0):
            simulated = simulated_kernel(p, chunk)
            assert_matches_reference(*simulated, want, p.seq_lens)
            worst = max(worst, ratios(*simulated, want)[0])
    assert worst > 0.05, worst  # a fair share of the bound, not a sliver of it


WRONG = {  # what a wrong kernel did: the variant arguments it used instead of the right ones
    "window one token longer": lambda v: dict(v, sliding_window=v["sliding_window"] + 1),
    "window one token shorter": lambda v: dict(v, sliding_window=v["sliding_window"] - 1),
    "sinks ignored": lambda v: dict(v, sinks=None),
    "sinks of the wrong heads": lambda v: dict(v, sinks=v["sinks"].roll(1)),
    "soft-cap ignored": lambda v: dict(v, logit_softcap=0.0),
}


@pytest.mark.parametrize("window", [5, 37, 100, 517], ids=lambda w: f"window {w}")
@pytest.mark.parametrize("wrong", WRONG, ids=list(WRONG))
def test_a_wrong_variant_fails(wrong, window):
    """One sequence of 3000 tokens and one of 600, every variant on; the output of the right
    reference rounded to fp16 passes, that of a wrong one fails, out alone (and lse alone,
    but for a window off by one, which may keep the LSE within its bound)."""
    p = variant_problem(500 + window, "all three", [3000, 600], window=window)
    want = p.reference()
    assert_matches_reference(want.out.half(), want.lse.float(), want, p.seq_lens)
    bad = p.reference(**WRONG[wrong](p.variant))
    with pytest.raises(AssertionError, match="out off by"):
        assert_matches_reference(bad.out.half(), None, want, p.seq_lens)
    if "window" not in wrong:
        with pytest.raises(AssertionError, match="lse off by"):
            assert_matches_reference(None, bad.lse.float(), want, p.seq_lens)


@pytest.mark.parametrize("chunk_tokens", [64, 16, 0])
@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
def test_the_port_agrees_with_the_cpp_loops_with_variants(variant, chunk_tokens):
    """The same transcription with the variants' terms: sequences of 70 (windows cut it),
    0 (with sinks: the sink alone), 3 and 45 tokens, D 8, page 4, q 3x larger (the soft-cap
    bends the scores)."""
    window, cap, with_sinks = VARIANTS[variant]
    p = random_problem(310, batch=4, kv_heads=2, group=2, head_dim=8, page_size=4, max_len=70, device="cpu",
                       lengths=[70, 0, 3, 45])
    p.q *= 3
    sinks = random_sinks(311, 4, "cpu", center=2.0) if with_sinks else None
    args = (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, 1 / math.sqrt(8), p.k_scale, p.v_scale)
    variant_args = dict(sliding_window=window, logit_softcap=cap, sinks=sinks)
    ref_out, ref_lse = decode_reference(*args, **variant_args)
    model = decode_error_model(*args, ref_out, ref_lse, chunk_tokens, **variant_args)
    scalar = scalar_model(*args, ref_out, ref_lse, chunk_tokens, window, cap, sinks)
    for got, ref, what in zip(model, scalar, ("out_sigma", "out_fixed", "lse_sigma", "lse_fixed")):
        assert_all_close(got, ref, what)
    assert model.lse_fixed[0].gt(0).all() and model.out_sigma[0].gt(0).all()
    if with_sinks:  # the length-0 sequence: its lse (the sink) bounded, but for the head without one
        assert model.lse_fixed[1, :-1].gt(0).all() and model.lse_fixed[1, -1] == 0


# ---- multi-token queries ----

def multi_problem(seed, q_lens, lengths, variant="plain", *, head_dim=64, group=4, page_size=16,
                  cache_dtype=torch.uint8, q_dtype=torch.float16, extra_rows=0, window=None):
    """A problem of `lengths` with q_lens query tokens a sequence (q_indptr) and a VARIANTS
    variant ("plain": none): q 3x larger, as variant_problem's."""
    default_window, cap, with_sinks = VARIANTS.get(variant, (0, 0.0, False))
    p = random_problem(seed, batch=len(lengths), kv_heads=2, group=group, head_dim=head_dim, page_size=page_size,
                       max_len=max(max(lengths), 1), cache_dtype=cache_dtype, q_dtype=q_dtype, device="cpu",
                       lengths=lengths, q_lens=q_lens, extra_rows=extra_rows)
    p.q = (p.q.float() * 3).to(q_dtype)
    p.variant = dict(sliding_window=default_window if window is None else window, logit_softcap=cap,
                     sinks=random_sinks(seed + 1, 2 * group, "cpu") if with_sinks else None)
    return p


def token_rows(p):
    """(sequence, length, token, n, row) of every query row of problem p."""
    offsets, lengths = p.q_indptr.tolist(), p.seq_lens.tolist()
    return [(b, lengths[b], i, offsets[b + 1] - offsets[b], offsets[b] + i)
            for b in range(len(lengths)) for i in range(offsets[b + 1] - offsets[b])]


def rows_reference(p, key_range, **variant):
    """out and lse of problem p's query rows (q's rows; others NaN), row by row through the
    one-token reference (expected_outputs': the scales as the kernels take them): a row of
    sequence b, token i of n, over the keys [begin, end) that key_range(length, n, i) gives
    (a one-token decode of `end` keys with a window of end - begin: exactly those keys), with
    p's variant (soft-cap, sinks; `variant` overrides)."""
    v = {**p.variant, **variant}
    out = torch.full(p.q.shape, math.nan, dtype=torch.float64)
    lse = torch.full(p.q.shape[:2], math.nan, dtype=torch.float64)
    for b, length, i, n, row in token_rows(p):
        begin, end = key_range(length, n, i)
        one = expected_outputs(p.q[row:row + 1], p.k_cache, p.v_cache, p.block_table[b:b + 1],
                               torch.tensor([end], dtype=torch.int32), p.softmax_scale, p.k_scale, p.v_scale,
                               sliding_window=end - begin if begin > 0 else 0, logit_softcap=v["logit_softcap"],
                               sinks=v["sinks"])
        out[row], lse[row] = one.out[0], one.lse[0]
    return out, lse


MULTI_LENGTHS = [70, 16, 3, 45, 0, 33]
MULTI_Q_LENS = [16, 16, 3, 1, 0, 7]  # 16 of 70, every token of 16 and of 3, one, none, 7 of 33


@pytest.mark.parametrize("variant", ["plain"] + list(VARIANTS), ids=["plain"] + list(VARIANTS))
def test_each_query_token_is_a_one_token_decode_over_its_keys(variant):
    """Token i of a sequence's last n (len cached tokens) is exactly a one-token decode over
    its len - n + i + 1 keys (with a window W, the W of them ending at its position): the
    reference's rows and their error model, bit for bit; token n - 1 is the one-token decode of
    the whole sequence. Rows past q_indptr[batch] are NaN in the reference, 0 in the model."""
    p = multi_problem(600, MULTI_Q_LENS, MULTI_LENGTHS, variant, head_dim=8, group=2, page_size=4, extra_rows=2)
    window = p.variant["sliding_window"]
    want = expected_outputs(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, p.softmax_scale, p.k_scale,
                            p.v_scale, chunk_tokens=16, q_indptr=p.q_indptr, **p.variant)
    for b, length, i, n, row in token_rows(p):
        keys = length - n + i + 1
        one = expected_outputs(p.q[row:row + 1], p.k_cache, p.v_cache, p.block_table[b:b + 1],
                               torch.tensor([keys], dtype=torch.int32), p.softmax_scale, p.k_scale, p.v_scale,
                               chunk_tokens=16, **p.variant)
        assert torch.equal(want.out[row], one.out[0]) and torch.equal(want.lse[row], one.lse[0]), (b, i)
        for got, ref in zip(want.model, one.model):
            assert torch.equal(got[row], ref[0]), (b, i)
        assert visible_keys(length, n, i, window) == (max(0, keys - window) if window else 0, keys)
    # The last token of each sequence: the one-token problem of those rows, the whole sequences.
    has = [b for b, n in enumerate(MULTI_Q_LENS) if n > 0]
    last = [p.q_indptr[b + 1].item() - 1 for b in has]
    one = expected_outputs(p.q[last], p.k_cache, p.v_cache, p.block_table[has], p.seq_lens[has], p.softmax_scale,
                           p.k_scale, p.v_scale, chunk_tokens=16, **p.variant)
    assert torch.equal(want.out[last], one.out) and torch.equal(want.lse[last], one.lse)
    assert all(torch.equal(got[last], ref) for got, ref in zip(want.model, one.model))
    assert want.out[-2:].isnan().all() and want.lse[-2:].isnan().all()  # the padding rows: no sequence's
    assert all(t[-2:].eq(0).all() for t in want.model)
    # and rows_reference (below) of the rule's ranges is the reference
    out, lse = rows_reference(p, lambda length, n, i: visible_keys(length, n, i, window))
    want = p.reference()
    assert torch.equal(out[:-2], want.out[:-2]) and torch.equal(lse[:-2], want.lse[:-2])


def naive_multi_reference(p, window=0, cap=0.0, sinks=None):
    """out and lse of a multi-token problem from the definitions, in scalar Python: sequence
    b's n = q_indptr[b + 1] - q_indptr[b] tokens are rows q_indptr[b] + i; token i sits at
    position pos = len - n + i and sees the keys t with t <= pos and, with a window W,
    t >= pos - W + 1; soft-cap and sinks as naive_reference's."""
    rows, q_heads, dim = p.q.shape
    kv_heads, page = p.k_cache.shape[2], p.k_cache.shape[1]
    group = q_heads // kv_heads
    scale = p.softmax_scale if p.softmax_scale is not None else 1 / math.sqrt(dim)
    keys = dequantize(p.k_cache, p.k_scale, p.kv_cache_dtype).tolist()
    values = dequantize(p.v_cache, p.v_scale, p.kv_cache_dtype).tolist()
    table, qs, offsets = p.block_table.tolist(), p.q.double().tolist(), p.q_indptr.tolist()
    out = [[[math.nan] * dim for _ in range(q_heads)] for _ in range(rows)]
    lse = [[math.nan] * q_heads for _ in range(rows)]
    for b, length in enumerate(p.seq_lens.tolist()):
        n = offsets[b + 1] - offsets[b]
        for i in range(n):
            row, pos = offsets[b] + i, length - n + i
            for h in range(q_heads):
                logits, vs = [], []
                for t in range(length):
                    if t > pos or (window > 0 and t < pos - window + 1):
                        continue
                    k = keys[table[b][t // page]][t % page][h // group]
                    score = scale * sum(qs[row][h][d] * k[d] for d in range(dim))
                    logits.append(cap * math.tanh(score / cap) if cap > 0 else score)
                    vs.append(values[table[b][t // page]][t % page][h // group])
                terms = logits + ([float(sinks[h])] if sinks is not None else [])
                m = max(terms)
                denominator = sum(math.exp(x - m) for x in terms)
                lse[row][h] = m + math.log(denominator)
                out[row][h] = [sum(math.exp(x - m) * v[d] for x, v in zip(logits, vs)) / denominator
                               for d in range(dim)]
    return torch.tensor(out, dtype=torch.float64), torch.tensor(lse, dtype=torch.float64)


@pytest.mark.parametrize("variant", ["plain"] + list(VARIANTS), ids=["plain"] + list(VARIANTS))
def test_the_multi_token_reference_follows_the_causal_rule(variant):
    """decode_reference with q_indptr against the causal rule written out in scalar Python
    (token i of n sees keys 0 .. len - n + i, with a window the W ending there), within
    1e-12; windows of 5 and 37 keys against 16 tokens: the first token's window starts 15 keys
    before the last's."""
    p = multi_problem(610, MULTI_Q_LENS, MULTI_LENGTHS, variant, head_dim=8, group=2, page_size=4, extra_rows=1)
    v = p.variant
    out, lse = decode_reference(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, None, p.k_scale, p.v_scale,
                                q_indptr=p.q_indptr, **v)
    want_out, want_lse = naive_multi_reference(p, v["sliding_window"], v["logit_softcap"], v["sinks"])
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12, equal_nan=True)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12, equal_nan=True)
    # Every token of a sequence gives another answer (each sees other keys), but where a
    # window of 5 leaves them the same key count: still other keys.
    first, second = p.q_indptr[0].item(), p.q_indptr[0].item() + 1
    assert not torch.allclose(out[first], out[second], atol=1e-3)


def test_the_first_of_every_token_query_sees_one_key_by_hand():
    """q = 0 and a sequence of 2 tokens, both query tokens: token 0 sees key 0 alone (out = v0
    exactly, lse 0; model: its one weight of 1, out_sigma 0), token 1 both (out the mean, lse
    log 2, as test_a_2_token_problem_by_hand)."""
    k = torch.tensor([[1.0, -2.0, 0.5, 4.0], [3.0, 0.25, -1.0, 2.0]]).half()
    v = torch.tensor([[0.5, -1.5, 2.0, 8.0], [-0.25, 1.0, 1.0, -3.0]]).half()
    k_cache, v_cache = k.view(1, 2, 1, 4), v.view(1, 2, 1, 4)
    q = torch.zeros(2, 1, 4, dtype=torch.half)
    table, lens = torch.zeros(1, 1, dtype=torch.int32), torch.tensor([2], dtype=torch.int32)
    want = expected_outputs(q, k_cache, v_cache, table, lens, 0.5, 1.0, 1.0,
                            q_indptr=torch.tensor([0, 2], dtype=torch.int32))
    e2 = (2.0**-10 / math.sqrt(12)) ** 2 + 2.0**-44
    assert torch.equal(want.out[0, 0], v[0].double()) and want.lse[0, 0].item() == 0.0
    assert want.model.out_sigma[0].eq(0).all() and want.model.out_fixed[0].eq(0).all()
    assert close(want.model.lse_sigma[0, 0].item(), math.sqrt(e2))
    assert close(want.model.lse_fixed[0, 0].item(), 2.0**-20)
    torch.testing.assert_close(want.out[1, 0], (v[0].double() + v[1].double()) / 2, rtol=1e-12, atol=0)
    assert close(want.lse[1, 0].item(), math.log(2))
    assert close(want.model.lse_sigma[1, 0].item(), math.sqrt(2 * e2) / 2)


@pytest.mark.parametrize("q_indptr,lengths,rows,reason", [
    ([0, 3], [2], 3, r"sequence 0 has 3 query tokens but only 2 cached tokens \(its query tokens are its last\)"),
    ([1, 3], [5], 3, r"q_indptr\[0\] is 1, must be 0"),
    ([0, 3, 2], [5, 5], 3, r"decreases at 2 \(3 then 2\)"),
    ([0, 3], [5, 5], 3, r"must be \[batch \+ 1\] = \[3\], got 2 offsets"),
    ([0, 3, 5], [5, 5], 4, r"q_indptr\[batch\] is 5, past q's 4 rows"),
], ids=["more tokens than keys", "not from 0", "decreasing", "batch offsets", "past q's rows"])
def test_the_reference_refuses_a_bad_q_indptr(q_indptr, lengths, rows, reason):
    q = torch.zeros(rows, 2, 64, dtype=torch.half)
    cache = torch.zeros(4, 16, 1, 64, dtype=torch.half)
    table = torch.zeros(len(lengths), 1, dtype=torch.int32)
    with pytest.raises(ValueError, match=rf"^q_indptr: {reason}"):
        decode_reference(q, cache, cache, table, torch.tensor(lengths, dtype=torch.int32),
                         q_indptr=torch.tensor(q_indptr, dtype=torch.int32))


@pytest.mark.parametrize("variant", ["plain"] + list(VARIANTS), ids=["plain"] + list(VARIANTS))
@pytest.mark.parametrize("cache_dtype,q_dtype", [(torch.uint8, torch.float16), (torch.float16, torch.bfloat16)])
def test_a_simulated_kernel_with_multi_token_queries_passes(variant, cache_dtype, q_dtype):
    """Ragged tokens (0 to 16 a sequence, a sequence all of whose tokens are queries, padding
    rows past q_indptr[batch]), one chunk and 64-token chunks: the reference rounded to the
    output types and the simulated kernel pass the bound."""
    worst = 0.0
    for seed, (lengths, q_lens) in enumerate([([16, 0, 2, 5], [16, 0, 1, 5]), ([17, 100, 64, 41], [3, 16, 0, 8]),
                                              ([900, 65, 129, 7], [16, 2, 9, 7]), ([3000, 3, 0, 1000], [5, 3, 0, 16])]):
        p = multi_problem(620 + seed, q_lens, lengths, variant, cache_dtype=cache_dtype, q_dtype=q_dtype, extra_rows=3)
        want = p.reference()
        assert_matches_reference(want.out.to(q_dtype), want.lse.float(), want, p.seq_lens, p.q_indptr)
        for chunk in (64, 0):
            out, lse = simulated_kernel(p, chunk)
            assert out[-3:].isnan().all()  # rows of no sequence: not written
            assert_matches_reference(out, lse, want, p.seq_lens, p.q_indptr)
            rows = torch.tensor([r[-1] for r in token_rows(p)])
            worst = max(worst, ratios(out[rows], lse[rows], want.select(rows))[0])
    assert worst > 0.05, worst  # a fair share of the bound, not a sliver of it


WRONG_TOKENS = {  # what a wrong kernel's rows saw: key_range(length, n, i, window) -> [begin, end)
    "no causal mask (every token sees the last token's keys)":
        lambda length, n, i, w: visible_keys(length, n, n - 1, w),
    "each token one key short (its own dropped)": lambda length, n, i, w: (visible_keys(length, n, i, w)[0],
                                                                          length - n + i),
    "the tokens one key late (each sees the next one's keys)":
        lambda length, n, i, w: visible_keys(length + 1, n, i, w) if i < n - 1 else visible_keys(length, n, i, w),
    "the window ending at the sequence's last key for every token": lambda length, n, i, w: (
        visible_keys(length, n, n - 1, w)[0] if w else 0, length - n + i + 1),
}


@pytest.mark.parametrize("variant", ["plain", "all three"])
@pytest.mark.parametrize("wrong", list(WRONG_TOKENS) + ["two tokens' rows swapped"])
def test_a_wrong_multi_token_answer_fails(wrong, variant):
    """Sequences of 3000 and 600 tokens with 16 and 5 query tokens (every variant on, or none;
    window 100): the right reference rounded to fp16 passes, the rows of a wrong causal rule
    fail out's bound (a row one key short or one late, a missing mask, the window at the
    sequence's end), and so do two tokens' rows swapped."""
    if wrong.startswith("the window") and variant == "plain":
        pytest.skip("needs a window")
    p = multi_problem(630, [16, 5], [3000, 600], variant, window=100 if variant != "plain" else 0)
    window = p.variant["sliding_window"]
    want = p.reference()
    assert_matches_reference(want.out.half(), want.lse.float(), want, p.seq_lens, p.q_indptr)
    if wrong in WRONG_TOKENS:
        bad_out, _ = rows_reference(p, lambda length, n, i: WRONG_TOKENS[wrong](length, n, i, window))
    else:
        bad_out = want.out.clone()
        bad_out[[3, 4]] = want.out[[4, 3]]
    with pytest.raises(AssertionError, match=r"sequence \d+ token \d+ \(row \d+\): out off by"):
        assert_matches_reference(bad_out.half(), None, want, p.seq_lens, p.q_indptr)


# ---- the caches' formats ----

def ocp_e4m3(code):
    """OCP E4M3 (float8_e4m3fn) from its definition: sign | 4 exponent bits (bias 7) | 3
    mantissa bits; exponent 0 subnormal (mantissa / 8 * 2^-6); no inf: S.1111.111 is NaN and
    the rest of exponent 15 ordinary, up to 448."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 15, code & 7
    if exponent == 15 and mantissa == 7:
        return math.nan
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def ocp_e5m2(code):
    """OCP E5M2 from its definition: bias 15, 2 mantissa bits, exponent 31 inf or NaN."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 2) & 31, code & 3
    if exponent == 31:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * mantissa / 4 * 2.0**-14
    return sign * (1 + mantissa / 4) * 2.0 ** (exponent - 15)


def assert_same_values(got, want):
    """Element by element equal, a NaN to a NaN and a zero of the same sign."""
    for code, (g, w) in enumerate(zip(got, want)):
        assert (math.isnan(g) and math.isnan(w)) or (g == w and math.copysign(1, g) == math.copysign(1, w)), (
            f"code {code:#04x}: {g} != {w}")


@pytest.mark.parametrize("kv_cache_dtype,dtype", [("fp8", torch.uint8), ("fp8_e4m3", torch.uint8),
                                                  ("auto", torch.float8_e4m3fn), ("fp8", torch.float8_e4m3fn)])
def test_dequantize_reads_every_e4m3_code_by_its_definition(kv_cache_dtype, dtype):
    """E4M3 by torch's float8_e4m3fn conversion agrees with the OCP definition on all 256 codes
    (448 the largest, 2^-9 the least, 0x7F and 0xFF NaN), times the scale."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    assert_same_values(dequantize(codes, 2.0, kv_cache_dtype).tolist(), [2 * ocp_e4m3(c) for c in range(256)])
    assert ocp_e4m3(0x7E) == 448 and ocp_e4m3(0x01) == 2.0**-9 and math.isnan(ocp_e4m3(0xFF))


@pytest.mark.parametrize("kv_cache_dtype,dtype", [(None, torch.uint8), ("fp8_e5m2", torch.uint8),
                                                  ("auto", torch.float8_e5m2), (None, torch.float8_e5m2)])
def test_dequantize_reads_every_e5m2_code_by_its_definition(kv_cache_dtype, dtype):
    """E5M2 as before: a uint8 cache without kv_cache_dtype holds E5M2 codes."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    assert_same_values(dequantize(codes, 0.5, kv_cache_dtype).tolist(), [0.5 * ocp_e5m2(c) for c in range(256)])


def test_dequantize_reads_every_bf16_pattern_as_its_fp32_top_half():
    """A bf16 cache ("auto", or no string: its dtype says) is torch.bfloat16 to float64: each
    of the 65536 patterns is the fp32 whose top 16 bits it is, times the scale."""
    patterns = torch.arange(65536, dtype=torch.int32)
    codes = torch.where(patterns >= 0x8000, patterns - 0x10000, patterns).to(torch.int16).view(torch.bfloat16)
    want = (patterns << 16).view(torch.float32).double() * 2.0
    for kv_cache_dtype in (None, "auto"):
        got = dequantize(codes, 2.0, kv_cache_dtype)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got[~got.isnan()], want[~want.isnan()])


def test_bf16_weights_round_8_times_coarser():
    """The bf16 weights' rounding term: 2^3 times the fp16 one where both are normal; below
    fp16's 2^-25 a bf16 weight still rounds (its error is not the weight), below fp32's least
    normal the kernels' exp2 flushes it to 0 (its error is the weight)."""
    p = torch.tensor([1.0, 0.75, 2.0**-3 * 1.3, 2.0**-14])
    assert torch.equal(weight_rounding_sigma(p, bf16=True), 8 * weight_rounding_sigma(p))
    small = torch.tensor([2.0**-30, 2.0**-127], dtype=torch.float64)
    assert torch.equal(weight_rounding_sigma(small), small)
    assert torch.equal(weight_rounding_sigma(small, bf16=True),
                       torch.tensor([2.0**-37 / math.sqrt(12.0), 2.0**-127], dtype=torch.float64))


def test_dequantize_refuses_what_the_ops_refuse():
    with pytest.raises(ValueError, match=r"^cache: a uint8 cache holds fp8 codes of an unstated format"):
        dequantize(torch.zeros(4, dtype=torch.uint8), 1.0, "auto")
    with pytest.raises(ValueError, match=r"^cache: dtype Float8_e5m2 holds E5M2 codes, but kv_cache_dtype \"fp8\" "
                                         r"means E4M3"):
        dequantize(torch.zeros(4, dtype=torch.float8_e5m2), 1.0, "fp8")
    with pytest.raises(ValueError, match=r"^cache: dtype BFloat16 does not hold kv_cache_dtype \"fp8_e5m2\""):
        dequantize(torch.zeros(4, dtype=torch.bfloat16), 1.0, "fp8_e5m2")


@pytest.mark.parametrize("cache", ["uint8 e4m3", "float8_e4m3fn"])
def test_an_e4m3_problem_is_its_values_in_fp16(cache):
    """Every E4M3 value is an fp16 value, so the reference and the model of an E4M3 problem
    are, bit for bit, those of its values in fp16 caches (the format adds no error term: it
    decodes exactly). Its bytes read as E5M2 give another answer, which fails the bound."""
    p = random_problem(140, batch=3, head_dim=64, page_size=16, max_len=300, device="cpu", lengths=[300, 0, 77],
                       **CACHES[cache])
    want = p.reference()

    def as_fp16(c):
        values = dequantize(c, 1.0, p.kv_cache_dtype)
        assert torch.equal(values.half().double(), values)  # exactly
        return values.half()

    same = expected_outputs(p.q, as_fp16(p.k_cache), as_fp16(p.v_cache), p.block_table, p.seq_lens, p.softmax_scale,
                            p.k_scale, p.v_scale)
    assert all(torch.equal(a, b) for a, b in zip((want.out, want.lse, *want.model), (same.out, same.lse, *same.model)))
    assert_matches_reference(want.out.half(), want.lse.float(), want, p.seq_lens)
    as_e5m2 = expected_outputs(p.q, p.k_cache.view(torch.uint8), p.v_cache.view(torch.uint8), p.block_table,
                               p.seq_lens, p.softmax_scale, p.k_scale, p.v_scale, kv_cache_dtype="fp8_e5m2")
    with pytest.raises(AssertionError, match=r"out off by"):
        assert_matches_reference(want.out.half(), want.lse.float(), as_e5m2, p.seq_lens)
