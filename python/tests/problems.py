"""Random decode problems for the tests: fresh random q and caches (the whole pool, pages
no sequence uses included), a random page table of distinct pages, ragged lengths, and the
comparison against vxqa_torch.reference with vxqa's own bounds (testing/compare.h): per
element, from the error model of the kernels' roundings (docs/design.md, "How the tests
bound the error"). A problem may carry an attention variant (Problem.variant: the keyword
arguments sliding_window, logit_softcap, sinks of decode, plan.run and the reference), and
several query tokens a sequence (Problem.q_indptr: q [num_tokens, ...], a row a token). Its
caches are fp16, bf16, E5M2 or E4M3 (Problem.kv_cache_dtype says the format of a uint8 pair)."""
import math
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import pytest
import torch

import vxqa_torch
from vxqa_torch.reference import ErrorModel, decode_error_model, decode_reference, error_bounds

E5M2_MAX, E4M3_MAX = 57344.0, 448.0
# The tests' caches by name: random_problem's cache_dtype and kv_cache_dtype (a uint8 cache
# states its format: "fp8_e5m2", or vLLM's "fp8" for E4M3).
CACHES = {"uint8": dict(cache_dtype=torch.uint8, kv_cache_dtype="fp8_e5m2"),
          "float8_e5m2": dict(cache_dtype=torch.float8_e5m2, kv_cache_dtype="auto"),
          "float16": dict(cache_dtype=torch.float16, kv_cache_dtype="auto"),
          "bfloat16": dict(cache_dtype=torch.bfloat16, kv_cache_dtype="auto"),  # vLLM's "auto" of a bf16 model
          "uint8 e4m3": dict(cache_dtype=torch.uint8, kv_cache_dtype="fp8"),
          "float8_e4m3fn": dict(cache_dtype=torch.float8_e4m3fn, kv_cache_dtype="auto")}
