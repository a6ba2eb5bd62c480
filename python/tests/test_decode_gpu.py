"""decode on the GPU against the float64 reference: fresh random data, random page tables,
ragged lengths (a length-0 sequence included), out and lse poisoned with NaN first; every
cache dtype and head dim of the default Configs, fp16 and bf16 q, strided views, scales as device tensors,
the error word, CUDA-graph capture and replay with changing lengths and scales,
torch.compile, opcheck, and the library's own checks naming the field."""
import math

import pytest
import torch

import vxqa_torch
from problems import CACHE_DTYPES, assert_matches_reference, random_problem


def run(p, **kw):
    out = torch.full_like(p.q, math.nan)
    lse = torch.full(p.q.shape[:2], math.nan, device=p.q.device)
    errors = torch.zeros(1, dtype=torch.int32, device=p.q.device)
    kw.setdefault("k_scale", p.k_scale)
    kw.setdefault("v_scale", p.v_scale)
    vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, out=out, lse=lse, errors=errors, **kw)
    return out, lse, errors


@pytest.mark.parametrize("head_dim,cache,page_size,q_dtype", [
    (64, "uint8", 16, torch.float16), (128, "float8_e5m2", 16, torch.float16), (256, "uint8", 16, torch.float16),
    (128, "uint8", 7, torch.float16), (256, "float8_e5m2", 5, torch.float16), (64, "float16", 16, torch.float16),
    (128, "float16", 32, torch.float16), (256, "float16", 16, torch.float16), (64, "uint8", 16, torch.bfloat16),
    (128, "float8_e5m2", 9, torch.bfloat16), (256, "float16", 16, torch.bfloat16)])
def test_decode_matches_reference(cuda, head_dim, cache, page_size, q_dtype):
    p = random_problem(10 + head_dim + page_size, batch=4, head_dim=head_dim, page_size=page_size, max_len=900,
                       cache_dtype=CACHE_DTYPES[cache], q_dtype=q_dtype, device=cuda, lengths=[900, 0, 1, 517])
    out, lse, errors = run(p)
    torch.cuda.synchronize()
    assert errors.item() == 0
    assert_matches_reference(out, lse, *p.reference(), p.v_cache, p.v_scale, p.seq_lens)


def test_decode_strided_views_and_device_scales(cuda):
    """q a slice of a wider tensor, K and V two halves of one [pages, 2, P, H, D] pool, the
    block table a slice of a wider one; scales as 0-dim and [1] device tensors."""
    p = random_problem(31, batch=3, kv_heads=2, group=5, head_dim=128, page_size=16, max_len=1200, device=cuda)
    q_wide = torch.randn(3, 12, 128 + 64, device=cuda).half()
    q_wide[:, 1:11, :128] = p.q
    kv = torch.stack([p.k_cache, p.v_cache], dim=1)
    table_wide = torch.full((3, p.block_table.shape[1] + 3), -7, dtype=torch.int32, device=cuda)
    table_wide[:, : p.block_table.shape[1]] = p.block_table
    p.q, p.k_cache, p.v_cache, p.block_table = q_wide[:, 1:11, :128], kv[:, 0], kv[:, 1], table_wide[:, :-3]
    out, lse, errors = run(p, k_scale=torch.tensor(p.k_scale, device=cuda),
                           v_scale=torch.tensor([p.v_scale], device=cuda))
    torch.cuda.synchronize()
    assert errors.item() == 0
    assert_matches_reference(out, lse, *p.reference(), p.v_cache, p.v_scale, p.seq_lens)


def test_decode_error_word_and_nan_for_bad_pages_and_lengths(cuda):
    p = random_problem(41, batch=3, head_dim=64, page_size=16, max_len=320, device=cuda, lengths=[300, 200, 100])
    p.block_table[1, 2] = p.k_cache.shape[0]  # outside the pool, inside sequence 1's length
    out, lse, errors = run(p)
    torch.cuda.synchronize()
    assert errors.item() == vxqa_torch.DECODE_ERROR_BAD_PAGE
    assert out[1].isnan().all() and lse[1].isnan().all()
    keep = torch.tensor([0, 2], device=cuda)
    ref_out, ref_lse = p.reference(seq_lens=p.seq_lens * torch.tensor([1, 0, 1], device=cuda, dtype=torch.int32))
    assert_matches_reference(out[keep], lse[keep], ref_out[keep], ref_lse[keep], p.v_cache, p.v_scale,
                             p.seq_lens[keep])
    p.block_table[1, 2] = 0
    p.seq_lens[2] = 321  # above max_context (the table's 20 pages x 16 = 320 tokens)
    out, lse, errors = run(p)
    torch.cuda.synchronize()
    assert errors.item() == vxqa_torch.DECODE_ERROR_BAD_LENGTH
    assert out[2].isnan().all()


