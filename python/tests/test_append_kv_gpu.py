"""append_kv on the GPU: bit for bit against torch's own conversions (E5M2 with the scale,
saturated to +-57344, round to nearest even; E4M3 likewise, saturated to +-448, NaN as 0x7F;
fp16 and bf16 likewise, x / scale in fp32 rounded to nearest even: for bf16 torch's rounding is
checked against one on the bits, ties drawn on purpose), from fp16 and bf16 rows, into E5M2
(uint8 with "fp8_e5m2", float8_e5m2), E4M3 (uint8 with "fp8" or "fp8_e4m3", float8_e4m3fn),
fp16 and bf16 caches ("auto"); vLLM's writer contract (key/value padded past a shorter
slot_mapping, every negative slot skipped); bad slots leave the cache alone; the error word;
device scales, and bad ones (their bit, NaN rows); and append then decode inside a replayed
CUDA graph (E5M2, E4M3 and bf16) against the float64 reference."""
import math

import pytest
import torch

import vxqa_torch
from problems import (assert_matches_reference, encode, expected_outputs, random_cache_values,
                      skip_bf16_cache_below_sm80, value_dtype)

# The caches written: every dtype, a uint8 one under each string that states its format.
WRITTEN = [(torch.uint8, "fp8_e5m2"), (torch.float8_e5m2, "auto"), (torch.float16, "auto"), (torch.uint8, "fp8"),
           (torch.uint8, "fp8_e4m3"), (torch.float8_e4m3fn, "auto"), (torch.float8_e4m3fn, "fp8"),
           (torch.bfloat16, "auto")]


def as_bytes(t):
    """t's bytes: the last dimension times the element size."""
    return t.view(torch.uint8)


def bf16_rne(y):
    """fp32 y (no NaN) rounded to bf16 to nearest even on the bits, independently of torch:
    add 0x7FFF plus the lowest kept bit, drop the low 16 (a carry rounds up to the next
    binade, or to inf past bf16's largest finite value)."""
    bits = y.view(torch.int32).long() & 0xFFFFFFFF
    top = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return torch.where(top >= 0x8000, top - 0x10000, top).to(torch.int16).view(torch.bfloat16)


def assert_torch_bf16_is_rne(x, scale):
    """encode's bf16 codes (torch's x / scale in fp32, .to(torch.bfloat16)) are bf16_rne's for
    these rows. Returns how many quotients were ties (halfway between two bf16 values) and how
    many of those rounded away from 0."""
    y = x.float() / torch.tensor(scale, dtype=torch.float32)
    assert not y.isnan().any()
    assert torch.equal(as_bytes(encode(x, scale, torch.bfloat16)), as_bytes(bf16_rne(y)))
    tied = y[(y.view(torch.int32) & 0xFFFF) == 0x8000]
    return tied.numel(), int((bf16_rne(tied).float().abs() > tied.abs()).sum())


