"""A float64 reference for vxqa_torch.decode, in plain torch, for tests and checks.

It gathers each sequence's pages through the block table, dequantizes them (E5M2 or E4M3
codes, or fp16 or bf16 values, times the scale) and takes the softmax in float64. A length-0 sequence gives
out 0 and lse -inf, as the kernel does; a row whose every score is -inf (an inf in K), NaN in
both. The cache's format is its dtype's, or with keyword
kv_cache_dtype vLLM's string as the ops read it (dequantize).

The attention variants, from their definitions (keyword arguments, each off by default):
  sliding_window W > 0  the query, the sequence's last token (position len - 1), sees the
                        keys len - W .. len - 1 only (all of them when len <= W);
  logit_softcap cap > 0 each score s = softmax_scale * q.k becomes cap * tanh(s / cap);
  sinks [num_q_heads]   one logit (natural log) a query head that joins the softmax's
                        denominator with no value row: out = sum_j e^(s_j) v_j / (e^sink +
                        sum_j e^(s_j)), lse = log(e^sink + sum_j e^(s_j)); a length-0 sequence
                        gives out 0 and lse = sink.

Multi-token queries (keyword q_indptr, int32 [batch + 1]): sequence b's n = q_indptr[b + 1] -
q_indptr[b] query tokens are rows q_indptr[b] .. q_indptr[b + 1] - 1 of q [num_tokens, ...],
the last n of its len cached tokens; token i (0-based) sits at position p = len - n + i and
sees keys 0 .. p, with a window of W keys p - W + 1 .. p (visible_keys). out and lse have q's
rows; a row past q_indptr[batch] is NaN (no sequence's: a kernel leaves it as it was).

decode_error_model and error_bounds (or both at once, decode_bounds) say how far a correct
kernel's outputs may lie from it, element by element: a port of vxqa's C++ error model
(testing/include/vxqa/testing/error_model.h) and of compare.h's bounds, which the C++ tests
use and python/tests/problems.py's assert_matches_reference uses likewise.
"""
import math
from typing import NamedTuple

import torch

from ._fake import BF16, E4M3, E5M2, FP16, cache_format

# The dtype whose view of a cache's bytes decodes its format.
_FORMAT_DTYPES = {E5M2: torch.float8_e5m2, E4M3: torch.float8_e4m3fn, FP16: torch.float16, BF16: torch.bfloat16}


def _format(cache, kv_cache_dtype):
    """The cache's format as the ops map it, kv_cache_dtype None meaning what dequantize says."""
    if kv_cache_dtype is None:
        kv_cache_dtype = "fp8_e5m2" if cache.dtype == torch.uint8 else "auto"
    return cache_format(kv_cache_dtype, cache.dtype, "cache")


def dequantize(cache, scale, kv_cache_dtype=None):
    """float64 values of a cache tensor times scale: fp16, bf16 (torch.bfloat16 to float64,
    exact), E5M2 codes or E4M3 codes (OCP float8_e4m3fn: bias 7, 3 mantissa bits, no inf,
    S.1111.111 NaN, largest 448), by torch's own conversions. kv_cache_dtype None: the dtype
    says, a uint8 cache holding E5M2 codes (this reference's default before E4M3); else
    vLLM's string, mapped to the format as the ops map it (a uint8 cache under "fp8" or
    "fp8_e4m3" holds E4M3 codes; "auto" takes a bfloat16 cache as bf16)."""
    fmt = _format(cache, kv_cache_dtype)
    return cache.view(_FORMAT_DTYPES[fmt]).to(torch.float64) * float(scale)


def gather_sequence(values, block_table_row, length):
    """The first `length` token rows [length, num_kv_heads, head_dim] of one sequence."""
    page_size = values.shape[1]
    pages = block_table_row[: math.ceil(length / page_size)].long()
    return values[pages].reshape(-1, values.shape[2], values.shape[3])[:length]