def test_decode_in_a_cuda_graph_follows_lengths_and_scales(cuda):
    p = random_problem(51, batch=4, head_dim=128, page_size=16, max_len=1000, device=cuda, lengths=[1000] * 4)
    out = torch.empty_like(p.q)
    lse = torch.empty(p.q.shape[:2], device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    lens = torch.zeros(4, dtype=torch.int32, device=cuda)
    k_scale = torch.tensor(p.k_scale, device=cuda)
    v_scale = torch.tensor(p.v_scale, device=cuda)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the first call of this shape happens inside the capture
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, lens, k_scale=k_scale, v_scale=v_scale,
                          out=out, lse=lse, errors=errors)
    steps = [([1, 17, 400, 999], 1.0), ([0, 600, 128, 1000], 0.5), ([300, 300, 0, 5], 3.0)]
    for step, (lengths, factor) in enumerate(steps):
        lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        k_scale.fill_(p.k_scale * factor)
        v_scale.fill_(p.v_scale / factor)
        out.fill_(math.nan)
        lse.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        assert errors.item() == 0, f"replay {step}"
        ref = p.reference(seq_lens=lens, k_scale=p.k_scale * factor, v_scale=p.v_scale / factor)
        assert_matches_reference(out, lse, *ref, p.v_cache, p.v_scale / factor, lens)


def test_decode_under_torch_compile_matches_eager(cuda):
    p = random_problem(61, batch=3, head_dim=64, page_size=16, max_len=500, device=cuda)

    def attention(q, k_cache, v_cache, block_table, seq_lens):
        return vxqa_torch.decode(q * 0.5, k_cache, v_cache, block_table, seq_lens, k_scale=p.k_scale,
                                 v_scale=p.v_scale) + 1

    compiled = torch.compile(attention, fullgraph=True)
    got = compiled(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens)
    want = attention(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-3)  # the same kernels; only the fused ops may round apart


def test_opcheck_on_cuda_tensors(cuda):
    p = random_problem(71, batch=2, head_dim=64, page_size=16, max_len=200, device=cuda)
    out = torch.empty_like(p.q)
    lse = torch.empty(p.q.shape[:2], device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    torch.library.opcheck(torch.ops.vxqa.decode_out.default,
                          (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, 0.125, p.k_scale, p.v_scale,
                           None, torch.tensor(p.v_scale, device=cuda), 0, out, lse, errors))


LIBRARY_CASES = [  # (what is wrong, the field vxqa names, keyword arguments)
    ("softmax_scale 0", "softmax_scale", dict(softmax_scale=0.0)),
    ("k_scale negative", "k_scale", dict(k_scale=-1.0)),
    ("v_scale NaN", "v_scale", dict(v_scale=math.nan)),
]


@pytest.mark.parametrize("what,field,kw", LIBRARY_CASES, ids=[c[0] for c in LIBRARY_CASES])
def test_library_checks_name_the_field(cuda, what, field, kw):
    p = random_problem(81, batch=2, head_dim=64, page_size=16, max_len=100, device=cuda)
    with pytest.raises(ValueError, match=rf"^{field}: "):
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, **kw)


def test_unaligned_q_and_unsupported_head_dim_name_the_field(cuda):
    p = random_problem(82, batch=2, head_dim=64, page_size=16, max_len=100, device=cuda)
    flat = torch.zeros(p.q.numel() + 1, dtype=torch.half, device=cuda)
    with pytest.raises(ValueError, match=r"^q: must be 16-byte aligned"):
        vxqa_torch.decode(flat[1:].view(p.q.shape), p.k_cache, p.v_cache, p.block_table, p.seq_lens)
    q = torch.randn(2, 8, 96, device=cuda).half()
    cache = torch.zeros(p.k_cache.shape[:3] + (96,), dtype=torch.uint8, device=cuda)
    with pytest.raises(ValueError, match=r"^head_dim: no Config"):
        vxqa_torch.decode(q, cache, cache, p.block_table, p.seq_lens)


def test_tensors_on_another_device_are_named(cuda):
    p = random_problem(83, batch=2, head_dim=64, page_size=16, max_len=100, device=cuda)
    with pytest.raises(ValueError, match=r"^block_table: must be a CUDA tensor"):
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table.cpu(), p.seq_lens)
    with pytest.raises(ValueError, match=r"^k_scale: must be a CUDA tensor"):
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, k_scale=torch.tensor(1.0))