@pytest.mark.parametrize("input_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cache_dtype,kv_cache_dtype", WRITTEN, ids=[f"{d}-{s}" for d, s in WRITTEN])
def test_append_kv_bit_for_bit(cuda, input_dtype, cache_dtype, kv_cache_dtype):
    g = torch.Generator().manual_seed(7)
    tokens, heads, dim, pages, page_size = 37, 2, 128, 9, 16
    key = (torch.randn(tokens, heads, dim, generator=g) * 4).to(input_dtype)
    value = (torch.randn(tokens, heads, dim, generator=g) * 4).to(input_dtype)
    key[0, 0, :4] = torch.tensor([70000.0, -70000.0, 1e-6, -0.0]).to(input_dtype)  # saturation, underflow, sign
    # E4M3's edges, as x / k_scale: 470 and -1000 saturate to +-448 (470 would round to the NaN
    # code), 464 is the tie of 448 and 480 (to 448), 2^-9 the least subnormal, 1.5 * 2^-10
    # rounds up to it, 2^-10 is the tie with 0 (to 0), -2^-11 gives -0
    edges = torch.tensor([470.0, -1000.0, 464.0, 2.0**-9, 1.5 * 2.0**-10, 2.0**-10, -2.0**-11])
    key[1, 0, :7] = (edges * 0.75).to(input_dtype)
    if value_dtype(cache_dtype, kv_cache_dtype) == torch.float8_e4m3fn:
        key[2, 1, :2] = torch.tensor([math.nan, -math.nan]).to(input_dtype)  # every NaN as 0x7F
    slots = torch.randperm(pages * page_size, generator=g)[:tokens]
    slots[5] = -1  # skipped
    k_cache = random_cache_values((pages, page_size, heads, dim), cache_dtype, g, cuda, kv_cache_dtype)
    v_cache = random_cache_values((pages, page_size, heads, dim), cache_dtype, g, cuda, kv_cache_dtype)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    k_scale, v_scale = 0.75, 1.5
    vxqa_torch.append_kv(key.to(cuda), value.to(cuda), slots.to(cuda), k_cache, v_cache,
                         kv_cache_dtype=kv_cache_dtype, k_scale=k_scale,
                         v_scale=torch.tensor([v_scale], device=cuda), errors=errors)
    torch.cuda.synchronize()
    assert errors.item() == 0
    # Compared as bytes, [slot, head, dim * element bytes]: every dtype compares alike.
    want_k = as_bytes(k_before.cpu().view(-1, heads, dim)).clone()
    want_v = as_bytes(v_before.cpu().view(-1, heads, dim)).clone()
    written = slots >= 0
    want_k[slots[written]] = as_bytes(encode(key[written], k_scale, cache_dtype, kv_cache_dtype))
    want_v[slots[written]] = as_bytes(encode(value[written], v_scale, cache_dtype, kv_cache_dtype))
    assert torch.equal(as_bytes(k_cache.cpu().view(-1, heads, dim)), want_k)
    assert torch.equal(as_bytes(v_cache.cpu().view(-1, heads, dim)), want_v)
    if cache_dtype == torch.bfloat16:  # torch's conversion, the expectation, is itself nearest-even
        assert_torch_bf16_is_rne(key[written], k_scale)
        assert_torch_bf16_is_rne(value[written], v_scale)