def first_visible_key(length, sliding_window):
    """The first key the query of a sequence of `length` tokens sees: length - W under a
    window of W keys shorter than the sequence, else 0."""
    return length - sliding_window if sliding_window and 0 < sliding_window < length else 0


def visible_keys(length, n, i, sliding_window=0):
    """The keys [begin, end) that query token i of the last n of a sequence's `length` tokens
    sees (decode_reference.h's visible_keys): causal to its position p = length - n + i, so
    keys 0 .. p, cut to the window's last W (0: no window), p - W + 1 .. p. n = 1, i = 0 is
    the one-token query: first_visible_key(length, W) .. length. Empty for the one query of an
    empty sequence (p = -1)."""
    p = length - n + i
    begin = max(0, p - sliding_window + 1) if sliding_window and sliding_window > 0 else 0
    return begin, max(p + 1, 0)


def query_rows(seq_lens, q_indptr=None, num_rows=None):
    """[(first row, n)] a sequence: its query tokens are rows first .. first + n - 1 of q, out
    and lse; (b, 1) without q_indptr. With q_indptr, ValueError("q_indptr: ...") unless it is
    [batch + 1], starts at 0, does not decrease, ends within num_rows (q's rows), and every
    sequence has at least as many cached tokens as query tokens (the tokens are its last)."""
    lengths = seq_lens.tolist()
    if q_indptr is None:
        return [(b, 1) for b in range(len(lengths))]
    offsets = [int(x) for x in q_indptr.tolist()]
    if len(offsets) != len(lengths) + 1:
        raise ValueError(f"q_indptr: must be [batch + 1] = [{len(lengths) + 1}], got {len(offsets)} offsets")
    if offsets[0] != 0:
        raise ValueError(f"q_indptr: q_indptr[0] is {offsets[0]}, must be 0")
    rows = []
    for b, length in enumerate(lengths):
        n = offsets[b + 1] - offsets[b]
        if n < 0:
            raise ValueError(f"q_indptr: decreases at {b + 1} ({offsets[b]} then {offsets[b + 1]})")
        if n > length:
            raise ValueError(f"q_indptr: sequence {b} has {n} query tokens but only {length} cached tokens (its query "
                             f"tokens are its last)")
        rows.append((offsets[b], n))
    if num_rows is not None and offsets[-1] > num_rows:
        raise ValueError(f"q_indptr: q_indptr[batch] is {offsets[-1]}, past q's {num_rows} rows")
    return rows


def _check_variant(sliding_window, logit_softcap, sinks, q_heads):
    """The variant's arguments as plain numbers (window int >= 0, cap float >= 0) and the
    sinks' shape, or ValueError naming the argument."""
    window = int(sliding_window or 0)
    cap = float(logit_softcap or 0.0)
    if window < 0:
        raise ValueError(f"sliding_window: {window} must be >= 0 (0: the whole context)")
    if not (0.0 <= cap < math.inf):
        raise ValueError(f"logit_softcap: {cap} must be finite and >= 0 (0: off)")
    if sinks is not None and tuple(sinks.shape) != (q_heads,):
        raise ValueError(f"sinks: must be [num_q_heads] = [{q_heads}], got shape {list(sinks.shape)}")
    return window, cap


