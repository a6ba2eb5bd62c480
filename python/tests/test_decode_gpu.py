"""decode on the GPU against the float64 reference, through both paths: the plain op (plans
every call) and a DecodePlan (plans once). Fresh random data, random page tables, ragged
lengths (a length-0 sequence included), out and lse poisoned with NaN first; every cache
dtype and head dim of the default Configs (fp16, E5M2 and E4M3 caches with fp16 and bf16 q;
bf16 caches with bf16 q, on sm_80 and newer, refused below), strided views, scales as device
tensors (and the error bits and NaN of bad ones), the error word, batch 0, CUDA-graph capture
and replay with changing lengths and scales, torch.compile, opcheck, what a planned call does
not do (allocate, ask the device), and the checks naming the field."""
import math

import pytest
import torch

import vxqa_torch
from problems import CACHES, assert_matches_reference, random_problem, skip_bf16_cache_below_sm80
from vxqa_torch.reference import dequantize

PATHS = ["plain", "planned"]
# The format each test cache holds, as a Config's name says it ("D128 e5m2 fp16 W4 page16").
FORMATS = {"uint8": "e5m2", "float8_e5m2": "e5m2", "float16": "fp16", "bfloat16": "bf16", "uint8 e4m3": "e4m3",
           "float8_e4m3fn": "e4m3"}


def decode(p, path, plan=None, **kw):
    """One decode of problem p by `path` ("plain": vxqa_torch.decode; "planned": plan.run,
    a plan made for p when none is given)."""
    kw.setdefault("k_scale", p.k_scale)
    kw.setdefault("v_scale", p.v_scale)
    if path == "plain":
        return vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens,
                                 kv_cache_dtype=p.kv_cache_dtype, **kw)
    plan = plan or p.plan()
    return plan.run(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, **kw)


def run(p, path="plain", plan=None, **kw):
    out = torch.full_like(p.q, math.nan)
    lse = torch.full(p.q.shape[:2], math.nan, device=p.q.device)
    errors = torch.zeros(1, dtype=torch.int32, device=p.q.device)
    decode(p, path, plan, out=out, lse=lse, errors=errors, **kw)
    return out, lse, errors


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("head_dim,cache,page_size,q_dtype", [
    (64, "uint8", 16, torch.float16), (128, "float8_e5m2", 16, torch.float16), (256, "uint8", 16, torch.float16),
    (128, "uint8", 7, torch.float16), (256, "float8_e5m2", 5, torch.float16), (64, "float16", 16, torch.float16),
    (128, "float16", 32, torch.float16), (256, "float16", 16, torch.float16), (64, "uint8", 16, torch.bfloat16),
    (128, "float8_e5m2", 9, torch.bfloat16), (256, "float16", 16, torch.bfloat16),
    # E4M3: vLLM's "fp8" on uint8 caches, and float8_e4m3fn caches under "auto"
    (64, "uint8 e4m3", 16, torch.float16), (128, "float8_e4m3fn", 16, torch.float16),
    (256, "uint8 e4m3", 16, torch.bfloat16), (128, "uint8 e4m3", 7, torch.bfloat16),
    (256, "float8_e4m3fn", 5, torch.float16), (64, "float8_e4m3fn", 9, torch.bfloat16),
    # bf16: vLLM's "auto" with a bf16 model's cache, bf16 q only
    (64, "bfloat16", 16, torch.bfloat16), (128, "bfloat16", 32, torch.bfloat16), (256, "bfloat16", 16, torch.bfloat16),
    (128, "bfloat16", 7, torch.bfloat16),
    # head dim 512 (two warps a tile), every cache
    (512, "uint8", 16, torch.float16), (512, "uint8 e4m3", 7, torch.bfloat16), (512, "float16", 16, torch.float16),
    (512, "bfloat16", 16, torch.bfloat16)])