@pytest.mark.parametrize("input_dtype", [torch.float16, torch.bfloat16])
def test_append_kv_bf16_rounds_ties_to_even(cuda, input_dtype):
    """Rows whose x / scale are halfway between two bf16 values, thousands of them, rounded
    both ways: fp16 rows under k_scale 0.5 (x / scale exact) keep 11 significant bits, so about
    one in eight lies on a tie of bf16's 8; under v_scale 1/3 the fp32 quotient of a bf16 row
    is mostly 3x exactly (10 significant bits: one in four a tie), of an fp16 row sometimes.
    The cache holds torch's bf16 of each, which is bf16_rne's: ties to even."""
    g = torch.Generator().manual_seed(9)
    tokens, heads, dim = 64, 2, 128
    key = (torch.randn(tokens, heads, dim, generator=g) * 8).to(input_dtype)
    value = (torch.randn(tokens, heads, dim, generator=g) * 8).to(input_dtype)
    k_scale, v_scale = 0.5, 1 / 3
    (k_ties, k_up), (v_ties, v_up) = assert_torch_bf16_is_rne(key, k_scale), assert_torch_bf16_is_rne(value, v_scale)
    assert k_ties + v_ties > tokens * heads * dim // 8, (k_ties, v_ties)
    assert 0 < k_up + v_up < k_ties + v_ties  # ties rounded both ways: to the even neighbour
    k_cache = torch.zeros(tokens // 16, 16, heads, dim, dtype=torch.bfloat16, device=cuda)
    v_cache = torch.zeros_like(k_cache)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    vxqa_torch.append_kv(key.to(cuda), value.to(cuda), torch.arange(tokens, device=cuda), k_cache, v_cache,
                         k_scale=k_scale, v_scale=v_scale, errors=errors)
    torch.cuda.synchronize()
    assert errors.item() == 0
    assert torch.equal(as_bytes(k_cache.cpu().view(tokens, heads, dim)), as_bytes(encode(key, k_scale, torch.bfloat16)))
    assert torch.equal(as_bytes(v_cache.cpu().view(tokens, heads, dim)),
                       as_bytes(encode(value, v_scale, torch.bfloat16)))


def expected_cache(before, key, slots, scale, kv_cache_dtype):
    """The bytes [slot, head, dim * element bytes] a cache must hold after writing key's rows
    at slots (negative ones skipped): the CPU encoder's codes, the rest as before."""
    heads, dim = before.shape[2], before.shape[3]
    want = as_bytes(before.cpu().view(-1, heads, dim)).clone()
    slots = slots.cpu()
    written = slots >= 0
    want[slots[written]] = as_bytes(encode(key.cpu()[: len(slots)][written], scale, before.dtype, kv_cache_dtype))
    return want


@pytest.mark.parametrize("cache_dtype,kv_cache_dtype", WRITTEN, ids=[f"{d}-{s}" for d, s in WRITTEN])
def test_append_kv_vllm_padded_rows_and_negative_slots(cuda, cache_dtype, kv_cache_dtype):
    """vLLM pads key and value for CUDA graphs, not slot_mapping: num_tokens is
    slot_mapping's length, rows past it are not read, and every negative slot (-1, -7) is
    skipped silently."""
    g = torch.Generator().manual_seed(8)
    tokens, padded, heads, dim, pages, page_size = 9, 16, 2, 128, 4, 16
    key = torch.randn(padded, heads, dim, generator=g).half()
    value = torch.randn(padded, heads, dim, generator=g).half()
    slots = torch.randperm(pages * page_size, generator=g)[:tokens]
    slots[2], slots[6] = -1, -7
    k_cache = random_cache_values((pages, page_size, heads, dim), cache_dtype, g, cuda, kv_cache_dtype)
    v_cache = random_cache_values((pages, page_size, heads, dim), cache_dtype, g, cuda, kv_cache_dtype)
    want_k = expected_cache(k_cache, key, slots, 0.5, kv_cache_dtype)
    want_v = expected_cache(v_cache, value, slots, 2.0, kv_cache_dtype)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    vxqa_torch.append_kv(key.to(cuda), value.to(cuda), slots.to(cuda), k_cache, v_cache,
                         kv_cache_dtype=kv_cache_dtype, k_scale=0.5, v_scale=2.0, errors=errors)
    torch.cuda.synchronize()
    assert errors.item() == 0  # negative slots are not errors
    assert torch.equal(as_bytes(k_cache.cpu().view(-1, heads, dim)), want_k)
    assert torch.equal(as_bytes(v_cache.cpu().view(-1, heads, dim)), want_v)
    # The comparison can fail: had the first padded row been written too, to a free slot, it would differ.
    free = next(s for s in range(pages * page_size) if s not in set(slots.tolist()))
    assert not torch.equal(as_bytes(k_cache.cpu().view(-1, heads, dim)),
                           expected_cache(k_cache, key, torch.cat([slots, slots.new_tensor([free])]), 0.5,
                                          kv_cache_dtype))


def test_append_kv_bad_slots_set_the_error_and_write_nothing(cuda):
    key = torch.randn(5, 1, 64, device=cuda).half()
    cache = torch.zeros(2, 16, 1, 64, dtype=torch.float8_e5m2, device=cuda)
    v_cache = torch.zeros_like(cache)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    vxqa_torch.append_kv(key, key, torch.tensor([32, -2, 1 << 40, -1, -(1 << 40)], device=cuda), cache, v_cache,
                         errors=errors)
    torch.cuda.synchronize()
    assert errors.item() == vxqa_torch.APPEND_ERROR_BAD_SLOT
    assert cache.view(torch.uint8).count_nonzero().item() == 0 and v_cache.view(torch.uint8).count_nonzero() == 0


def test_append_kv_no_tokens_is_a_no_op(cuda):
    key = torch.randn(4, 1, 64, device=cuda).half()  # all padding
    cache = torch.zeros(2, 16, 1, 64, dtype=torch.float16, device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    vxqa_torch.append_kv(key, key, torch.zeros(0, dtype=torch.long, device=cuda), cache, cache.clone(),
                         errors=errors)
    torch.cuda.synchronize()
    assert errors.item() == 0 and cache.count_nonzero().item() == 0


@pytest.mark.parametrize("cache_dtype", [torch.float8_e5m2, torch.float8_e4m3fn, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("which", ["k", "v"])
@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_append_kv_bad_device_scale_sets_its_bit_and_writes_nan(cuda, cache_dtype, which, bad):
    key = torch.randn(3, 2, 64, device=cuda).half()
    k_cache = torch.zeros(2, 16, 2, 64, dtype=cache_dtype, device=cuda)
    v_cache = torch.zeros_like(k_cache)
    scales = dict(k_scale=torch.tensor(1.0, device=cuda), v_scale=torch.tensor(1.0, device=cuda))
    scales[f"{which}_scale"].fill_(bad)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    slots = torch.tensor([3, 17, 30], device=cuda)
    vxqa_torch.append_kv(key, key, slots, k_cache, v_cache, errors=errors, **scales)
    torch.cuda.synchronize()
    assert errors.item() == (vxqa_torch.ERROR_BAD_K_SCALE if which == "k" else vxqa_torch.ERROR_BAD_V_SCALE)
    bad_cache, good_cache = (k_cache, v_cache) if which == "k" else (v_cache, k_cache)
    rows = lambda c: c.view(-1, 2, 64)[slots].float()  # noqa: E731
    assert rows(bad_cache).isnan().all()
    assert torch.equal(rows(good_cache), key.to(cache_dtype).float())  # scale 1


@pytest.mark.parametrize("what,field,kw,head_dim", [
    ("k_scale 0", "k_scale", dict(k_scale=0.0), 64), ("head dim 12", "key", {}, 12)])
def test_append_kv_library_checks_name_the_field(cuda, what, field, kw, head_dim):
    key = torch.randn(3, 1, head_dim, device=cuda).half()
    cache = torch.zeros(2, 16, 1, head_dim, dtype=torch.uint8, device=cuda)
    with pytest.raises(ValueError, match=rf"^{field}: "):
        vxqa_torch.append_kv(key, key, torch.arange(3, device=cuda), cache, cache.clone(),
                             kv_cache_dtype="fp8_e5m2", **kw)


@pytest.mark.parametrize("cache_dtype", [torch.float8_e5m2, torch.float8_e4m3fn, torch.bfloat16])
def test_append_then_decode_replayed_in_a_cuda_graph(cuda, cache_dtype):
    """Each replay writes one new token per sequence at its own slot, then decodes over
    everything written so far; the lengths, slots and rows change between replays. The
    cache's dtype says its format (kv_cache_dtype "auto"): E5M2, E4M3 or bf16 (a bf16 model's
    cache, sm_80 and newer)."""
    skip_bf16_cache_below_sm80(cache_dtype, cuda)
    g = torch.Generator().manual_seed(11)
    batch, heads, group, dim, page_size, max_len = 3, 2, 4, 128, 16, 64
    pages_per_seq = max_len // page_size
    table = torch.randperm(batch * pages_per_seq + 2, generator=g)[: batch * pages_per_seq].view(batch, -1)
    k_cache = torch.zeros(batch * pages_per_seq + 2, page_size, heads, dim, dtype=cache_dtype, device=cuda)
    v_cache = torch.zeros_like(k_cache)
    block_table = table.int().to(cuda)
    k_scale, v_scale = torch.tensor(0.5, device=cuda), torch.tensor(2.0, device=cuda)
    q = torch.zeros(batch, heads * group, dim, dtype=torch.bfloat16, device=cuda)  # a bf16 model
    key = torch.zeros(batch, heads, dim, dtype=torch.bfloat16, device=cuda)
    value = torch.zeros_like(key)
    slots = torch.zeros(batch, dtype=torch.long, device=cuda)
    lens = torch.zeros(batch, dtype=torch.int32, device=cuda)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads * group, device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)  # the layer's word: the two ops' bits differ
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        vxqa_torch.append_kv(key, value, slots, k_cache, v_cache, k_scale=k_scale, v_scale=v_scale,
                             errors=errors)
        vxqa_torch.decode(q, k_cache, v_cache, block_table, lens, k_scale=k_scale, v_scale=v_scale, out=out, lse=lse,
                          errors=errors)
    start = torch.tensor([0, 5, 20])  # ragged: each sequence already holds this many tokens
    for step in range(12):
        now = start + step  # the token written this step is number `now`
        q.copy_(torch.randn(q.shape, generator=g))
        key.copy_(torch.randn(key.shape, generator=g))
        value.copy_(torch.randn(value.shape, generator=g))
        slots.copy_(table[torch.arange(batch), now // page_size] * page_size + now % page_size)
        lens.copy_((now + 1).int())
        out.fill_(math.nan)
        lse.fill_(math.nan)
        graph.replay()
    torch.cuda.synchronize()
    assert errors.item() == 0
    # Only the last 12 tokens of each sequence were written; the earlier ones are zero codes.
    want = expected_outputs(q, k_cache, v_cache, block_table, lens, None, k_scale.item(), v_scale.item())
    assert_matches_reference(out, lse, want, lens)
    last = table[torch.arange(batch), (start + 11) // page_size] * page_size + (start + 11) % page_size
    stored = as_bytes(k_cache.view(-1, heads, dim))[last.to(cuda)].cpu()
    assert torch.equal(stored, as_bytes(encode(key.cpu(), 0.5, cache_dtype)))