def decode_reference(q, k_cache, v_cache, block_table, seq_lens, softmax_scale=None, k_scale=1.0, v_scale=1.0, *,
                     sliding_window=0, logit_softcap=0.0, sinks=None, q_indptr=None, kv_cache_dtype=None):
    """(out, lse) in float64: out [batch, num_q_heads, head_dim], lse [batch, num_q_heads]
    (with q_indptr [num_tokens, ...], q's rows: a row a query token, token i of a sequence's n
    seeing keys 0 .. len - n + i; rows of no sequence NaN). sliding_window, logit_softcap,
    sinks: the variants (module docstring), each off by default (0, 0, None; vLLM's None means
    off too). kv_cache_dtype: the caches' format as for dequantize."""
    batch, q_heads, head_dim = q.shape  # (batch: q's rows)
    window, cap = _check_variant(sliding_window, logit_softcap, sinks, q_heads)
    rows = query_rows(seq_lens, q_indptr, batch)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(head_dim)
    keys, values = dequantize(k_cache, k_scale, kv_cache_dtype), dequantize(v_cache, v_scale, kv_cache_dtype)
    kv_heads = keys.shape[2]
    group = q_heads // kv_heads
    out = torch.zeros(batch, q_heads, head_dim, dtype=torch.float64, device=q.device)
    lse = torch.full((batch, q_heads), -math.inf, dtype=torch.float64, device=q.device)
    if q_indptr is not None:  # rows of no sequence: NaN (a kernel does not write them)
        unused = torch.ones(batch, dtype=torch.bool)
        for first, n in rows:
            unused[first: first + n] = False
        out[unused.to(q.device)] = math.nan
        lse[unused.to(q.device)] = math.nan
    sink = None if sinks is None else sinks.to(device=q.device, dtype=torch.float64).reshape(kv_heads, group)
    for b, length in enumerate(seq_lens.tolist()):
        first_row, n = rows[b]
        if n == 0:
            continue
        if length == 0:  # (one query token: with q_indptr n <= length)
            if sink is not None:  # the sink alone: out 0, lse = sink
                lse[first_row] = sink.reshape(q_heads)
            continue
        seq_k = gather_sequence(keys, block_table[b], length)
        seq_v = gather_sequence(values, block_table[b], length)
        for i in range(n):
            row = first_row + i
            begin, end = visible_keys(length, n, i, window)  # one token: first_visible_key .. length
            k, v = seq_k[begin:end], seq_v[begin:end]
            qb = q[row].to(torch.float64).reshape(kv_heads, group, head_dim)  # head h -> KV head h // group
            scores = torch.einsum("hgd,thd->hgt", qb, k) * softmax_scale
            if cap > 0:
                scores = cap * torch.tanh(scores / cap)
            logits = scores if sink is None else torch.cat([scores, sink[..., None]], dim=-1)  # the sink: no value
            row_lse = torch.logsumexp(logits, dim=-1)
            # Every logit -inf (no sink, or a -inf one): logsumexp's -inf, but the softmax is
            # 0 / 0, so lse NaN beside out NaN, as the C++ reference and the kernels have it.
            row_lse = torch.where(logits.amax(dim=-1) == -math.inf, math.nan, row_lse)
            weights = torch.exp(scores - row_lse[..., None])
            out[row] = torch.einsum("hgt,thd->hgd", weights, v).reshape(q_heads, head_dim)
            lse[row] = row_lse.reshape(q_heads)
    return out, lse


# ---- how far a correct kernel may lie from it (testing/include/vxqa/testing/error_model.h) ----
#
# A port of vxqa::reference::decode_error_model and of compare.h's bounds, with the same
# formulas and constants (docs/design.md, "How the tests bound the error"): the fp16
# rounding of each softmax weight (bf16 for a bf16 cache), the fp32 score errors, the fp32 product
# softmax_scale * k_scale * log2(e) shared by every score, the chunks' combine and the fp32
# sums; the output's own rounding is added by error_bounds.

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
SCALE_EPS = 2.0**-22  # softmax_scale * k_scale * log2(e) rounded to fp32, twice
OUT_MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7}


class ErrorModel(NamedTuple):
    """Per element, float64: the standard deviation of the random part of a correct kernel's
    error and a bound on its correlated part. out_* [batch, num_q_heads, head_dim], lse_*
    [batch, num_q_heads] (with q_indptr a row a query token); 0 for length-0 sequences and for rows whose max score or
    reference lse is not finite (those follow the NaN/inf rules instead)."""
    out_sigma: torch.Tensor
    out_fixed: torch.Tensor
    lse_sigma: torch.Tensor
    lse_fixed: torch.Tensor

    def select(self, index):
        """The model of the rows `index` picks (as out[index] picks their outputs): sequences,
        or with q_indptr query tokens."""
        return ErrorModel(*(t[index] for t in self))