def test_decode_matches_reference(cuda, path, head_dim, cache, page_size, q_dtype):
    skip_bf16_cache_below_sm80(CACHES[cache]["cache_dtype"], cuda)
    p = random_problem(10 + head_dim + page_size, batch=4, head_dim=head_dim, page_size=page_size, max_len=900,
                       q_dtype=q_dtype, device=cuda, lengths=[900, 0, 1, 517], **CACHES[cache])
    out, lse, errors = run(p, path)
    torch.cuda.synchronize()
    assert errors.item() == 0
    name = p.plan().config_name.split()
    assert name[1:3] == [FORMATS[cache], "bf16" if q_dtype == torch.bfloat16 else "fp16"], name  # the family ran
    assert_matches_reference(out, lse, p.reference(), p.seq_lens)


def test_a_wrong_answer_fails_the_comparison(cuda):
    """The comparison can fail: one element off by 1 % of max|V| is caught."""
    p = random_problem(12, batch=2, head_dim=128, page_size=16, max_len=300, device=cuda)
    out, lse, _ = run(p)
    v_max = dequantize(p.v_cache, p.v_scale).abs().max().item()
    out[1, 3, 5] += 0.01 * v_max  # the bound, from the error model, is a small fraction of that here
    with pytest.raises(AssertionError, match="sequence 1: out off by"):
        assert_matches_reference(out, lse, p.reference(), p.seq_lens)


def test_e4m3_codes_read_as_e5m2_fail_the_comparison(cuda):
    """The format is the string's: an E4M3 cache's answer passes against the reference of its
    bytes as E4M3 codes and fails against the same bytes read as E5M2."""
    p = random_problem(13, batch=2, head_dim=128, page_size=16, max_len=300, device=cuda, **CACHES["uint8 e4m3"])
    out, lse, errors = run(p)
    torch.cuda.synchronize()
    assert errors.item() == 0
    assert_matches_reference(out, lse, p.reference(), p.seq_lens)
    p.kv_cache_dtype = "fp8_e5m2"
    with pytest.raises(AssertionError, match="off by"):
        assert_matches_reference(out, lse, p.reference(), p.seq_lens)


