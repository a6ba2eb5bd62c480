"""Random decode problems for the tests: fresh random q and caches (the whole pool, pages
no sequence uses included), a random page table of distinct pages, ragged lengths, and the
comparison against vxqa_torch.reference with vxqa's own bounds (testing/compare.h)."""
import math
from dataclasses import dataclass

import torch

import vxqa_torch
from vxqa_torch.reference import decode_reference, dequantize

E5M2_MAX = 57344.0
CACHE_DTYPES = {"uint8": torch.uint8, "float8_e5m2": torch.float8_e5m2, "float16": torch.float16}


def kv_cache_dtype_of(cache):
    """vLLM's kv_cache_dtype string for a test cache: a uint8 one holds E5M2 codes, and says so."""
    return "fp8_e5m2" if cache.dtype == torch.uint8 else "auto"


def random_cache_values(shape, dtype, generator, device):
    """Random cache contents of `dtype` (E5M2 codes from normal floats, or fp16)."""
    x = torch.randn(shape, generator=generator).to(device)
    if dtype == torch.float16:
        return x.half()
    codes = x.to(torch.float8_e5m2)
    return codes.view(torch.uint8) if dtype == torch.uint8 else codes


@dataclass
class Problem:
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    k_scale: float
    v_scale: float

    @property
    def kv_cache_dtype(self):
        return kv_cache_dtype_of(self.k_cache)

    def plan(self, max_batch=None, max_context=None):
        """A DecodePlan for this problem's shape (capacity: its batch and block table by default)."""
        return vxqa_torch.DecodePlan(
            num_q_heads=self.q.shape[1], num_kv_heads=self.k_cache.shape[2], head_dim=self.q.shape[2],
            page_size=self.k_cache.shape[1], max_batch=max_batch or self.q.shape[0],
            max_context=max_context or self.block_table.shape[1] * self.k_cache.shape[1], q_dtype=self.q.dtype,
            kv_cache_dtype=self.kv_cache_dtype, cache_dtype=self.k_cache.dtype, device=self.q.device)

    def reference(self, seq_lens=None, k_scale=None, v_scale=None):
        return decode_reference(self.q, self.k_cache, self.v_cache, self.block_table,
                                self.seq_lens if seq_lens is None else seq_lens, None,
                                self.k_scale if k_scale is None else k_scale,
                                self.v_scale if v_scale is None else v_scale)


def random_problem(seed, *, batch=3, kv_heads=2, group=4, head_dim=128, page_size=16, max_len=600,
                   cache_dtype=torch.uint8, q_dtype=torch.float16, device="cuda", lengths=None):
    g = torch.Generator().manual_seed(seed)
    pages_per_seq = math.ceil(max_len / page_size)
    num_pages = batch * pages_per_seq + 5  # a few pages no sequence owns
    table = torch.randperm(num_pages, generator=g)[: batch * pages_per_seq].view(batch, pages_per_seq)
    if lengths is None:
        lengths = torch.randint(1, max_len + 1, (batch,), generator=g).tolist()
    shape = (num_pages, page_size, kv_heads, head_dim)
    return Problem(
        q=torch.randn(batch, kv_heads * group, head_dim, generator=g).to(q_dtype).to(device),
        k_cache=random_cache_values(shape, cache_dtype, g, device),
        v_cache=random_cache_values(shape, cache_dtype, g, device),
        block_table=table.int().to(device),
        seq_lens=torch.tensor(lengths, dtype=torch.int32, device=device),
        k_scale=0.25 + torch.rand(1, generator=g).item(),
        v_scale=0.5 + torch.rand(1, generator=g).item(),
    )


def assert_matches_reference(out, lse, ref_out, ref_lse, v_cache, v_scale, seq_lens):
    """vxqa's bounds: |out - ref| <= 2e-3 max|V| + |ref| / 1024 (+ |ref| / 512, bf16's rounding,
    for bf16 out), |lse - ref| <= 2e-3 + |ref| 2^-20; a length-0 sequence exactly 0 and -inf."""
    v_max = dequantize(v_cache, v_scale).abs().max().item()
    out_rel = 1 / 1024 + (1 / 512 if out.dtype == torch.bfloat16 else 0)
    got, got_lse = out.to(torch.float64), lse.to(torch.float64)
    empty = (seq_lens == 0).cpu()
    for b in range(out.shape[0]):
        if empty[b]:
            assert torch.all(got[b] == 0), f"sequence {b} (length 0): out is not 0"
            assert torch.all(got_lse[b] == -math.inf), f"sequence {b} (length 0): lse is not -inf"
            continue
        err = (got[b] - ref_out[b]).abs()
        bound = 2e-3 * v_max + ref_out[b].abs() * out_rel
        assert torch.all(err <= bound), f"sequence {b}: out off by {err.max().item():.3g} (NaN: {err.isnan().any().item()})"
        lse_err = (got_lse[b] - ref_lse[b]).abs()
        assert torch.all(lse_err <= 2e-3 + ref_lse[b].abs() * 2.0**-20), f"sequence {b}: lse off by {lse_err.max().item():.3g}"