def _ilogb(a):
    """floor(log2(a)) of positive finite float64 values, exactly (std::ilogb)."""
    return torch.frexp(a)[1] - 1


def _pow2(e):
    return torch.pow(2.0, e.to(torch.float64))


def fp16_ulp(x):
    """One unit in the last place of the fp16 number nearest to |x| (subnormals: 2^-24)."""
    a = x.abs()
    return torch.where(a >= 2.0**-14, _pow2(_ilogb(a) - 10), torch.full_like(a, 2.0**-24))


def weight_rounding_sigma(p, bf16=False):
    """The standard deviation of the fp16 rounding error of weights p (<= 1); a weight below
    2^-25 rounds to 0, its error is the weight itself. bf16: the bf16 rounding of a bf16
    cache's weights (its MMA takes P in bf16), one ulp 2^(e - 7); a weight below 2^-126 is
    flushed to 0 by the kernels' exp2 (fp32 without subnormals), bf16 itself has fp32's range."""
    if bf16:
        ulp = _pow2(_ilogb(torch.where(p > 0, p, 1.0)) - 7)
        return torch.where(p < 2.0**-126, p, ulp / math.sqrt(12.0))
    return torch.where(p < 2.0**-25, p, fp16_ulp(p) / math.sqrt(12.0))


def half_ulp(x, mantissa_bits):
    """Half an ulp of |x| in a float format with `mantissa_bits` and fp16's (10) or bf16's
    range (compare.h's detail::half_ulp)."""
    a = x.abs()
    min_exponent = -14 if mantissa_bits == 10 else -126
    e = torch.where(a > 0, _ilogb(torch.where(a > 0, a, 1.0)).clamp(min=min_exponent), min_exponent)
    return 0.5 * _pow2(e - mantissa_bits)


def sink_alone_lse_fixed(lse):
    """The lse bound of heads whose only weight is their sink (a length-0 sequence, or every
    score -inf): the sink through the kernels' base-2 round trip, 2^-20 (|lse| + 1); 0 where lse
    is not finite (the NaN/inf rules). error_model.h's detail::sink_alone_lse_fixed."""
    return torch.where(lse.isfinite(), 2.0**-20 * (lse.abs() + 1), 0.0)