def test_bf16_codes_read_as_fp16_fail_the_comparison(cuda):
    """A bf16 cache is read as bf16: its answer passes against the reference of its values and
    fails against the same bytes read as fp16."""
    skip_bf16_cache_below_sm80(torch.bfloat16, cuda)
    p = random_problem(14, batch=2, head_dim=128, page_size=16, max_len=300, q_dtype=torch.bfloat16, device=cuda,
                       **CACHES["bfloat16"])
    out, lse, errors = run(p)
    torch.cuda.synchronize()
    assert errors.item() == 0
    assert_matches_reference(out, lse, p.reference(), p.seq_lens)
    p.k_cache, p.v_cache = p.k_cache.view(torch.float16), p.v_cache.view(torch.float16)
    with pytest.raises(AssertionError, match="off by"):
        assert_matches_reference(out, lse, p.reference(), p.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_a_bf16_cache_is_refused_below_sm80(cuda, path):
    """sm_70 and sm_75 run the SM70 body, which has no bf16 MMA: a plan or a decode of a bf16
    cache is refused there, naming the cache type (vxqa's decode_smem_bytes)."""
    if torch.cuda.get_device_capability(cuda) >= (8, 0):
        pytest.skip("this GPU (sm_80 or newer) runs bf16 caches: test_decode_matches_reference checks them")
    p = random_problem(15, batch=2, head_dim=128, page_size=16, max_len=100, q_dtype=torch.bfloat16, device=cuda,
                       **CACHES["bfloat16"])
    with pytest.raises(ValueError, match=r"^cache_type: bf16 caches need the SM80 body"):
        decode(p, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cache", ["uint8", "uint8 e4m3"])
def test_decode_strided_views_and_device_scales(cuda, path, cache):
    """q a slice of a wider tensor, K and V two halves of one [pages, 2, P, H, D] pool, the
    block table a slice of a wider one; scales as 0-dim and [1] device tensors."""
    p = random_problem(31, batch=3, kv_heads=2, group=5, head_dim=128, page_size=16, max_len=1200, device=cuda,
                       **CACHES[cache])
    q_wide = torch.randn(3, 12, 128 + 64, device=cuda).half()
    q_wide[:, 1:11, :128] = p.q
    kv = torch.stack([p.k_cache, p.v_cache], dim=1)
    table_wide = torch.full((3, p.block_table.shape[1] + 3), -7, dtype=torch.int32, device=cuda)
    table_wide[:, : p.block_table.shape[1]] = p.block_table
    p.q, p.k_cache, p.v_cache, p.block_table = q_wide[:, 1:11, :128], kv[:, 0], kv[:, 1], table_wide[:, :-3]
    out, lse, errors = run(p, path, k_scale=torch.tensor(p.k_scale, device=cuda),
                           v_scale=torch.tensor([p.v_scale], device=cuda))
    torch.cuda.synchronize()
    assert errors.item() == 0
    assert_matches_reference(out, lse, p.reference(), p.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_decode_error_word_and_nan_for_bad_pages_and_lengths(cuda, path):
    p = random_problem(41, batch=3, head_dim=64, page_size=16, max_len=320, device=cuda, lengths=[300, 200, 100])
    p.block_table[1, 2] = p.k_cache.shape[0]  # outside the pool, inside sequence 1's length
    out, lse, errors = run(p, path)
    torch.cuda.synchronize()
    assert errors.item() == vxqa_torch.DECODE_ERROR_BAD_PAGE
    assert out[1].isnan().all() and lse[1].isnan().all()
    keep = torch.tensor([0, 2], device=cuda)
    want = p.reference(seq_lens=p.seq_lens * torch.tensor([1, 0, 1], device=cuda, dtype=torch.int32))
    assert_matches_reference(out[keep], lse[keep], want.select(keep), p.seq_lens[keep])
    p.block_table[1, 2] = 0
    p.seq_lens[2] = 321  # above max_context (the table's 20 pages x 16 = 320 tokens)
    out, lse, errors = run(p, path)
    torch.cuda.synchronize()
    assert errors.item() == vxqa_torch.DECODE_ERROR_BAD_LENGTH
    assert out[2].isnan().all()


@pytest.mark.parametrize("path", PATHS)
def test_errors_are_ored_into_the_word(cuda, path):
    """The step's bits are OR-ed in: bits already there (another op's) stay."""
    p = random_problem(42, batch=2, head_dim=128, page_size=16, max_len=100, device=cuda, lengths=[50, 60])
    p.block_table[0, 0] = -1
    errors = torch.full((1,), vxqa_torch.APPEND_ERROR_BAD_SLOT, dtype=torch.int32, device=cuda)
    decode(p, path, errors=errors)
    torch.cuda.synchronize()
    assert errors.item() == vxqa_torch.APPEND_ERROR_BAD_SLOT | vxqa_torch.DECODE_ERROR_BAD_PAGE


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("which", ["k", "v"])
@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
@pytest.mark.parametrize("max_len", [64, 2000], ids=["one chunk", "split"])
def test_bad_device_scale_sets_its_bit_and_nan(cuda, path, which, bad, max_len):
    """A device scale holding 0, -1, NaN or inf: its error bit, and NaN in every output it
    touches (K: out and lse; V: out), for a one-chunk plan and a split one."""
    p = random_problem(43, batch=3, head_dim=128, page_size=16, max_len=max_len, device=cuda)
    assert (p.plan().num_chunks > 1) == (max_len > 64)  # both kinds of step are tested
    scales = dict(k_scale=torch.tensor(p.k_scale, device=cuda), v_scale=torch.tensor(p.v_scale, device=cuda))
    scales[f"{which}_scale"].fill_(bad)
    out, lse, errors = run(p, path, **scales)
    torch.cuda.synchronize()
    bit = vxqa_torch.ERROR_BAD_K_SCALE if which == "k" else vxqa_torch.ERROR_BAD_V_SCALE
    assert errors.item() == bit
    assert out.isnan().all()
    if which == "k":
        assert lse.isnan().all()
    else:  # V's scale does not touch the scores: lse is the reference's (out, all NaN, not compared)
        assert_matches_reference(None, lse, p.reference(), p.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_batch_0_is_a_no_op(cuda, path):
    p = random_problem(44, batch=2, head_dim=64, page_size=16, max_len=100, device=cuda)
    plan = p.plan() if path == "planned" else None
    p.q, p.block_table, p.seq_lens = p.q[:0], p.block_table[:0], p.seq_lens[:0]
    errors = torch.full((1,), 32, dtype=torch.int32, device=cuda)
    out = torch.empty_like(p.q)
    assert decode(p, path, plan, out=out, errors=errors) is out
    torch.cuda.synchronize()
    assert errors.item() == 32


def test_one_plan_serves_every_batch_up_to_max_batch_and_every_layer(cuda):
    """A plan for 8 sequences runs batches of 8, 3 and 1, over several layers' caches in turn."""
    layers = [random_problem(50 + i, batch=8, head_dim=128, page_size=16, max_len=700, device=cuda)
              for i in range(3)]
    plan = layers[0].plan(max_batch=8)
    assert plan.max_batch == 8 and plan.config_name.startswith("D128 ")
    for batch in (8, 3, 1):
        for p in layers:
            p.q, p.block_table, p.seq_lens = p.q[:batch], p.block_table[:batch], p.seq_lens[:batch]
            out, lse, errors = run(p, "planned", plan)
            torch.cuda.synchronize()
            assert errors.item() == 0
            assert_matches_reference(out, lse, p.reference(), p.seq_lens)


@pytest.mark.parametrize("path", PATHS)
def test_decode_in_a_cuda_graph_follows_lengths_and_scales(cuda, path):
    p = random_problem(51, batch=4, head_dim=128, page_size=16, max_len=1000, device=cuda, lengths=[1000] * 4)
    plan = p.plan() if path == "planned" else None  # made before the capture: it asks the device
    out = torch.empty_like(p.q)
    lse = torch.empty(p.q.shape[:2], device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    lens = torch.zeros(4, dtype=torch.int32, device=cuda)
    k_scale = torch.tensor(p.k_scale, device=cuda)
    v_scale = torch.tensor(p.v_scale, device=cuda)
    p.seq_lens = lens
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the plain path's first call of this shape happens inside the capture
        decode(p, path, plan, k_scale=k_scale, v_scale=v_scale, out=out, lse=lse, errors=errors)
    steps = [([1, 17, 400, 999], 1.0), ([0, 600, 128, 1000], 0.5), ([300, 300, 0, 5], 3.0)]
    for step, (lengths, factor) in enumerate(steps):
        lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        k_scale.fill_(p.k_scale * factor)
        v_scale.fill_(p.v_scale / factor)
        out.fill_(math.nan)
        lse.fill_(math.nan)
        errors.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert errors.item() == 0, f"replay {step}"
        want = p.reference(seq_lens=lens, k_scale=p.k_scale * factor, v_scale=p.v_scale / factor)
        assert_matches_reference(out, lse, want, lens)


@pytest.mark.parametrize("path", PATHS)
def test_decode_under_torch_compile_matches_eager(cuda, path):
    p = random_problem(61, batch=3, head_dim=64, page_size=16, max_len=500, device=cuda)
    plan = p.plan()

    def attention(q, k_cache, v_cache, block_table, seq_lens):
        if path == "plain":
            out = vxqa_torch.decode(q * 0.5, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype="fp8_e5m2",
                                    k_scale=p.k_scale, v_scale=p.v_scale)
        else:
            out = plan.run(q * 0.5, k_cache, v_cache, block_table, seq_lens, k_scale=p.k_scale, v_scale=p.v_scale)
        return out + 1

    compiled = torch.compile(attention, fullgraph=True, dynamic=True)
    got = compiled(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens)
    want = attention(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-3)  # the same kernels; only the fused ops may round apart


def test_opcheck_on_cuda_tensors(cuda):
    p = random_problem(71, batch=2, head_dim=64, page_size=16, max_len=200, device=cuda)
    out = torch.empty_like(p.q)
    lse = torch.empty(p.q.shape[:2], device=cuda)
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)
    v_scale = torch.tensor(p.v_scale, device=cuda)
    torch.library.opcheck(torch.ops.vxqa.decode_out.default,
                          (p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, "fp8_e5m2", 0.125, p.k_scale,
                           p.v_scale, None, v_scale, 0, out, lse, errors))
    plan = p.plan()
    torch.library.opcheck(torch.ops.vxqa.decode_planned.default,
                          (plan.ints, plan.workspace, p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens,
                           "fp8_e5m2", None, p.k_scale, p.v_scale, None, v_scale, out, lse, errors))


# ---- what a planned call does not do ----

def test_a_planned_call_allocates_nothing(cuda):
    p = random_problem(72, batch=4, head_dim=128, page_size=16, max_len=2000, device=cuda)
    plan = p.plan()
    out, lse, errors = run(p, "planned", plan)  # warm
    torch.cuda.synchronize()

    def allocations(path):
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        decode(p, path, plan, out=out, lse=lse, errors=errors)
        return torch.cuda.memory_stats()["allocation.all.allocated"] - before

    assert allocations("plain") >= 1  # the control: the slow path takes a workspace every call
    assert allocations("planned") == 0


DEVICE_QUERIES = ("cudaGetDeviceProperties", "cudaDeviceGetAttribute", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
                  "cudaFuncGetAttributes")


def test_a_planned_call_asks_the_device_nothing(cuda):
    """The CUDA runtime calls of one call, as the profiler records them: the slow path asks
    the device for its SMs and occupancy every call; a planned call only launches."""
    p = random_problem(73, batch=4, head_dim=128, page_size=16, max_len=2000, device=cuda)
    plan = p.plan()
    out = torch.empty_like(p.q)
    decode(p, "plain", out=out)
    decode(p, "planned", plan, out=out)
    torch.cuda.synchronize()

    def runtime_calls(path):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            decode(p, path, plan, out=out)
            torch.cuda.synchronize()
        return [e.name for e in prof.events()]

    plain = runtime_calls("plain")
    if not any(q in name for name in plain for q in DEVICE_QUERIES):
        pytest.skip(f"this profiler does not record the device queries (the slow path shows none of {DEVICE_QUERIES})")
    planned = runtime_calls("planned")
    assert not [name for name in planned if any(q in name for q in DEVICE_QUERIES)], planned
    assert any("cudaLaunchKernel" in name for name in planned), planned


# ---- refusals ----

LIBRARY_CASES = [  # (what is wrong, the field vxqa names, keyword arguments)
    ("softmax_scale 0", "softmax_scale", dict(softmax_scale=0.0)),
    ("k_scale negative", "k_scale", dict(k_scale=-1.0)),
    ("v_scale NaN", "v_scale", dict(v_scale=math.nan)),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("what,field,kw", LIBRARY_CASES, ids=[c[0] for c in LIBRARY_CASES])
def test_library_checks_name_the_field(cuda, path, what, field, kw):
    p = random_problem(81, batch=2, head_dim=64, page_size=16, max_len=100, device=cuda)
    with pytest.raises(ValueError, match=rf"^{field}: "):
        decode(p, path, **kw)


@pytest.mark.parametrize("path", PATHS)
def test_unaligned_q_and_unsupported_head_dim_name_the_argument(cuda, path):
    p = random_problem(82, batch=2, head_dim=64, page_size=16, max_len=100, device=cuda)
    plan = p.plan()
    flat = torch.zeros(p.q.numel() + 1, dtype=torch.half, device=cuda)
    p.q = flat[1:].view(p.q.shape)
    with pytest.raises(ValueError, match=r"^q: must be 16-byte aligned"):
        decode(p, path, plan)
    p.q = torch.randn(2, 8, 96, device=cuda).half()
    p.k_cache = p.v_cache = torch.zeros(p.k_cache.shape[:3] + (96,), dtype=torch.uint8, device=cuda)
    with pytest.raises(ValueError, match=r"^q: head_dim 96 is not supported"):
        decode(p, path, plan)


def test_a_forged_or_foreign_plan_is_refused(cuda):
    p = random_problem(84, batch=2, head_dim=128, page_size=16, max_len=300, device=cuda)
    plan = p.plan()
    forged = list(plan.ints)
    field = vxqa_torch.PLAN_FIELDS.index
    forged[field("chunk_tokens")] = 17  # no Config runs 17-token chunks
    forged[field("num_chunks")] = -(-plan.max_context // 17)  # (the plan's arithmetic holds: read_plan checks it)
    with pytest.raises(ValueError, match=r"^plan\.chunk_tokens: "):  # vxqa's validate, against the Config
        decode(p, "planned", vxqa_torch.DecodePlan.from_ints(forged, plan.workspace, p.kv_cache_dtype))
    forged = list(plan.ints)
    forged[field("num_chunks")] += 1
    with pytest.raises(ValueError, match=r"^plan\.num_chunks: "):
        decode(p, "planned", vxqa_torch.DecodePlan.from_ints(forged, plan.workspace, p.kv_cache_dtype))
    other = random_problem(85, batch=2, head_dim=64, page_size=16, max_len=300, device=cuda)
    with pytest.raises(ValueError, match=r"^q: head_dim 128 differs from the plan's 64"):
        decode(p, "planned", other.plan())
    with pytest.raises(ValueError, match=r"^workspace: "):
        decode(p, "planned", vxqa_torch.DecodePlan.from_ints(plan.ints, plan.workspace[: plan.workspace_bytes // 2],
                                                             p.kv_cache_dtype))
    if torch.cuda.device_count() < 2:
        return
    with torch.cuda.device(1):
        foreign = vxqa_torch.DecodePlan(num_q_heads=8, num_kv_heads=2, head_dim=128, page_size=16, max_batch=2,
                                        max_context=304, kv_cache_dtype="fp8_e5m2")
    ws = torch.empty(foreign.workspace_bytes, dtype=torch.uint8, device=cuda)
    with pytest.raises(ValueError, match=r"^q: is on cuda:0, the plan was made for cuda:1"):
        decode(p, "planned", vxqa_torch.DecodePlan.from_ints(foreign.ints, ws, p.kv_cache_dtype))


def test_tensors_on_another_device_are_named(cuda):
    p = random_problem(83, batch=2, head_dim=64, page_size=16, max_len=100, device=cuda)
    with pytest.raises(ValueError, match=r"^block_table: must be a CUDA tensor"):
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table.cpu(), p.seq_lens, kv_cache_dtype="fp8_e5m2")
    with pytest.raises(ValueError, match=r"^k_scale: must be a CUDA tensor"):
        vxqa_torch.decode(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, kv_cache_dtype="fp8_e5m2",
                          k_scale=torch.tensor(1.0))
    plan = p.plan()
    with pytest.raises(ValueError, match=r"^workspace: must be a CUDA tensor"):
        decode(p, "planned", vxqa_torch.DecodePlan.from_ints(plan.ints, plan.workspace.cpu(), p.kv_cache_dtype))