# The float8 dtype of each fp8 string: a uint8 cache's codes seen as values.
FP8_DTYPES = {"fp8_e5m2": torch.float8_e5m2, "fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn}


def skip_bf16_cache_below_sm80(cache_dtype, device):
    """Skips a test of a bf16 cache on a GPU older than sm_80, saying why: bf16 caches run on
    the bf16 MMA of sm_80 and newer (test_decode_gpu.py checks the refusal there)."""
    if cache_dtype == torch.bfloat16 and torch.cuda.get_device_capability(device) < (8, 0):
        pytest.skip("a bf16 cache needs sm_80 or newer (the bf16 MMA); this GPU refuses it")


def kv_cache_dtype_of(dtype):
    """vLLM's kv_cache_dtype string for a test cache of `dtype` where the test does not say: a
    uint8 one holds E5M2 codes, and says so."""
    return "fp8_e5m2" if dtype == torch.uint8 else "auto"


def value_dtype(dtype, kv_cache_dtype):
    """The dtype whose values a cache of `dtype` holds: a uint8 cache's float8 dtype."""
    return FP8_DTYPES[kv_cache_dtype] if dtype == torch.uint8 else dtype


def random_cache_values(shape, dtype, generator, device, kv_cache_dtype=None):
    """Random cache contents of `dtype` from normal floats: fp16 or bf16, or FP8 codes of the
    format kv_cache_dtype states (default kv_cache_dtype_of(dtype): a uint8 cache holds E5M2)."""
    x = torch.randn(shape, generator=generator).to(device)
    values = x.to(value_dtype(dtype, kv_cache_dtype or kv_cache_dtype_of(dtype)))
    return values.view(torch.uint8) if dtype == torch.uint8 else values


def encode(x, scale, dtype, kv_cache_dtype=None):
    """What vxqa's writer must store for rows x in a cache of `dtype` (kv_cache_dtype as for
    random_cache_values): x / scale in fp32, converted by torch (fp16 and bf16: rounded to
    nearest even); FP8 saturated to its largest finite value first (torch's E4M3 conversion
    gives NaN past it), an E4M3 NaN as 0x7F (torch keeps a NaN's sign: 0xFF)."""
    y = x.float() / torch.tensor(scale, dtype=torch.float32)
    values = value_dtype(dtype, kv_cache_dtype or kv_cache_dtype_of(dtype))
    if values in (torch.float16, torch.bfloat16):
        return y.to(values)
    top = E5M2_MAX if values == torch.float8_e5m2 else E4M3_MAX
    codes = y.clamp(-top, top).to(values).view(torch.uint8)
    if values == torch.float8_e4m3fn:
        codes = torch.where(y.isnan(), torch.tensor(0x7F, dtype=torch.uint8, device=codes.device), codes)
    return codes if dtype == torch.uint8 else codes.view(values)


@dataclass
class Problem:
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    k_scale: float
    v_scale: float
    softmax_scale: Optional[float] = None  # None: 1 / sqrt(head_dim), as vxqa_torch.decode's default
    # The attention variant: decode's keyword arguments (sliding_window, logit_softcap, sinks);
    # empty: plain attention.
    variant: dict = field(default_factory=dict)
    # Multi-token queries: int32 [batch + 1] on q's device (q, out and lse a row a query token);
    # None: one token a sequence.
    q_indptr: Optional[torch.Tensor] = None
    # vLLM's string for the caches: "auto" (their dtype says), or a uint8 pair's format.
    kv_cache_dtype: str = "auto"

    @property
    def q_lens(self):
        """The query tokens of each sequence (1 each without q_indptr)."""
        if self.q_indptr is None:
            return [1] * self.seq_lens.shape[0]
        return (self.q_indptr[1:] - self.q_indptr[:-1]).tolist()

    @property
    def max_q_len(self):
        """The most query tokens of a sequence (at least 1)."""
        return max(self.q_lens + [1])

    def plan(self, max_batch=None, max_context=None, max_q_len=None, **variant):
        """A DecodePlan for this problem's shape (capacity: its batch and block table by
        default, and with q_indptr its most query tokens of a sequence, at least 2), made for
        its variant (a window: plans for windows up to it), or for `variant` (DecodePlan's
        sliding_window, logit_softcap, sinks) where given."""
        if not variant:
            variant = dict(sliding_window=self.variant.get("sliding_window") or 0,
                           logit_softcap=bool(self.variant.get("logit_softcap")),
                           sinks=self.variant.get("sinks") is not None)
        if max_q_len is None:
            max_q_len = 1 if self.q_indptr is None else max(2, self.max_q_len)
        return vxqa_torch.DecodePlan(
            num_q_heads=self.q.shape[1], num_kv_heads=self.k_cache.shape[2], head_dim=self.q.shape[2],
            page_size=self.k_cache.shape[1], max_batch=max_batch or self.block_table.shape[0],
            max_context=max_context or self.block_table.shape[1] * self.k_cache.shape[1], q_dtype=self.q.dtype,
            kv_cache_dtype=self.kv_cache_dtype, cache_dtype=self.k_cache.dtype, device=self.q.device,
            max_q_len=max_q_len, **variant)

    def reference(self, seq_lens=None, k_scale=None, v_scale=None, q_indptr=None, **variant):
        """The Expected outputs of this problem (with other lengths, scales, q_indptr or
        variant arguments where given: `variant` overrides the problem's own, key by key)."""
        return expected_outputs(self.q, self.k_cache, self.v_cache, self.block_table,
                                self.seq_lens if seq_lens is None else seq_lens, self.softmax_scale,
                                self.k_scale if k_scale is None else k_scale,
                                self.v_scale if v_scale is None else v_scale,
                                q_indptr=self.q_indptr if q_indptr is None else q_indptr,
                                kv_cache_dtype=self.kv_cache_dtype, **{**self.variant, **variant})


def random_problem(seed, *, batch=3, kv_heads=2, group=4, head_dim=128, page_size=16, max_len=600,
                   cache_dtype=torch.uint8, q_dtype=torch.float16, device="cuda", lengths=None, q_lens=None,
                   extra_rows=0, kv_cache_dtype=None):
    """A random problem, its caches of cache_dtype in the format kv_cache_dtype states (default
    kv_cache_dtype_of(cache_dtype): uint8 holds E5M2; CACHES names them). q_lens (a list of
    `batch` counts, 0 allowed): several query tokens a sequence, q [sum(q_lens) + extra_rows,
    ...] with q_indptr (extra_rows: rows past q_indptr[batch], as vLLM pads the query for CUDA
    graphs); a drawn length shorter than its count is raised to it (given lengths must hold
    their counts). Without q_lens the problem is the one of before, draw for draw."""
    g = torch.Generator().manual_seed(seed)
    pages_per_seq = math.ceil(max_len / page_size)
    num_pages = batch * pages_per_seq + 5  # a few pages no sequence owns
    table = torch.randperm(num_pages, generator=g)[: batch * pages_per_seq].view(batch, pages_per_seq)
    if lengths is None:
        lengths = torch.randint(1, max_len + 1, (batch,), generator=g).tolist()
        if q_lens is not None:
            lengths = [max(length, n) for length, n in zip(lengths, q_lens)]
    rows, q_indptr = batch, None
    if q_lens is not None:
        assert len(q_lens) == batch and all(0 <= n <= length <= max_len for n, length in zip(q_lens, lengths))
        offsets = [0]
        for n in q_lens:
            offsets.append(offsets[-1] + n)
        rows = offsets[-1] + extra_rows
        q_indptr = torch.tensor(offsets, dtype=torch.int32, device=device)
    shape = (num_pages, page_size, kv_heads, head_dim)
    kv_cache_dtype = kv_cache_dtype or kv_cache_dtype_of(cache_dtype)
    return Problem(
        q=torch.randn(rows, kv_heads * group, head_dim, generator=g).to(q_dtype).to(device),
        k_cache=random_cache_values(shape, cache_dtype, g, device, kv_cache_dtype),
        v_cache=random_cache_values(shape, cache_dtype, g, device, kv_cache_dtype),
        block_table=table.int().to(device),
        seq_lens=torch.tensor(lengths, dtype=torch.int32, device=device),
        k_scale=0.25 + torch.rand(1, generator=g).item(),
        v_scale=0.5 + torch.rand(1, generator=g).item(),
        q_indptr=q_indptr,
        kv_cache_dtype=kv_cache_dtype,
    )


class Expected(NamedTuple):
    """What a decode must give: the float64 reference's out [batch, num_q_heads, head_dim]
    and lse [batch, num_q_heads] (with q_indptr a row a query token), and the error model of
    the same inputs (ErrorModel)."""
    out: torch.Tensor
    lse: torch.Tensor
    model: ErrorModel

    def select(self, index):
        """The rows `index` picks (as out[index] picks their outputs)."""
        return Expected(self.out[index], self.lse[index], self.model.select(index))


def as_fp32(x):
    """x rounded to fp32 (a Python float): a scale as vxqa's DecodeParams hold it."""
    return float(torch.tensor(float(x), dtype=torch.float32))


def random_sinks(seed, q_heads, device, center=5.0):
    """Sinks for a problem's query heads: natural-log logits around `center` (e^5 is a fair
    share of the denominator of a few hundred random scores, and all of it for a short
    sequence), and the last head's -inf (a head without a sink)."""
    g = torch.Generator().manual_seed(seed)
    sinks = center + 2.0 * torch.randn(q_heads, generator=g)
    sinks[-1] = -math.inf
    return sinks.to(device)


def expected_outputs(q, k_cache, v_cache, block_table, seq_lens, softmax_scale=None, k_scale=1.0, v_scale=1.0, *,
                     sliding_window=0, logit_softcap=0.0, sinks=None, chunk_tokens=64, q_indptr=None,
                     kv_cache_dtype=None):
    """decode_reference and decode_error_model of the same arguments (so that the bound is
    the one of the problem the reference solved). The scales are taken as the kernels take
    them, rounded to fp32 (softmax_scale None: 1 / sqrt(head_dim), rounded), as the C++ tests'
    reference does: the model allows for the kernels' fp32 arithmetic, not for scales that
    differ from theirs; so is the soft-cap (the sinks are fp32 tensors already). kv_cache_dtype:
    the caches' format, as for vxqa_torch.reference.dequantize (None: uint8 holds E5M2)."""
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    softmax_scale, k_scale, v_scale = as_fp32(softmax_scale), as_fp32(k_scale), as_fp32(v_scale)
    variant = dict(sliding_window=sliding_window, logit_softcap=as_fp32(logit_softcap or 0.0), sinks=sinks)
    out, lse = decode_reference(q, k_cache, v_cache, block_table, seq_lens, softmax_scale, k_scale, v_scale,
                                q_indptr=q_indptr, kv_cache_dtype=kv_cache_dtype, **variant)
    model = decode_error_model(q, k_cache, v_cache, block_table, seq_lens, softmax_scale, k_scale, v_scale, out, lse,
                               chunk_tokens, q_indptr=q_indptr, kv_cache_dtype=kv_cache_dtype, **variant)
    return Expected(out, lse, model)


def assert_matches_reference(out, lse, want, seq_lens, q_indptr=None):
    """vxqa's bounds (testing/compare.h), per element, from want's error model:
    |out - ref| <= 8 sigma + fixed + half an ulp of out's dtype (fp16 or bf16) at |ref| + 8 sigma + fixed
    (bf16: + 2^-25), |lse - ref| <= 8 sigma + fixed; where the reference is NaN, NaN; where it is
    infinite, that infinity or NaN (compare.h's rules); a length-0 sequence exactly 0 and -inf
    (with sinks: out exactly 0, lse its sink within the bound); out or lse None: not compared
    (vLLM asks for no lse). `want` is an Expected of the problem as the kernel saw it;
    seq_lens are its lengths. With q_indptr (the problem's), a row a query token: each
    sequence's rows are compared (a failure names the sequence and the token), rows past
    q_indptr[batch] are not (a kernel leaves them)."""
    if q_indptr is not None:
        return _assert_rows_match_reference(out, lse, want, seq_lens, q_indptr)
    out_bound, lse_bound = error_bounds(want.model, want.out, out.dtype if out is not None else torch.float16)
    empty = (seq_lens == 0).cpu()
    checks = []
    if out is not None:
        checks.append(("out", out, want.out, out_bound, 0.0))
    if lse is not None:
        checks.append(("lse", lse, want.lse, lse_bound, -math.inf))
    for name, got, ref, bound, empty_value in checks:
        got = got.to(torch.float64).cpu()
        ref, bound = ref.cpu(), bound.cpu()
        for b in range(got.shape[0]):
            if empty[b] and (name == "out" or not ref[b].isfinite().any()):
                assert torch.all(got[b] == empty_value), f"sequence {b} (length 0): {name} is not {empty_value}"
                continue
            # (equal infinities: a head without a sink in a length-0 sequence, lse -inf)
            err = torch.where(got[b] == ref[b], 0.0, (got[b] - ref[b]).abs())
            # compare.h's rules where the reference is not finite: NaN where it is NaN; its
            # infinity, or NaN (an fp16 weight of 0 meeting an infinite V), where it is infinite.
            nan_ref, inf_ref = ref[b].isnan(), ref[b].isinf()
            ok = torch.where(nan_ref, got[b].isnan(),
                             torch.where(inf_ref, (got[b] == ref[b]) | got[b].isnan(), err <= bound[b]))  # NaN fails
            bad = ~ok
            if bad.any():
                i = tuple(bad.nonzero()[0].tolist())
                worst = err.nan_to_num(math.inf).max().item()
                ratio = (err / bound[b]).nan_to_num(math.inf).max().item()
                where = ("head %d dim %d" % i) if len(i) == 2 else f"head {i[0]}"
                raise AssertionError(
                    f"sequence {b}: {name} off by {worst:.3g}, {ratio:.3g} of its bound (first at {where}: got "
                    f"{got[b][i].item():.9g}, want {ref[b][i].item():.9g}, bound {bound[b][i].item():.3g}; "
                    f"NaN: {err.isnan().any().item()})")


def _assert_rows_match_reference(out, lse, want, seq_lens, q_indptr):
    """assert_matches_reference of a multi-token decode, row by row (q_indptr's rows)."""
    offsets = q_indptr.tolist()
    rows, sequences, tokens = [], [], []
    for b in range(len(offsets) - 1):
        for i in range(offsets[b + 1] - offsets[b]):
            rows.append(offsets[b] + i)
            sequences.append(b)
            tokens.append(i)
    index = torch.tensor(rows, dtype=torch.long)
    pick = want.select(index.to(want.out.device))
    got_out = None if out is None else out[index.to(out.device)]
    got_lse = None if lse is None else lse[index.to(lse.device)]
    lengths = seq_lens.cpu()[torch.tensor(sequences, dtype=torch.long)]  # (a row's sequence has length >= 1)
    try:
        assert_matches_reference(got_out, got_lse, pick, lengths)
    except AssertionError as failure:  # "sequence r: ..." names the r-th row compared
        message = str(failure)
        r = int(message.split(":")[0].split()[-1])
        raise AssertionError(f"sequence {sequences[r]} token {tokens[r]} (row {rows[r]}): "
                             f"{message.split(': ', 1)[1]}") from None