def decode_error_model(q, k_cache, v_cache, block_table, seq_lens, softmax_scale, k_scale, v_scale, ref_out, ref_lse,
                       chunk_tokens=64, *, sliding_window=0, logit_softcap=0.0, sinks=None, q_indptr=None,
                       kv_cache_dtype=None):
    """The error model of decode_reference(q, k_cache, v_cache, block_table, seq_lens,
    softmax_scale, k_scale, v_scale, sliding_window=..., logit_softcap=..., sinks=...,
    q_indptr=..., kv_cache_dtype=...), whose outputs are (ref_out, ref_lse): the same
    arguments (every format decodes exactly; a bf16 cache's softmax weights are rounded to
    bf16, not fp16, for its bf16 MMA: weight_rounding_sigma's bf16 term); per row (with
    q_indptr a row a query token: each row's terms over the keys it sees, its chunks counted
    from its first key, as error_model.h has them; rows of no sequence 0). `chunk_tokens` is the plan's chunk (0
    or >= the longest sequence: one chunk, no combine); 64, the finest a plan takes, serves
    every plan of a problem (its combine term is about 1 % of the variance).

    The variants' terms, as error_model.h has them (none changes the model of a plain call):
      sliding_window  only the window's keys take part; its chunks are counted from its first
                      key (the plan cuts them over the window; their part barely depends on
                      where they start).
      logit_softcap   the kernel takes x = s_raw * (softmax_scale * k_scale / cap) in fp32 and
                      cap * tanh(x) with a tanh good to about 2^-21: the dot product's error
                      reaches the score through tanh's slope (sum |q k| times sech^2 x), tanh's
                      own error adds an independent cap * 2^-20 a score, and the shared
                      relative error of the fp32 scale moves score j by c_j = cap sech^2(x_j)
                      x_j (a second fixed part, beside the plain kernel's).
      sinks           the sink's fp32 weight w joins l at the end (L = l + w in every
                      division); it is a token of value 0 in the (v - out) terms, with a
                      relative error of 2^-21 (independent, like a score's); the scale's shared
                      error does not move it, so the frame no longer cancels in the shifts; the
                      combine's fp32 error takes the larger of |max| and |sink|. A row that sees
                      no key (a length-0 sequence) has out 0 and lse = the sink within
                      2^-20 (|sink| + 1)."""
    batch, q_heads, head_dim = q.shape
    window, cap = _check_variant(sliding_window, logit_softcap, sinks, q_heads)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(head_dim)
    softmax_scale = float(softmax_scale)
    f64 = dict(dtype=torch.float64, device=q.device)
    keys = dequantize(k_cache, k_scale, kv_cache_dtype).to(q.device)
    values = dequantize(v_cache, v_scale, kv_cache_dtype).to(q.device)
    bf16_weights = _format(k_cache, kv_cache_dtype) == BF16
    kv_heads = keys.shape[2]
    group = q_heads // kv_heads
    ref_out, ref_lse = ref_out.to(**f64), ref_lse.to(**f64)
    sink = None if sinks is None else sinks.to(**f64).reshape(kv_heads, group)
    out_sigma = torch.zeros(batch, q_heads, head_dim, **f64)
    out_fixed = torch.zeros_like(out_sigma)
    lse_sigma = torch.zeros(batch, q_heads, **f64)
    lse_fixed = torch.zeros_like(lse_sigma)
    queries = query_rows(seq_lens, q_indptr, batch)
    for b, length in enumerate(seq_lens.tolist()):
        first_row, tokens = queries[b]
        if tokens == 0 or length < 0 or (length == 0 and sink is None):
            continue
        if length == 0:  # (one query token) the sink alone: out exactly 0, lse = the sink
            lse = ref_lse[first_row].reshape(kv_heads, group)
            lse_fixed[first_row] = sink_alone_lse_fixed(lse).reshape(q_heads)
            continue
        seq_k = gather_sequence(keys, block_table[b], length)
        seq_v = gather_sequence(values, block_table[b], length)
        for i in range(tokens):  # each query token's row, over the keys it sees
            row = first_row + i
            lse = ref_lse[row].reshape(kv_heads, group)
            out = ref_out[row].reshape(kv_heads, group, head_dim)
            first, end = visible_keys(length, tokens, i, window)  # one token: first_visible_key .. length
            n = end - first  # the keys the query sees
            k, v = seq_k[first:end], seq_v[first:end]  # [n, h, d]
            qb = q[row].to(**f64).reshape(kv_heads, group, head_dim)  # head h * group + g reads KV head h
            # Scores (natural units, as the reference), the sum |q_i k_i| term of their error
            # (times tanh's slope with a soft-cap) and the soft-cap's c_j, [h, g, n].
            s = torch.einsum("hgd,thd->hgt", qb, k) * softmax_scale
            s_abs = torch.einsum("hgd,thd->hgt", qb.abs(), k.abs()) * abs(softmax_scale)
            if cap > 0:
                x = s / cap
                sech2 = torch.where(x.isfinite(), torch.cosh(x).pow(-2), 0.0)  # 0 where tanh is flat
                s = cap * torch.tanh(x)
                s_abs = torch.where(sech2 > 0, s_abs * sech2, 0.0)
                c_cap = torch.where(sech2 > 0, cap * sech2 * x, 0.0)
            row_max = s.amax(dim=-1)
            rows = torch.isfinite(row_max) & torch.isfinite(lse)  # the others: the NaN/inf rules
            # Per-token weights and their error's variance e2; a weight of 0 (a -inf score, or one
            # that underflows) has no error and takes no part (never 0 * inf).
            shifted = s - row_max[..., None]
            p = torch.exp(shifted)
            live = rows[..., None] & (p != 0)
            p = torch.where(live, p, 0.0)
            score_error = 2.0**-22 * (s_abs + s.abs()) * LOG2E  # base-2 units
            rounding = weight_rounding_sigma(p, bf16_weights)
            rel2 = LN2**2 * score_error**2 / 3 + 2.0**-44 + ((2.0**-20 * cap) ** 2 / 3 if cap > 0 else 0.0)
            e2 = torch.where(live, rounding**2 + p**2 * rel2, 0.0)
            shift_w = torch.where(live, p * shifted * LOG2E, 0.0)
            cap_w = torch.where(live, p * c_cap, 0.0) if cap > 0 else None
            l = p.sum(-1)
            max_abs = torch.where(rows, row_max.abs(), 0.0)
            # The sink: weight w in the scores' frame, its error e2_w; total L = l + w.
            if sink is not None:
                w = torch.where(rows, torch.exp(sink - torch.where(rows, row_max, 0.0)), 0.0)
                e2_w = (2.0**-21 * w) ** 2 / 3
                chunk_max = torch.maximum(max_abs, torch.where(sink.isfinite(), sink.abs(), 0.0))
            else:
                w, e2_w, chunk_max = 0.0, 0.0, max_abs
            total = torch.where(rows, l + w, 1.0)
            chunk = chunk_tokens if 0 < chunk_tokens < n else n
            split = chunk < n
            chunk_eps = 2.0**-21 * (chunk_max * LOG2E + 24)  # a chunk weight's relative fp32 error
            row_lse_sigma = (e2.sum(-1) + e2_w).sqrt() / total
            row_lse_fixed = (LN2 * SCALE_EPS * (shift_w.sum(-1).abs() / total + max_abs * LOG2E * (l / total))
                             + 2.0**-20 * (lse.abs() + 1) + (chunk_eps if split else 0.0))
            if cap > 0:
                row_lse_fixed = row_lse_fixed + SCALE_EPS * cap_w.sum(-1).abs() / total
            # Per dim: sum e2 (v - out)^2, the scale's shared shifts, sum p |v - out|, and the
            # chunks' sums sum_{j in c} p (v - out); over blocks of whole chunks, to bound memory.
            var = torch.zeros(kv_heads, group, head_dim, **f64)
            shift, spread, chunk_var = torch.zeros_like(var), torch.zeros_like(var), torch.zeros_like(var)
            cap_shift = torch.zeros_like(var)
            block = chunk * max(1, 4096 // chunk)
            for t0 in range(0, n, block):
                t1 = min(n, t0 + block)
                live_t = live[..., t0:t1, None]
                dv = torch.where(live_t, v[t0:t1].permute(1, 0, 2)[:, None] - out[:, :, None], 0.0)  # [h, g, t, d]
                var += torch.einsum("hgt,hgtd->hgd", e2[..., t0:t1], dv * dv)
                shift += torch.einsum("hgt,hgtd->hgd", shift_w[..., t0:t1], dv)
                spread += torch.einsum("hgt,hgtd->hgd", p[..., t0:t1], dv.abs())
                if cap > 0:
                    cap_shift += torch.einsum("hgt,hgtd->hgd", cap_w[..., t0:t1], dv)
                if split:
                    pdv = p[..., t0:t1, None] * dv
                    pad = (-(t1 - t0)) % chunk
                    if pad:
                        pdv = torch.cat([pdv, pdv.new_zeros(kv_heads, group, pad, head_dim)], dim=2)
                    sums = pdv.reshape(kv_heads, group, -1, chunk, head_dim).sum(dim=3)
                    chunk_var += (sums * sums).sum(dim=2)
            if sink is not None:  # the sink: a token of value 0
                var += e2_w[..., None] * out * out
                shift += (torch.where(rows, row_max, 0.0) * LOG2E * w)[..., None] * out
                spread += w[..., None] * out.abs()
            combine_var = chunk_eps[..., None] ** 2 / 3 * chunk_var if split else 0.0
            row_out_sigma = (var + combine_var).sqrt() / total[..., None]
            row_out_fixed = ((LN2 * SCALE_EPS * shift.abs() + SCALE_EPS * cap_shift.abs() + 2.0**-22 * spread)
                             / total[..., None])
            out_sigma[row] = torch.where(rows[..., None], row_out_sigma, 0.0).reshape(q_heads, head_dim)
            out_fixed[row] = torch.where(rows[..., None], row_out_fixed, 0.0).reshape(q_heads, head_dim)
            lse_sigma[row] = torch.where(rows, row_lse_sigma, 0.0).reshape(q_heads)
            # a finite lse beside no finite score: every score -inf and a finite sink, the sink
            # alone (as a length-0 sequence's)
            lse_fixed[row] = torch.where(rows, row_lse_fixed, sink_alone_lse_fixed(lse)).reshape(q_heads)
    return ErrorModel(out_sigma, out_fixed, lse_sigma, lse_fixed)


def error_bounds(model, ref_out, out_dtype, sigmas=8.0):
    """(out_bound, lse_bound), per element, as compare.h's compare_with_reference takes them
    (CompareBounds: `sigmas` standard deviations; the output's mantissa by out_dtype):
      out: sigmas * sigma + fixed + (half an ulp of out_dtype + 2^-22 for the fp32 steps before
           it: a double rounding) at |ref| + sigmas * sigma + fixed
           (+ 2^-25 for bf16: compare.h compares bf16 outputs as the fp16 values they equal)
      lse: sigmas * sigma + fixed
    A finite reference element must be within its bound; the NaN/inf rules are the caller's."""
    if out_dtype not in OUT_MANTISSA_BITS:
        raise ValueError(f"out_dtype: {out_dtype} is not an output type of vxqa (float16, bfloat16)")
    bits = OUT_MANTISSA_BITS[out_dtype]
    conversion = 0.0 if bits == 10 else 2.0**-25
    error = sigmas * model.out_sigma + model.out_fixed
    at = ref_out.to(error.device, torch.float64).abs() + error
    out_bound = error + half_ulp(at, bits) + 2.0**-22 * at + conversion
    return out_bound, sigmas * model.lse_sigma + model.lse_fixed


def decode_bounds(q, k_cache, v_cache, block_table, seq_lens, softmax_scale, k_scale, v_scale, ref_out, ref_lse,
                  out_dtype, sigmas=8.0, chunk_tokens=64, *, sliding_window=0, logit_softcap=0.0, sinks=None,
                  q_indptr=None, kv_cache_dtype=None):
    """(out_bound, lse_bound) per element for the outputs (ref_out, ref_lse) of
    decode_reference with the same arguments (the variants', q_indptr and kv_cache_dtype
    included), for a kernel writing out_dtype."""
    model = decode_error_model(q, k_cache, v_cache, block_table, seq_lens, softmax_scale, k_scale, v_scale, ref_out,
                               ref_lse, chunk_tokens, sliding_window=sliding_window, logit_softcap=logit_softcap,
                               sinks=sinks, q_indptr=q_indptr, kv_cache_dtype=kv_cache_dtype)
    return error_bounds(model, ref_out, out_dtype, sigmas)
