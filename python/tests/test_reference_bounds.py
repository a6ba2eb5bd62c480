"""The tests' bound (vxqa_torch.reference.decode_error_model and error_bounds, used by
problems.assert_matches_reference), on the CPU: a port of the C++ error model
(testing/include/vxqa/testing/error_model.h) and of compare.h's bounds.

- Outputs with a correct kernel's roundings pass: the reference rounded to fp16 / bf16 (out)
  and fp32 (lse), and a simulation of the kernels' arithmetic (fp32 scores, fp16 weights,
  fp32 sums, 64-token chunks merged by their LSE).
- A wrong answer fails where the old bound (2e-3 max|V| + |ref| / 1024) passed it: one
  sequence of 16K and 64K tokens with flat scores, a 16-token tile or the last token dropped;
  two heads of a group swapped fails too.
- The port agrees with the C++ model's formulas: a 2-token problem computed by hand in closed
  form, and the C++ loops transcribed literally (scalar Python) on small problems with a
  masked token, a second chunk, a length-0 sequence and a row of infinite scores.
"""
import math

import pytest
import torch

from problems import assert_matches_reference, expected_outputs, random_problem
from vxqa_torch.reference import LN2, LOG2E, decode_error_model, decode_reference, dequantize, error_bounds


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
    rounded to fp16 and summed in fp32 with P.V, the chunks merged by their LSE in fp32, times
    v_scale, rounded to the output type. (One frame per chunk: the kernels' running frames
    and warps are not simulated; test/cpu/compare_power.cpp does that.)"""
    batch, q_heads, dim = p.q.shape
    kv_heads = p.k_cache.shape[2]
    group = q_heads // kv_heads
    softmax_scale = p.softmax_scale if p.softmax_scale is not None else 1 / math.sqrt(dim)
    f32 = torch.float32
    qk_scale = torch.tensor(softmax_scale, dtype=f32) * torch.tensor(p.k_scale, dtype=f32) * torch.tensor(LOG2E,
                                                                                                          dtype=f32)
    keys, values = dequantize(p.k_cache, 1.0).to(f32), dequantize(p.v_cache, 1.0).to(f32)  # exact
    out = torch.zeros(batch, q_heads, dim, dtype=p.q.dtype)
    lse = torch.full((batch, q_heads), -math.inf)
    page = keys.shape[1]
    for b, length in enumerate(p.seq_lens.tolist()):
        if length == 0:
            continue
        pages = p.block_table[b, : math.ceil(length / page)].long()
        k = keys[pages].reshape(-1, kv_heads, dim)[:length]
        v = values[pages].reshape(-1, kv_heads, dim)[:length]
        q = p.q[b].to(f32).reshape(kv_heads, group, dim)
        s = torch.einsum("hgd,thd->hgt", q, k) * qk_scale  # [h, g, t], fp32, base 2
        c = chunk if 0 < chunk < length else length
        n = math.ceil(length / c)
        pad = n * c - length
        s = torch.cat([s, torch.full((kv_heads, group, pad), -math.inf)], dim=2).reshape(kv_heads, group, n, c)
        vp = torch.cat([v, v.new_zeros(pad, kv_heads, dim)]).reshape(n, c, kv_heads, dim)
        m = s.amax(dim=-1)  # [h, g, n]
        w = torch.exp2(s - m[..., None]).half().to(f32)  # the fp16 weights
        l = w.sum(dim=-1)
        o = torch.einsum("hgnc,nchd->hgnd", w, vp) / l[..., None]
        part_lse = m + torch.log2(l)
        mx = part_lse.amax(dim=-1)
        cw = torch.exp2(part_lse - mx[..., None])
        o = torch.einsum("hgn,hgnd->hgd", cw, o) / cw.sum(dim=-1)[..., None]
        out[b] = (o * torch.tensor(p.v_scale, dtype=f32)).reshape(q_heads, dim).to(p.q.dtype)
        lse[b] = ((mx + torch.log2(cw.sum(dim=-1))) * torch.tensor(LN2, dtype=f32)).reshape(q_heads)
    return out, lse


# ---- a correct kernel's roundings pass ----

@pytest.mark.parametrize("cache_dtype", [torch.uint8, torch.float16])
@pytest.mark.parametrize("q_dtype", [torch.float16, torch.bfloat16])
def test_the_reference_rounded_and_a_simulated_kernel_pass(cache_dtype, q_dtype):
    worst = {}
    for seed, lengths in enumerate([[1, 0, 2], [17, 100, 64], [900, 65, 129], [5000, 3, 0]]):
        p = random_problem(100 + seed, batch=3, head_dim=64, page_size=16, max_len=max(lengths),
                           cache_dtype=cache_dtype, q_dtype=q_dtype, device="cpu", lengths=lengths)
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
    return abs(a - b) <= rel * max(abs(a), abs(b))


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
                 chunk_tokens=64):
    """decode_error_model of error_model.h, its loops transcribed into scalar Python."""
    kLog2e, kLn2, kScaleEps = 1.4426950408889634, 0.6931471805599453, 2.0**-22

    def fp16_ulp(x):
        a = abs(x)
        return 2.0**-24 if not a >= 2.0**-14 else math.ldexp(1.0, math.frexp(a)[1] - 1 - 10)

    def weight_rounding_sigma(p):
        return p if p < 2.0**-25 else fp16_ulp(p) / math.sqrt(12.0)

    batch, heads, dim = q.shape
    kv_heads, page_size, group = k_cache.shape[2], k_cache.shape[1], heads // k_cache.shape[2]
    qs, ks, vs = q.double().tolist(), dequantize(k_cache, k_scale).tolist(), dequantize(v_cache, v_scale).tolist()
    table, out_ref, lse_ref = block_table.tolist(), ref_out.tolist(), ref_lse.tolist()
    out_sigma = [[[0.0] * dim for _ in range(heads)] for _ in range(batch)]
    out_fixed = [[[0.0] * dim for _ in range(heads)] for _ in range(batch)]
    lse_sigma = [[0.0] * heads for _ in range(batch)]
    lse_fixed = [[0.0] * heads for _ in range(batch)]
    for b, length in enumerate(seq_lens.tolist()):
        if length <= 0:
            continue
        chunk = chunk_tokens if 0 < chunk_tokens < length else length
        row = lambda cache, j, h: cache[table[b][j // page_size]][j % page_size][h]  # noqa: E731
        for h in range(kv_heads):
            for g in range(group):
                hq = h * group + g
                s, ag = [], []
                for j in range(length):
                    k = row(ks, j, h)
                    dot = sum(qs[b][hq][d] * k[d] for d in range(dim))
                    dot_abs = sum(abs(qs[b][hq][d] * k[d]) for d in range(dim))
                    s.append(softmax_scale * dot)
                    ag.append(abs(softmax_scale) * dot_abs)
                out, lse = out_ref[b][hq], lse_ref[b][hq]
                mx = max(s)
                if not math.isfinite(mx) or not math.isfinite(lse):
                    continue
                l = e2_sum = shift_sum = 0.0
                p, e2 = [0.0] * length, [0.0] * length
                for j in range(length):
                    p[j] = math.exp(s[j] - mx)
                    if p[j] == 0:
                        continue
                    score_error = 2.0**-22 * (ag[j] + abs(s[j])) * kLog2e
                    rounding = weight_rounding_sigma(p[j])
                    e2[j] = rounding * rounding + p[j] * p[j] * (kLn2 * kLn2 * score_error * score_error / 3 + 2.0**-44)
                    l += p[j]
                    e2_sum += e2[j]
                    shift_sum += p[j] * (s[j] - mx) * kLog2e
                max2 = abs(mx) * kLog2e
                chunk_eps = 2.0**-21 * (max2 + 24)
                lse_sigma[b][hq] = math.sqrt(e2_sum) / l
                lse_fixed[b][hq] = (kLn2 * kScaleEps * (abs(shift_sum) / l + max2) + 2.0**-20 * (abs(lse) + 1)
                                    + (chunk_eps if chunk < length else 0.0))
                var, shift, spread = [0.0] * dim, [0.0] * dim, [0.0] * dim
                chunk_sum, chunk_var = [0.0] * dim, [0.0] * dim
                for j in range(length):
                    if p[j] != 0:
                        v = row(vs, j, h)
                        for d in range(dim):
                            dv = v[d] - out[d]
                            var[d] += e2[j] * dv * dv
                            shift[d] += p[j] * (s[j] - mx) * kLog2e * dv
                            spread[d] += p[j] * abs(dv)
                            chunk_sum[d] += p[j] * dv
                    if (j + 1) % chunk == 0 or j + 1 == length:
                        for d in range(dim):
                            chunk_var[d] += chunk_sum[d] * chunk_sum[d]
                            chunk_sum[d] = 0.0
                for d in range(dim):
                    combine_var = chunk_eps * chunk_eps / 3 * chunk_var[d] if chunk < length else 0.0
                    out_sigma[b][hq][d] = math.sqrt(var[d] + combine_var) / l
                    out_fixed[b][hq][d] = (kLn2 * kScaleEps * abs(shift[d]) + 2.0**-22 * spread[d]) / l
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
