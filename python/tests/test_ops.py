"""What needs no GPU: the ops' registration and schemas, their fake kernels (meta tensors,
FakeTensorMode, torch.compile with dynamic shapes), torch.library.opcheck on meta tensors,
and the argument checks, each raising ValueError that names the argument.

Every argument case runs on CPU tensors (the C++ checks, python/csrc) and on meta tensors
(the Python fake kernels, vxqa_torch/_fake.py), so the two must agree message for message;
where there is a GPU, on CUDA tensors too. The attention variants' arguments (sliding_window,
logit_softcap, sinks) are cases of both ops, and against a plan's variant and window; the
plan's chunk arithmetic (plan_span) is mirrored by the fake kernels. Multi-token queries
(q_indptr, max_q_len: q, out and lse of a row a query token, the batch the block table's) are
cases of both ops too, from a valid multi-token call, and against a plan's max_q_len. The
cache's format: every kv_cache_dtype string against every cache dtype (KV_CACHE_DTYPE_TABLE),
through the fake kernels' mapping, every tensor op on CPU and meta tensors (an accepted pair is
the table's format: a plan of it runs the call, a plan of another format refuses it) and
plan_decode, each refusal word for word; a bf16 cache ("auto" with bfloat16 tensors) takes
bfloat16 q only: fp16 q is refused by every decode op and plan_decode, word for word."""
import math

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._subclasses.fake_tensor import FakeTensorMode

import vxqa_torch
from vxqa_torch import PLAN_FIELDS
from vxqa_torch._fake import plan_num_chunks, plan_span

B, HKV, G, D, P, PAGES, MAX_PAGES, T = 2, 2, 3, 64, 16, 10, 4, 5
QT = 5  # a multi-token call's query rows (tokens 3 and 2 of its 2 sequences)


def decode_args(device):
    """A valid decode call's arguments on `device` (contents are irrelevant here)."""
    def t(*shape, dtype):
        return torch.zeros(shape, dtype=dtype, device=device)
    return dict(q=t(B, HKV * G, D, dtype=torch.half), k_cache=t(PAGES, P, HKV, D, dtype=torch.float8_e5m2),
                v_cache=t(PAGES, P, HKV, D, dtype=torch.float8_e5m2), block_table=t(B, MAX_PAGES, dtype=torch.int32),
                seq_lens=t(B, dtype=torch.int32), out=t(B, HKV * G, D, dtype=torch.half),
                lse=t(B, HKV * G, dtype=torch.float), errors=t(1, dtype=torch.int32))


def multi_args(device):
    """A valid multi-token decode call's arguments: QT query rows, q_indptr [B + 1]."""
    a = decode_args(device)
    a.update(q=a["q"].new_zeros(QT, HKV * G, D), out=a["out"].new_zeros(QT, HKV * G, D),
             lse=a["lse"].new_zeros(QT, HKV * G), q_indptr=torch.tensor([0, 3, 5], dtype=torch.int32, device=device))
    return a


def append_args(device):
    def t(*shape, dtype):
        return torch.zeros(shape, dtype=dtype, device=device)
    return dict(key=t(T, HKV, D, dtype=torch.bfloat16), value=t(T, HKV, D, dtype=torch.bfloat16),
                slot_mapping=t(T, dtype=torch.long), k_cache=t(PAGES, P, HKV, D, dtype=torch.float8_e5m2),
                v_cache=t(PAGES, P, HKV, D, dtype=torch.float8_e5m2), errors=t(1, dtype=torch.int32))


def fake_plan(device, *, max_batch=4, head_dim=D, workspace_bytes=4096, kv_cache_dtype="auto", **fields):
    """A plan as plan_decode would make it for decode_args' shape (plan_decode itself needs a
    GPU), with its workspace; `fields` overrides any of PLAN_FIELDS. num_chunks, unless
    given, is make_decode_plan's: the chunks that cover plan_span(max_context, max_window,
    max_q_len)."""
    ints = dict(tag=vxqa_torch._fake.PLAN_TAG, device=0, head_dim=head_dim, cache_type=vxqa_torch._fake.E5M2,
                qo_type=vxqa_torch._fake.FP16_Q, page_size=P, num_kv_heads=HKV, group_size=G, config=0, variant=0,
                max_batch=max_batch, max_context=MAX_PAGES * P, max_window=0, max_q_len=1, chunk_tokens=64,
                workspace_bytes=workspace_bytes)
    ints.update(fields)
    if "num_chunks" not in ints:
        ints["num_chunks"] = plan_num_chunks(ints["max_context"], ints["max_window"], ints["chunk_tokens"],
                                             ints["max_q_len"])
    workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=device)
    return vxqa_torch.DecodePlan.from_ints([ints[f] for f in PLAN_FIELDS], workspace, kv_cache_dtype)


def planned_args(device):
    a = decode_args(device)
    a["plan"] = fake_plan(device)
    return a


def planned_multi_args(device):
    """multi_args on a plan for up to 4 query tokens a sequence."""
    a = multi_args(device)
    a["plan"] = fake_plan(device, max_q_len=4, variant=7)
    return a


def call_decode(a, **kw):
    a = dict(a)
    return vxqa_torch.decode(a.pop("q"), a.pop("k_cache"), a.pop("v_cache"), a.pop("block_table"),
                             a.pop("seq_lens"), **a, **kw)


def call_planned(a, **kw):
    a = dict(a)
    a.pop("max_context", None)
    kv_cache_dtype = a.pop("kv_cache_dtype", None)
    plan = a.pop("plan")
    if kv_cache_dtype is not None:
        plan.kv_cache_dtype = kv_cache_dtype
    return plan.run(a.pop("q"), a.pop("k_cache"), a.pop("v_cache"), a.pop("block_table"), a.pop("seq_lens"), **a,
                    **kw)


def sinks_like(a, *shape, dtype=torch.float32):
    """A sinks tensor on the call's device: [num_q_heads] fp32 unless told otherwise."""
    return torch.zeros(shape or (HKV * G,), dtype=dtype, device=a["q"].device)


def call_append(a, **kw):
    a = dict(a)
    vxqa_torch.append_kv(a.pop("key"), a.pop("value"), a.pop("slot_mapping"), a.pop("k_cache"),
                         a.pop("v_cache"), **a, **kw)


def strided_like(x):
    """x's shape with the last dimension not contiguous."""
    return torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)[..., ::2]


def other_strides(x):
    """x's shape and dtype, rows contiguous, other strides than x's."""
    return torch.zeros(*x.shape[:-1], x.shape[-1] + 16, dtype=x.dtype, device=x.device)[..., : x.shape[-1]]


def caches(a, dtype, dim=None):
    """Both caches of `dtype` (and head dim `dim`)."""
    shape = a["k_cache"].shape[:3] + (dim or a["k_cache"].shape[3],)
    a.update(k_cache=torch.zeros(shape, dtype=dtype, device=a["k_cache"].device))
    a.update(v_cache=torch.zeros_like(a["k_cache"]))


def bf16_q(a):
    """A decode call's q and out in bfloat16 (what a bf16 cache takes), a plan's too."""
    a.update(q=a["q"].bfloat16(), out=a["out"].bfloat16())
    if "plan" in a:
        ints = dict(zip(PLAN_FIELDS, a["plan"].ints), qo_type=vxqa_torch._fake.BF16_Q)
        a["plan"].ints = [ints[f] for f in PLAN_FIELDS]


# (what is wrong, the argument named, a regex of the refusal's reason, how to make it wrong)
CACHE_DTYPE_CASES = [
    ("uint8 cache with kv_cache_dtype auto", "k_cache", r"uint8 cache holds fp8 codes of an unstated format "
     r"\(E5M2 or E4M3; vLLM's \"fp8\" means E4M3\).*pass kv_cache_dtype=\"fp8_e5m2\" \(E5M2\) or \"fp8\" / "
     r"\"fp8_e4m3\" \(E4M3\)", lambda a: caches(a, torch.uint8)),
    ("kv_cache_dtype fp8 on a float8_e5m2 cache", "k_cache", r"dtype Float8_e5m2 holds E5M2 codes, but kv_cache_dtype "
     r"\"fp8\" means E4M3 \(for this cache pass kv_cache_dtype \"auto\" or \"fp8_e5m2\"\)$",
     lambda a: a.update(kv_cache_dtype="fp8")),
    ("kv_cache_dtype fp8_e5m2 on a float8_e4m3fn cache", "k_cache", r"dtype Float8_e4m3fn holds E4M3 codes, but "
     r"kv_cache_dtype \"fp8_e5m2\" means E5M2 \(for this cache pass kv_cache_dtype \"auto\", \"fp8\" or "
     r"\"fp8_e4m3\"\)$", lambda a: (caches(a, torch.float8_e4m3fn), a.update(kv_cache_dtype="fp8_e5m2"))),
    ("kv_cache_dtype unknown", "kv_cache_dtype", r"\"e5m2\" is not one of \"auto\" .*\"fp8_e5m2\", \"fp8\" or "
     r"\"fp8_e4m3\" \(E4M3\)$", lambda a: a.update(kv_cache_dtype="e5m2")),
    ("fp8_e5m2 names an fp16 cache", "k_cache", r"dtype Half does not hold kv_cache_dtype \"fp8_e5m2\"",
     lambda a: (caches(a, torch.float16), a.update(kv_cache_dtype="fp8_e5m2"))),
    ("fp8_e4m3 names a bf16 cache", "k_cache", r"dtype BFloat16 does not hold kv_cache_dtype \"fp8_e4m3\" \(Byte or "
     r"Float8_e4m3fn\)$", lambda a: (caches(a, torch.bfloat16), a.update(kv_cache_dtype="fp8_e4m3"))),
]

# A bf16 cache runs on the bf16 MMA, which takes bf16 q only (the calls' q is fp16).
BF16_Q_CASES = [
    ("fp16 q with a bf16 cache", "q", r"dtype Half with a bf16 cache \(k_cache BFloat16\): a bf16 cache takes "
     r"BFloat16 q and out only$", lambda a: caches(a, torch.bfloat16)),
]

DECODE_CASES = CACHE_DTYPE_CASES + BF16_Q_CASES + [
    ("q float32", "q", r"dtype Float is not supported", lambda a: a.update(q=a["q"].float())),
    ("q float8", "q", r"dtype Float8_e5m2 is not supported", lambda a: a.update(q=a["q"].to(torch.float8_e5m2))),
    ("q 2-D", "q", r"\(3 dims\)", lambda a: a.update(q=a["q"][0])),
    ("q rows strided", "q", r"last dimension must be contiguous", lambda a: a.update(q=strided_like(a["q"]))),
    ("q heads not a multiple of KV heads", "q", r"not a multiple of the cache's 2 KV heads",
     lambda a: a.update(q=a["q"][:, :5], out=a["out"][:, :5])),
    ("zero KV heads", "q", r"6 query heads are not a multiple of the cache's 0 KV heads",
     lambda a: a.update(k_cache=a["k_cache"][:, :, :0], v_cache=a["v_cache"][:, :, :0])),
    ("q head dim", "q", r"the cache's head_dim", lambda a: a.update(q=a["q"][..., :32], out=a["out"][..., :32])),
    ("head dim 96", "q", r"head_dim 96 is not supported \(64, 128, 256 or 512\)",
     lambda a: (caches(a, torch.float8_e5m2, 96), a.update(q=a["q"].new_zeros(B, HKV * G, 96),
                                                           out=a["out"].new_zeros(B, HKV * G, 96)))),
    ("k_cache float32", "k_cache", r"dtype Float is not supported", lambda a: caches(a, torch.float32)),
    ("k_cache 3-D", "k_cache", r"\(4 dims\)", lambda a: a.update(k_cache=a["k_cache"][0], v_cache=a["v_cache"][0])),
    ("v_cache dtype", "v_cache", r"dtype Byte differs from k_cache's Float8_e5m2",
     lambda a: a.update(v_cache=a["v_cache"].view(torch.uint8))),
    ("v_cache shape", "v_cache", r"shape .* differs from k_cache's", lambda a: a.update(v_cache=a["v_cache"][:-1])),
    ("v_cache strides", "v_cache", r"one set of cache strides",
     lambda a: a.update(v_cache=other_strides(a["v_cache"]))),
    ("block_table int64", "block_table", r"dtype Long is not supported",
     lambda a: a.update(block_table=a["block_table"].long())),
    ("block_table batch", "block_table", r"q's batch", lambda a: a.update(block_table=a["block_table"][:1])),
    ("block_table rows strided", "block_table", r"last dimension must be contiguous",
     lambda a: a.update(block_table=strided_like(a["block_table"]))),
    ("seq_lens int64", "seq_lens", r"dtype Long is not supported",
     lambda a: a.update(seq_lens=a["seq_lens"].long())),
    ("seq_lens batch", "seq_lens", r"q's batch", lambda a: a.update(seq_lens=a["seq_lens"][:1])),
    ("seq_lens strided", "seq_lens", r"must be contiguous",
     lambda a: a.update(seq_lens=a["seq_lens"].new_zeros(2 * B)[::2])),
    ("out dtype", "out", r"dtype Float differs from q's", lambda a: a.update(out=a["out"].float())),
    ("out float16 for bfloat16 q", "out", r"differs from q's BFloat16", lambda a: a.update(q=a["q"].bfloat16())),
    ("out shape", "out", r"shape .* differs from q's", lambda a: a.update(out=a["out"][:1])),
    ("lse dtype", "lse", r"dtype Half is not supported", lambda a: a.update(lse=a["lse"].half())),
    ("lse shape", "lse", r"must be \[batch, num_q_heads\] = \[2, 6\]", lambda a: a.update(lse=a["lse"][:, :1])),
    ("errors int64", "errors", r"dtype Long is not supported", lambda a: a.update(errors=a["errors"].long())),
    ("errors two words", "errors", r"one int32 word",
     lambda a: a.update(errors=torch.zeros_like(a["errors"].repeat(2)))),
    ("k_scale float64 tensor", "k_scale", r"dtype Double is not supported",
     lambda a: a.update(k_scale=a["lse"].new_ones((), dtype=torch.float64))),
    ("v_scale two elements", "v_scale", r"one float32 element", lambda a: a.update(v_scale=a["lse"].new_ones(2))),
    # the attention variant's values (both ops, before any plan check)
    ("sliding_window negative", "sliding_window", r"-1 must be >= 0 \(0: the whole context; W > 0: the last W keys\)",
     lambda a: a.update(sliding_window=-1)),
    ("sliding_window past INT_MAX", "sliding_window", r"2147483648 does not fit in an int",
     lambda a: a.update(sliding_window=2**31)),
    ("logit_softcap negative", "logit_softcap", r"-1 must be finite and >= 0 \(0: off\)",
     lambda a: a.update(logit_softcap=-1.0)),
    ("logit_softcap NaN", "logit_softcap", r"nan must be finite and >= 0", lambda a: a.update(logit_softcap=math.nan)),
    ("logit_softcap inf", "logit_softcap", r"inf must be finite and >= 0", lambda a: a.update(logit_softcap=math.inf)),
    ("logit_softcap past fp32's range", "logit_softcap", r"1e\+39 is past fp32's range",
     lambda a: a.update(logit_softcap=1e39)),
    ("logit_softcap whose log2(e) multiple overflows fp32", "logit_softcap",
     r"3e\+38 is past fp32's range \(logit_softcap \* log2\(e\) must be finite in fp32\)",
     lambda a: a.update(logit_softcap=3e38)),
    ("logit_softcap below fp32's smallest", "logit_softcap", r"1e-50 rounds to 0 in fp32, which would turn the "
     r"soft-cap off", lambda a: a.update(logit_softcap=1e-50)),
    ("sinks float16", "sinks", r"dtype Half is not supported \(Float\)",
     lambda a: a.update(sinks=sinks_like(a, dtype=torch.half))),
    ("sinks float64", "sinks", r"dtype Double is not supported \(Float\)",
     lambda a: a.update(sinks=sinks_like(a, dtype=torch.float64))),
    ("sinks 2-D", "sinks", r"must be \[num_q_heads\] = \[6\], got shape \[2, 3\]",
     lambda a: a.update(sinks=sinks_like(a, HKV, G))),
    ("sinks one per KV head", "sinks", r"must be \[num_q_heads\] = \[6\], got shape \[2\]",
     lambda a: a.update(sinks=sinks_like(a, HKV))),
    ("sinks strided", "sinks", r"must be contiguous, got strides \[2\]",
     lambda a: a.update(sinks=sinks_like(a, 2 * HKV * G)[::2])),
]

# One token a sequence (no q_indptr): max_q_len at most 1.
SINGLE_TOKEN_CASES = [
    ("max_q_len 2 without q_indptr", "max_q_len", r"2 query tokens a sequence need q_indptr \(the rows of each "
     r"sequence's tokens\); without it row b of q is sequence b's one token", lambda a: a.update(max_q_len=2)),
    ("max_q_len 17 without q_indptr", "max_q_len", r"17 must be in 0\.\.16", lambda a: a.update(max_q_len=17)),
]

PLAIN_DECODE_CASES = [
    ("max_context past the table", "max_context", r"block_table\.size\(1\) \* page_size",
     lambda a: a.update(max_context=MAX_PAGES * P + 1)),
    ("page size 0, max_context 0 (the table's capacity)", "max_context",
     r"0 must be in 1..block_table\.size\(1\) \* page_size \(0\)",
     lambda a: a.update(k_cache=a["k_cache"][:, :0], v_cache=a["v_cache"][:, :0], max_context=0)),
]

PLAN_CASES = [  # decode_planned: the tensors against the plan's shape
    ("plan not from plan_decode", "plan", r"not made by torch.ops.vxqa.plan_decode",
     lambda a: a.update(plan=vxqa_torch.DecodePlan.from_ints([1, 2, 3], a["plan"].workspace))),
    ("plan with a negative field", "plan", r"negative field", lambda a: a.update(plan=fake_plan(
        a["q"].device, config=-1))),
    ("plan with a field past INT_MAX", "plan", r"2147483648 does not fit in an int", lambda a: a.update(
        plan=fake_plan(a["q"].device, max_context=2**31))),
    ("plan for head dim 128", "q", r"head_dim 64 differs from the plan's 128 \(a DecodePlan serves one model shape",
     lambda a: a.update(plan=fake_plan(a["q"].device, head_dim=128))),
    ("plan for an fp16 cache", "k_cache", r"an e5m2 cache, the plan was made for fp16",
     lambda a: a.update(plan=fake_plan(a["q"].device, cache_type=vxqa_torch._fake.FP16))),
    ("plan for an e4m3 cache", "k_cache", r"an e5m2 cache, the plan was made for e4m3 \(a DecodePlan serves one "
     r"model shape", lambda a: a.update(plan=fake_plan(a["q"].device, cache_type=vxqa_torch._fake.E4M3))),
    ("plan for an e5m2 cache, an e4m3 one given", "k_cache", r"an e4m3 cache, the plan was made for e5m2",
     lambda a: (caches(a, torch.uint8), a.update(kv_cache_dtype="fp8"))),
    ("plan with an unknown cache type", "plan", r"cache type 5 is not e5m2, e4m3, fp16 or bf16$",
     lambda a: a.update(plan=fake_plan(a["q"].device, cache_type=5))),
    ("plan for a bf16 cache", "k_cache", r"an e5m2 cache, the plan was made for bf16 \(a DecodePlan serves one "
     r"model shape", lambda a: a.update(plan=fake_plan(a["q"].device, cache_type=vxqa_torch._fake.BF16,
                                                        qo_type=vxqa_torch._fake.BF16_Q))),
    ("plan for an e5m2 cache (bf16 q), a bf16 one given", "k_cache", r"a bf16 cache, the plan was made for e5m2 "
     r"\(a DecodePlan serves one model shape", lambda a: (caches(a, torch.bfloat16), bf16_q(a))),
    ("plan for bf16 q", "q", r"dtype Half differs from the plan's BFloat16",
     lambda a: a.update(plan=fake_plan(a["q"].device, qo_type=vxqa_torch._fake.BF16_Q))),
    ("plan for page 32", "k_cache", r"page_size 16 differs from the plan's 32",
     lambda a: a.update(plan=fake_plan(a["q"].device, page_size=32))),
    ("plan for 4 KV heads", "k_cache", r"2 KV heads differ from the plan's 4",
     lambda a: a.update(plan=fake_plan(a["q"].device, num_kv_heads=4))),
    ("plan for group 2", "q", r"6 query heads differ from the plan's 4",
     lambda a: a.update(plan=fake_plan(a["q"].device, group_size=2))),
    ("batch above max_batch", "q", r"batch 2 is above the plan's max_batch 1",
     lambda a: a.update(plan=fake_plan(a["q"].device, max_batch=1))),
    ("block table shorter than max_context", "block_table", r"4 pages of 16 tokens hold less than the plan's "
     r"max_context 65", lambda a: a.update(plan=fake_plan(a["q"].device, max_context=65))),
    ("workspace too small", "workspace", r"4095 bytes, the plan needs 4096",
     lambda a: a["plan"].__setattr__("workspace", a["plan"].workspace[:-1])),
    ("workspace int32", "workspace", r"dtype Int is not supported",
     lambda a: a["plan"].__setattr__("workspace", a["plan"].workspace.view(torch.int32))),
    # the plan's variant and chunk arithmetic (read_plan)
    ("plan with unknown variant bits", "plan.variant", r"8 has bits that are not vxqa::VariantFlag values",
     lambda a: a.update(plan=fake_plan(a["q"].device, variant=8))),
    ("plan with max_window but no window bit", "plan.max_window", r"32 is set, but the plan's variant has no "
     r"sliding window", lambda a: a.update(plan=fake_plan(a["q"].device, variant=6, max_window=32))),
    ("plan with chunk_tokens 0", "plan.chunk_tokens", r"0 must be >= 1",
     lambda a: a.update(plan=fake_plan(a["q"].device, chunk_tokens=0, num_chunks=0))),
    ("plan with a chunk count off", "plan.num_chunks", r"2 does not match the 1 chunks of 64 tokens that cover the "
     r"plan's span of 64 keys \(max_context, or max_window \+ max_q_len \+ 14\)",
     lambda a: a.update(plan=fake_plan(a["q"].device, num_chunks=2))),
    ("plan whose chunks cover max_context, not its window", "plan.num_chunks", r"4 does not match the 3 chunks of 16 "
     r"tokens that cover the plan's span of 47 keys", lambda a: a.update(
         plan=fake_plan(a["q"].device, variant=1, max_window=32, chunk_tokens=16, num_chunks=4))),
    # a run's variant against the plan's
    ("window on a plan without one", "sliding_window", r"128 given to a plan made without a window: make the plan "
     r"with DecodePlan\(\.\.\., sliding_window=W\)", lambda a: a.update(sliding_window=128)),
    ("window above the plan's", "sliding_window", r"33 is outside 1\.\.32, the windows of this plan "
     r"\(DecodePlan\(sliding_window=32\): its chunks cover no more keys$", lambda a: a.update(
         plan=fake_plan(a["q"].device, variant=1, max_window=32), sliding_window=33)),
    ("no window on a plan for windows", "sliding_window", r"0 is outside 1\.\.32, .*; layers of full attention need a "
     r"plan without sliding_window", lambda a: a.update(plan=fake_plan(a["q"].device, variant=7, max_window=32))),
    ("soft-cap on a plan without one", "logit_softcap", r"30 given to a plan made without a soft-cap: make the plan "
     r"with DecodePlan\(\.\.\., logit_softcap=True\)", lambda a: a.update(logit_softcap=30.0)),
    ("soft-cap on a plan for a window and sinks", "logit_softcap", r"0\.5 given to a plan made without a soft-cap",
     lambda a: a.update(plan=fake_plan(a["q"].device, variant=5, max_window=32), sliding_window=16,
                        sinks=sinks_like(a), logit_softcap=0.5)),
    ("sinks on a plan without them", "sinks", r"given to a plan made without sinks: make the plan with "
     r"DecodePlan\(\.\.\., sinks=True\)", lambda a: a.update(sinks=sinks_like(a))),
    ("sinks on a plan for a soft-cap", "sinks", r"given to a plan made without sinks",
     lambda a: a.update(plan=fake_plan(a["q"].device, variant=2), logit_softcap=30.0, sinks=sinks_like(a))),
    # the plan's max_q_len (read_plan), and plans of older layouts
    ("plan with max_q_len 0", "plan.max_q_len", r"0 is outside 1\.\.16$",
     lambda a: a.update(plan=fake_plan(a["q"].device, max_q_len=0, num_chunks=1))),
    ("plan with max_q_len 17", "plan.max_q_len", r"17 is outside 1\.\.16$",
     lambda a: a.update(plan=fake_plan(a["q"].device, max_q_len=17))),
    ("plan whose chunks leave out the tokens' earlier windows", "plan.num_chunks", r"3 does not match the 4 chunks "
     r"of 16 tokens that cover the plan's span of 50 keys \(max_context, or max_window \+ max_q_len \+ 14\)",
     lambda a: a.update(plan=fake_plan(a["q"].device, variant=1, max_window=32, max_q_len=4, chunk_tokens=16,
                                       num_chunks=3), sliding_window=32)),
    ("plan of layout 2 (before max_q_len)", "plan", r"made by an older vxqa_torch \(plan layout 2; this one reads "
     r"layout 3, which adds max_q_len\): make the plan again with vxqa_torch\.DecodePlan",
     lambda a: a.update(plan=old_plan(a, 0x7678716102, 16))),
    ("plan of layout 1 (before the variants)", "plan", r"made by an older vxqa_torch \(plan layout 1;",
     lambda a: a.update(plan=old_plan(a, 0x7678716101, 14))),
]


def old_plan(a, tag, fields):
    """A plan of an older layout: its tag, `fields` ints."""
    return vxqa_torch.DecodePlan.from_ints([tag] + [1] * (fields - 1), a["plan"].workspace)


# The query tokens' arguments: from a valid multi-token call (multi_args), both ops.
MULTI_CASES = BF16_Q_CASES + [
    ("q_indptr int64", "q_indptr", r"dtype Long is not supported \(Int\)",
     lambda a: a.update(q_indptr=a["q_indptr"].long())),
    ("q_indptr 2-D", "q_indptr", r"must be \[batch \+ 1\] = \[3\] \(batch = block_table\.size\(0\)\), got shape "
     r"\[1, 3\]", lambda a: a.update(q_indptr=a["q_indptr"][None])),
    ("q_indptr of batch offsets (vLLM's query_start_loc has batch + 1)", "q_indptr", r"must be \[batch \+ 1\] = "
     r"\[3\] \(batch = block_table\.size\(0\)\), got shape \[2\]", lambda a: a.update(q_indptr=a["q_indptr"][1:])),
    ("q_indptr strided", "q_indptr", r"must be contiguous, got strides \[2\]",
     lambda a: a.update(q_indptr=a["q_indptr"].repeat_interleave(2)[::2])),
    ("q_indptr float32", "q_indptr", r"dtype Float is not supported",
     lambda a: a.update(q_indptr=a["q_indptr"].float())),
    ("max_q_len 17", "max_q_len", r"17 must be in 0\.\.16 \(the most query tokens of a sequence; 0: the default\)",
     lambda a: a.update(max_q_len=17)),
    ("max_q_len negative", "max_q_len", r"-1 must be in 0\.\.16", lambda a: a.update(max_q_len=-1)),
    ("q 2-D", "q", r"must be \[num_tokens, num_q_heads, head_dim\] \(3 dims\)", lambda a: a.update(q=a["q"][0])),
    ("seq_lens of q's rows", "seq_lens", r"size\(0\) is 5, must be 2 \(block_table's batch\)",
     lambda a: a.update(seq_lens=a["seq_lens"].new_zeros(QT))),
    ("out of a row a sequence", "out", r"shape \[2, 6, 64\] differs from q's \[5, 6, 64\]",
     lambda a: a.update(out=a["out"][:B])),
    ("lse of a row a sequence", "lse", r"must be \[num_tokens, num_q_heads\] = \[5, 6\], got shape \[2, 6\]",
     lambda a: a.update(lse=a["lse"][:B])),
    ("q heads not a multiple of KV heads", "q", r"5 query heads are not a multiple of the cache's 2 KV heads",
     lambda a: a.update(q=a["q"][:, :5], out=a["out"][:, :5])),
]

# decode (eager) only: a plan's own head dim is checked first.
EAGER_MULTI_CASES = [
    ("q_indptr at head dim 512", "q_indptr", r"head_dim 512 takes one query token a sequence and no q_indptr "
     r"\(multi-token queries stop at head_dim 256\)",
     lambda a: (caches(a, torch.float8_e5m2, 512), a.update(q=a["q"].new_zeros(QT, HKV * G, 512),
                                                            out=a["out"].new_zeros(QT, HKV * G, 512)))),
]

# decode_planned: the query tokens against the plan's max_q_len (from planned_multi_args).
PLAN_MULTI_CASES = [
    ("q_indptr on a plan for one token a sequence", "q_indptr", r"given to a plan made for one query token a "
     r"sequence: make the plan with DecodePlan\(\.\.\., max_q_len=N\), N the most query tokens of a sequence its runs "
     r"pass", lambda a: a.update(plan=fake_plan(a["q"].device))),
    ("max_q_len above the plan's", "max_q_len", r"5 is above the plan's 4 \(DecodePlan\(max_q_len=4\): its workspace "
     r"holds no more rows\)", lambda a: a.update(max_q_len=5)),
    ("batch above max_batch (the block table's)", "block_table", r"batch 2 is above the plan's max_batch 1",
     lambda a: a.update(plan=fake_plan(a["q"].device, max_q_len=4, max_batch=1))),
]

APPEND_CASES = CACHE_DTYPE_CASES + [
    ("key float32", "key", r"dtype Float is not supported",
     lambda a: a.update(key=a["key"].float(), value=a["value"].float())),
    ("key 2-D", "key", r"\(3 dims\)", lambda a: a.update(key=a["key"][0], value=a["value"][0])),
    ("key rows strided", "key", r"last dimension must be contiguous",
     lambda a: a.update(key=strided_like(a["key"]))),
    ("value shape", "value", r"differs from key's", lambda a: a.update(value=a["value"][:-1])),
    ("value dtype", "value", r"dtype Half differs from key's", lambda a: a.update(value=a["value"].half())),
    ("slot_mapping int32", "slot_mapping", r"dtype Int is not supported",
     lambda a: a.update(slot_mapping=a["slot_mapping"].int())),
    ("slot_mapping longer than key", "slot_mapping", r"6 tokens, more than key's 5 rows \(num_tokens = "
     r"slot_mapping.size\(0\) must be <= key.size\(0\)", lambda a: a.update(slot_mapping=a["slot_mapping"].new_zeros(
         T + 1))),
    ("k_cache float32", "k_cache", r"dtype Float is not supported \(Half, BFloat16, Float8_e5m2 or Float8_e4m3fn",
     lambda a: caches(a, torch.float32)),
    ("v_cache strides", "v_cache", r"one set of cache strides",
     lambda a: a.update(v_cache=other_strides(a["v_cache"]))),
    ("key heads", "key", r"the cache's num_kv_heads",
     lambda a: a.update(key=a["key"][:, :1], value=a["value"][:, :1])),
    ("key head dim", "key", r"the cache's head_dim",
     lambda a: a.update(key=a["key"][..., :32], value=a["value"][..., :32])),
    ("key head dim 12", "key", r"head_dim 12 must be a positive multiple of 8",
     lambda a: (caches(a, torch.float8_e5m2, 12), a.update(key=a["key"][..., :12], value=a["value"][..., :12]))),
    ("errors int16", "errors", r"dtype Short is not supported", lambda a: a.update(errors=a["errors"].short())),
    ("k_scale float16 tensor", "k_scale", r"dtype Half is not supported",
     lambda a: a.update(k_scale=a["errors"].new_ones((), dtype=torch.half))),
]


def devices():
    """cpu: the C++ checks; meta: the fake kernels; cuda: the C++ checks on GPU tensors."""
    return ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])


OPS = {"decode": (decode_args, call_decode), "decode_planned": (planned_args, call_planned),
       "append_kv": (append_args, call_append), "decode multi-token": (multi_args, call_decode),
       "decode_planned multi-token": (planned_multi_args, call_planned)}
CASES = ([("decode", *c) for c in DECODE_CASES + PLAIN_DECODE_CASES + SINGLE_TOKEN_CASES]
         + [("decode_planned", *c) for c in DECODE_CASES + PLAN_CASES + SINGLE_TOKEN_CASES]
         + [("append_kv", *c) for c in APPEND_CASES]
         + [("decode multi-token", *c) for c in MULTI_CASES + EAGER_MULTI_CASES]
         + [("decode_planned multi-token", *c) for c in MULTI_CASES + PLAN_MULTI_CASES])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op,what,field,reason,spoil", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_each_op_names_the_bad_argument(device, op, what, field, reason, spoil):
    make_args, call = OPS[op]
    a = make_args(device)
    if device != "cuda":
        cpu_refusal(call, a)  # valid before the spoiling: the case's refusal is the spoiling's
    spoil(a)
    with pytest.raises(ValueError, match=rf"^{field}: .*{reason}"):
        call(a)


@pytest.mark.parametrize("op,what,field,reason,spoil", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_cpu_and_meta_refuse_word_for_word(op, what, field, reason, spoil):
    """The C++ checks (CPU tensors) and the fake kernels (meta tensors) give the same message."""
    make_args, call = OPS[op]
    messages = []
    for device in ("cpu", "meta"):
        a = make_args(device)
        spoil(a)
        with pytest.raises(ValueError) as refusal:
            call(a)
        messages.append(str(refusal.value))
    assert messages[0] == messages[1]


def cpu_refusal(call, a):
    """Runs the call on CPU or meta tensors: on meta it must pass, on CPU every check but the
    device's must pass, so it fails naming the first tensor as not on the GPU."""
    if next(iter(a.values())).device.type == "meta":
        call(a)
    else:
        with pytest.raises(ValueError, match=r"^(q|key): must be a CUDA tensor"):
            call(a)


# Accepted: cpu_refusal shows that every check passed. (op, what, how to make it so)
ACCEPTED = [
    ("decode", "uint8 cache with kv_cache_dtype fp8_e5m2",
     lambda a: (caches(a, torch.uint8), a.update(kv_cache_dtype="fp8_e5m2"))),
    ("decode", "float8_e5m2 cache with kv_cache_dtype fp8_e5m2", lambda a: a.update(kv_cache_dtype="fp8_e5m2")),
    ("decode", "fp16 cache with kv_cache_dtype auto", lambda a: caches(a, torch.float16)),
    ("decode", "uint8 cache with kv_cache_dtype fp8 (vLLM's E4M3)",
     lambda a: (caches(a, torch.uint8), a.update(kv_cache_dtype="fp8"))),
    ("decode", "float8_e4m3fn cache with kv_cache_dtype fp8_e4m3",
     lambda a: (caches(a, torch.float8_e4m3fn), a.update(kv_cache_dtype="fp8_e4m3"))),
    ("decode_planned", "an E4M3 cache on a plan for e4m3", lambda a: (caches(a, torch.float8_e4m3fn), a.update(
        plan=fake_plan(a["q"].device, cache_type=vxqa_torch._fake.E4M3)))),
    ("decode", "bf16 cache with kv_cache_dtype auto, bf16 q", lambda a: (caches(a, torch.bfloat16), bf16_q(a))),
    ("decode_planned", "a bf16 cache on a plan for bf16, bf16 q", lambda a: (caches(a, torch.bfloat16), a.update(
        plan=fake_plan(a["q"].device, cache_type=vxqa_torch._fake.BF16)), bf16_q(a))),
    ("decode multi-token", "a bf16 cache, bf16 q", lambda a: (caches(a, torch.bfloat16), bf16_q(a))),
    ("decode_planned multi-token", "a bf16 cache on a plan for bf16, bf16 q, every variant", lambda a: (
        caches(a, torch.bfloat16), a.update(plan=fake_plan(a["q"].device, cache_type=vxqa_torch._fake.BF16,
                                                           max_q_len=4, variant=7, max_window=32),
                                            sliding_window=32, logit_softcap=30.0, sinks=sinks_like(a)), bf16_q(a))),
    ("decode multi-token", "an E4M3 cache", lambda a: (caches(a, torch.uint8), a.update(kv_cache_dtype="fp8"))),
    ("decode", "head dim 256", lambda a: (caches(a, torch.float16, 256), a.update(
        q=a["q"].new_zeros(B, HKV * G, 256), out=a["out"].new_zeros(B, HKV * G, 256)))),
    ("decode", "batch 0", lambda a: a.update(q=a["q"][:0], out=a["out"][:0], block_table=a["block_table"][:0],
                                              seq_lens=a["seq_lens"][:0], lse=a["lse"][:0])),
    ("decode_planned", "batch 0", lambda a: a.update(q=a["q"][:0], out=a["out"][:0], lse=a["lse"][:0],
                                                      block_table=a["block_table"][:0], seq_lens=a["seq_lens"][:0])),
    ("decode_planned", "batch below max_batch", lambda a: a.update(
        q=a["q"][:1], out=a["out"][:1], lse=a["lse"][:1], block_table=a["block_table"][:1],
        seq_lens=a["seq_lens"][:1])),
    ("decode", "every variant: a window shorter than a page, a soft-cap, sinks",
     lambda a: a.update(sliding_window=5, logit_softcap=30.0, sinks=sinks_like(a))),
    ("decode", "a window longer than the block table", lambda a: a.update(sliding_window=10**6)),
    ("decode", "vLLM's None for no window and no soft-cap", lambda a: a.update(sliding_window=None,
                                                                              logit_softcap=None)),
    ("decode", "sinks of one query head", lambda a: a.update(
        q=a["q"][:, :1], out=a["out"][:, :1], lse=a["lse"].new_zeros(B, 1), sinks=sinks_like(a, 1),
        k_cache=a["k_cache"][:, :, :1], v_cache=a["v_cache"][:, :, :1])),
    ("decode_planned", "every variant within the plan's: the largest window, a soft-cap, sinks",
     lambda a: a.update(plan=fake_plan(a["q"].device, variant=7, max_window=32), sliding_window=32,
                        logit_softcap=50.0, sinks=sinks_like(a))),
    ("decode_planned", "window 1 on a plan for windows", lambda a: a.update(
        plan=fake_plan(a["q"].device, variant=1, max_window=32), sliding_window=1)),
    ("decode_planned", "a plan for windows longer than max_context (its chunks cover max_context)",
     lambda a: a.update(plan=fake_plan(a["q"].device, variant=1, max_window=1000), sliding_window=1000)),
    ("decode_planned", "any window, or none, on a plan with the window bit and max_window 0 (plan_decode's)",
     lambda a: (a.update(plan=fake_plan(a["q"].device, variant=1), sliding_window=10**6), cpu_refusal(
         call_planned, a), a.update(sliding_window=0))),
    ("decode_planned", "no soft-cap and no sinks on a plan for them (off at run time)",
     lambda a: a.update(plan=fake_plan(a["q"].device, variant=6))),
    ("decode multi-token", "ragged query tokens (3 and 2), the default max_q_len", lambda a: None),
    ("decode multi-token", "max_q_len 16, the most", lambda a: a.update(max_q_len=16)),
    ("decode multi-token", "max_q_len 1 with q_indptr (vLLM's metadata of a batch of decodes)",
     lambda a: a.update(max_q_len=1)),
    ("decode multi-token", "no query rows (every sequence 0 tokens)", lambda a: a.update(
        q=a["q"][:0], out=a["out"][:0], lse=a["lse"][:0], q_indptr=a["q_indptr"].new_zeros(B + 1))),
    ("decode multi-token", "batch 0 (q_indptr [1])", lambda a: a.update(
        q=a["q"][:0], out=a["out"][:0], lse=a["lse"][:0], q_indptr=a["q_indptr"][:1],
        block_table=a["block_table"][:0], seq_lens=a["seq_lens"][:0])),
    ("decode multi-token", "every variant with the tokens", lambda a: a.update(
        sliding_window=5, logit_softcap=30.0, sinks=sinks_like(a))),
    ("decode multi-token", "a block table of more sequences than q has rows",
     lambda a: a.update(q=a["q"][:1], out=a["out"][:1], lse=a["lse"][:1])),
    ("decode_planned multi-token", "max_q_len equal to the plan's, every variant", lambda a: a.update(
        max_q_len=4, sliding_window=32, logit_softcap=30.0, sinks=sinks_like(a), plan=fake_plan(
            a["q"].device, max_q_len=4, variant=7, max_window=32))),
    ("decode_planned multi-token", "a multi-token plan running one token a sequence (no q_indptr)",
     lambda a: a.update(q=a["q"][:B], out=a["out"][:B], lse=a["lse"][:B], q_indptr=None)),
    ("decode_planned multi-token", "batch below max_batch", lambda a: a.update(
        block_table=a["block_table"][:1], seq_lens=a["seq_lens"][:1], q_indptr=a["q_indptr"][:2])),
    ("decode_planned multi-token", "a plan for 16 tokens and a window (its chunks cover them)", lambda a: a.update(
        plan=fake_plan(a["q"].device, max_q_len=16, variant=1, max_window=32, chunk_tokens=16), sliding_window=1)),
    ("append_kv", "slot_mapping shorter than key (vLLM's padded key/value)",
     lambda a: a.update(slot_mapping=a["slot_mapping"][:2])),
    ("append_kv", "no tokens", lambda a: a.update(slot_mapping=a["slot_mapping"][:0])),
    ("append_kv", "uint8 cache with kv_cache_dtype fp8_e5m2",
     lambda a: (caches(a, torch.uint8), a.update(kv_cache_dtype="fp8_e5m2"))),
    ("append_kv", "uint8 cache with kv_cache_dtype fp8 (E4M3)",
     lambda a: (caches(a, torch.uint8), a.update(kv_cache_dtype="fp8"))),
    ("append_kv", "float8_e4m3fn cache with kv_cache_dtype auto", lambda a: caches(a, torch.float8_e4m3fn)),
    ("append_kv", "bf16 cache with kv_cache_dtype auto, bf16 rows", lambda a: caches(a, torch.bfloat16)),
    ("append_kv", "bf16 cache, fp16 rows", lambda a: (caches(a, torch.bfloat16), a.update(
        key=a["key"].half(), value=a["value"].half()))),
    ("decode", "one KV head: v_cache's stride there differs from k_cache's", lambda a: one_kv_head_odd_stride(a)),
    ("append_kv", "one KV head: v_cache's stride there differs from k_cache's",
     lambda a: (one_kv_head_odd_stride(a), a.update(key=a["key"][:, :1], value=a["value"][:, :1]))),
]


def one_kv_head_odd_stride(a):
    """Caches of one KV head whose head strides differ (a size-1 dimension: never used)."""
    k = a["k_cache"][:, :, :1]
    v = a["v_cache"][:, :, :1]
    a.update(k_cache=k, v_cache=v.as_strided(v.shape, (v.stride(0), v.stride(1), 3, 1)))


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("op,what,change", ACCEPTED, ids=[f"{c[0]}: {c[1]}" for c in ACCEPTED])
def test_accepted_arguments(device, op, what, change):
    make_args, call = OPS[op]
    a = make_args(device)
    change(a)
    cpu_refusal(call, a)


# ---- kv_cache_dtype: every string against every cache dtype ----

CACHE_TENSOR_DTYPES = {"uint8": torch.uint8, "float8_e5m2": torch.float8_e5m2, "float8_e4m3fn": torch.float8_e4m3fn,
                       "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
UNSTATED = ('{name}: a uint8 cache holds fp8 codes of an unstated format (E5M2 or E4M3; vLLM\'s "fp8" means E4M3), '
            'which kv_cache_dtype "auto" cannot tell: pass kv_cache_dtype="fp8_e5m2" (E5M2) or "fp8" / "fp8_e4m3" '
            '(E4M3), or the cache as a torch.float8_e5m2 or torch.float8_e4m3fn view')
FLOAT32 = ('{name}: dtype Float is not supported (Half, BFloat16, Float8_e5m2 or Float8_e4m3fn, or Byte with '
           'kv_cache_dtype "fp8_e5m2", "fp8" or "fp8_e4m3")')
E4M3_UNDER_E5M2 = ('{name}: dtype Float8_e4m3fn holds E4M3 codes, but kv_cache_dtype "fp8_e5m2" means E5M2 (for this '
                   'cache pass kv_cache_dtype "auto", "fp8" or "fp8_e4m3")')


def e5m2_under(kv):
    return (f'{{name}}: dtype Float8_e5m2 holds E5M2 codes, but kv_cache_dtype "{kv}" means E4M3 (for this cache '
            f'pass kv_cache_dtype "auto" or "fp8_e5m2")')


def not_held(dtype, kv, own):
    return f'{{name}}: dtype {dtype} does not hold kv_cache_dtype "{kv}" (Byte or {own})'


def e4m3_rows(kv):
    """The table's rows of a string that names E4M3."""
    return {(kv, "uint8"): "e4m3", (kv, "float8_e4m3fn"): "e4m3", (kv, "float8_e5m2"): e5m2_under(kv),
            (kv, "float16"): not_held("Half", kv, "Float8_e4m3fn"),
            (kv, "bfloat16"): not_held("BFloat16", kv, "Float8_e4m3fn"),
            (kv, "float32"): not_held("Float", kv, "Float8_e4m3fn")}


def unknown(kv):
    return (f'kv_cache_dtype: "{kv}" is not one of "auto" (the cache\'s dtype says), "fp8_e5m2", "fp8" or "fp8_e4m3" '
            f'(E4M3)')


# (kv_cache_dtype, the caches' dtype): the format vxqa runs ("e5m2", "e4m3", "fp16", "bf16"), or
# the refusal word for word ({name}: the cache's argument, k_cache or plan_decode's cache_dtype).
KV_CACHE_DTYPE_TABLE = {
    # "auto": the dtype says (bfloat16: vLLM's "auto" for a bf16 model); a uint8 cache could be
    # either fp8 format
    ("auto", "uint8"): UNSTATED, ("auto", "float8_e5m2"): "e5m2", ("auto", "float8_e4m3fn"): "e4m3",
    ("auto", "float16"): "fp16", ("auto", "bfloat16"): "bf16", ("auto", "float32"): FLOAT32,
    # "fp8_e5m2": uint8 or float8_e5m2
    ("fp8_e5m2", "uint8"): "e5m2", ("fp8_e5m2", "float8_e5m2"): "e5m2", ("fp8_e5m2", "float8_e4m3fn"): E4M3_UNDER_E5M2,
    ("fp8_e5m2", "float16"): not_held("Half", "fp8_e5m2", "Float8_e5m2"),
    ("fp8_e5m2", "bfloat16"): not_held("BFloat16", "fp8_e5m2", "Float8_e5m2"),
    ("fp8_e5m2", "float32"): not_held("Float", "fp8_e5m2", "Float8_e5m2"),
    # "fp8" (vLLM's default fp8) and "fp8_e4m3": E4M3, uint8 or float8_e4m3fn
    **e4m3_rows("fp8"), **e4m3_rows("fp8_e4m3"),
    # strings vxqa does not take, whatever the dtype
    ("fp8_inc", "uint8"): unknown("fp8_inc"), ("e4m3", "float8_e4m3fn"): unknown("e4m3"),
    ("bfloat16", "bfloat16"): unknown("bfloat16"), ("", "float16"): unknown(""),
}
KV_TABLE_CASES = [(kv, dtype, want) for (kv, dtype), want in KV_CACHE_DTYPE_TABLE.items()]
KV_TABLE_IDS = [f"{kv or '(empty)'} {dtype}" for kv, dtype, _ in KV_TABLE_CASES]
FORMAT_CODES = {"e5m2": vxqa_torch._fake.E5M2, "e4m3": vxqa_torch._fake.E4M3, "fp16": vxqa_torch._fake.FP16,
                "bf16": vxqa_torch._fake.BF16}
OTHER_FORMAT = {"e5m2": "e4m3", "e4m3": "e5m2", "fp16": "e5m2", "bf16": "fp16"}


def test_the_table_covers_every_string_and_dtype():
    """Every string the ops take, with every dtype a cache could come in."""
    assert {(kv, dtype) for kv in vxqa_torch.KV_CACHE_DTYPES for dtype in CACHE_TENSOR_DTYPES} <= set(
        KV_CACHE_DTYPE_TABLE)


@pytest.mark.parametrize("kv_cache_dtype,dtype,want", KV_TABLE_CASES, ids=KV_TABLE_IDS)
def test_fake_cache_format_maps_each_string_and_dtype(kv_cache_dtype, dtype, want):
    """The fake kernels' mapping (the one torch.compile traces) on its own."""
    if want in FORMAT_CODES:
        fmt = vxqa_torch._fake.cache_format(kv_cache_dtype, CACHE_TENSOR_DTYPES[dtype], "k_cache")
        assert fmt == FORMAT_CODES[want]
    else:
        with pytest.raises(ValueError) as refusal:
            vxqa_torch._fake.cache_format(kv_cache_dtype, CACHE_TENSOR_DTYPES[dtype], "k_cache")
        assert str(refusal.value) == want.format(name="k_cache")


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("op", ["decode", "decode_planned", "append_kv"])
@pytest.mark.parametrize("kv_cache_dtype,dtype,want", KV_TABLE_CASES, ids=KV_TABLE_IDS)
def test_each_op_maps_each_string_and_dtype(device, op, kv_cache_dtype, dtype, want):
    """Every op, through the C++ checks (cpu) and the fake kernels (meta): an accepted pair
    passes every check, and against a plan it is the table's format (a plan of that format
    runs it, one of another format names both); a refused pair raises the table's message.
    A bf16 cache's decode calls take bf16 q (test_a_bf16_cache_refuses_fp16_q: not fp16)."""
    make_args, call = OPS[op]
    a = make_args(device)
    caches(a, CACHE_TENSOR_DTYPES[dtype])
    a["kv_cache_dtype"] = kv_cache_dtype
    if want not in FORMAT_CODES:
        with pytest.raises(ValueError) as refusal:
            call(a)
        assert str(refusal.value) == want.format(name="k_cache")
        return
    if op == "decode_planned":
        a["plan"] = fake_plan(device, cache_type=FORMAT_CODES[want])
    if want == "bf16" and op != "append_kv":
        bf16_q(a)
    cpu_refusal(call, a)
    if op == "decode_planned":
        other = OTHER_FORMAT[want]
        a["plan"] = fake_plan(device, cache_type=FORMAT_CODES[other], qo_type=a["plan"].qo_type)
        article = "a" if want == "bf16" else "an"
        with pytest.raises(ValueError, match=rf"^k_cache: {article} {want} cache, the plan was made for {other} "):
            call(a)


BF16_Q_REFUSAL = "q: dtype Half with a bf16 cache (k_cache BFloat16): a bf16 cache takes BFloat16 q and out only"


@pytest.mark.parametrize("op", ["decode", "decode_planned", "decode multi-token", "decode_planned multi-token"])
def test_a_bf16_cache_refuses_fp16_q(op):
    """A bf16 cache ("auto" with bfloat16 caches) with fp16 q: the C++ op (cpu) and the fake
    kernel (meta) refuse it word for word, naming q and the cache, whatever the plan's format
    (the q check comes first); the same call with bf16 q passes every check."""
    make_args, call = OPS[op]
    for device in ("cpu", "meta"):
        for plan_format in (vxqa_torch._fake.BF16, vxqa_torch._fake.E5M2):
            a = make_args(device)
            caches(a, torch.bfloat16)
            if "plan" in a:
                a["plan"] = fake_plan(device, cache_type=plan_format, max_q_len=a["plan"].max_q_len,
                                      variant=a["plan"].variant)
            with pytest.raises(ValueError) as refusal:
                call(a)
            assert str(refusal.value) == BF16_Q_REFUSAL
        if "plan" in a:
            a["plan"] = fake_plan(device, cache_type=vxqa_torch._fake.BF16, max_q_len=a["plan"].max_q_len,
                                  variant=a["plan"].variant)
        bf16_q(a)
        cpu_refusal(call, a)


@pytest.mark.parametrize("kv_cache_dtype,dtype,want", KV_TABLE_CASES, ids=KV_TABLE_IDS)
def test_plan_decode_maps_each_string_and_dtype(kv_cache_dtype, dtype, want):
    """plan_decode (DecodePlan's op) takes the same pairs: an accepted one gets as far as the
    device (a CPU one here), a refused one names cache_dtype (or kv_cache_dtype). A bf16
    cache's plan takes bf16 q, and refuses fp16 q naming q_dtype."""
    def plan(q_dtype):
        with pytest.raises(ValueError) as refusal:
            torch.ops.vxqa.plan_decode(HKV, G, D, P, 4, 64, q_dtype, kv_cache_dtype, CACHE_TENSOR_DTYPES[dtype],
                                       torch.device("cpu"))
        return str(refusal.value)

    accepted = "device: must be a CUDA device, got cpu"
    if want == "bf16":
        assert plan(torch.bfloat16) == accepted
        assert plan(torch.half) == ("q_dtype: dtype Half with a bf16 cache (cache_dtype BFloat16): a bf16 cache takes "
                                    "BFloat16 q and out only")
        return
    assert plan(torch.half) == (accepted if want in FORMAT_CODES else want.format(name="cache_dtype"))


def test_error_bits_are_one_set():
    bits = [vxqa_torch.DECODE_ERROR_BAD_LENGTH, vxqa_torch.DECODE_ERROR_BAD_PAGE, vxqa_torch.APPEND_ERROR_BAD_SLOT,
            vxqa_torch.ERROR_BAD_K_SCALE, vxqa_torch.ERROR_BAD_V_SCALE]
    assert bits == [1, 2, 4, 8, 16]  # include/vxqa/kernel/error_bits.cuh


def test_schemas_declare_what_they_mutate():
    schemas = {name: str(getattr(torch.ops.vxqa, name).default._schema) for name in
               ("decode_out", "plan_decode", "decode_planned", "describe_plan", "append_kv")}
    assert schemas == {
        "decode_out": "vxqa::decode_out(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, "
        "Tensor seq_lens, str kv_cache_dtype, float? softmax_scale, float k_scale, float v_scale, "
        "Tensor? k_scale_tensor, Tensor? v_scale_tensor, int max_context, Tensor(a!) out, Tensor(b!)? lse, "
        "Tensor(c!)? errors, *, int sliding_window=0, float logit_softcap=0., Tensor? sinks=None, "
        "Tensor? q_indptr=None, int max_q_len=0) -> ()",
        "plan_decode": "vxqa::plan_decode(int num_kv_heads, int group_size, int head_dim, int page_size, "
        "int max_batch, int max_context, ScalarType q_dtype, str kv_cache_dtype, ScalarType cache_dtype, "
        "Device device, *, int variant=0, int max_window=0, int max_q_len=1) -> int[]",
        "decode_planned": "vxqa::decode_planned(int[] plan, Tensor(a!) workspace, Tensor q, Tensor k_cache, "
        "Tensor v_cache, Tensor block_table, Tensor seq_lens, str kv_cache_dtype, float? softmax_scale, "
        "float k_scale, float v_scale, Tensor? k_scale_tensor, Tensor? v_scale_tensor, Tensor(b!) out, "
        "Tensor(c!)? lse, Tensor(d!)? errors, *, int sliding_window=0, float logit_softcap=0., "
        "Tensor? sinks=None, Tensor? q_indptr=None, int max_q_len=0) -> ()",
        "describe_plan": "vxqa::describe_plan(int[] plan) -> str",
        "append_kv": "vxqa::append_kv(Tensor key, Tensor value, Tensor slot_mapping, Tensor(a!) k_cache, "
        "Tensor(b!) v_cache, str kv_cache_dtype, float k_scale, float v_scale, Tensor? k_scale_tensor, "
        "Tensor? v_scale_tensor, Tensor(c!)? errors) -> ()",
    }


def test_the_fake_kernels_are_pythons():
    """The C++ Meta kernels are gone: meta tensors run vxqa_torch/_fake.py's."""
    for name in ("decode_out", "decode_planned", "append_kv"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"vxqa::{name}", "Meta")
        assert torch._library.simple_registry.singleton.find(f"vxqa::{name}").fake_impl.kernel is not None


PLAN_DECODE_CASES = [  # (what is wrong, the argument named, reason, plan_decode's keyword arguments changed)
    ("a CPU device", "device", r"must be a CUDA device, got cpu", dict(device="cpu")),
    ("kv_cache_dtype fp8, on the CPU", "device", r"must be a CUDA device, got cpu", dict(kv_cache_dtype="fp8")),
    ("kv_cache_dtype fp8 with a float8_e5m2 cache", "cache_dtype", r"dtype Float8_e5m2 holds E5M2 codes, but "
     r"kv_cache_dtype \"fp8\" means E4M3", dict(kv_cache_dtype="fp8", cache_dtype=torch.float8_e5m2)),
    ("auto with a bf16 cache, fp16 q (the default)", "q_dtype", r"dtype Half with a bf16 cache \(cache_dtype "
     r"BFloat16\): a bf16 cache takes BFloat16 q and out only$",
     dict(kv_cache_dtype="auto", cache_dtype=torch.bfloat16)),
    ("auto with a bf16 cache and bf16 q, on the CPU", "device", r"must be a CUDA device, got cpu",
     dict(kv_cache_dtype="auto", cache_dtype=torch.bfloat16, q_dtype=torch.bfloat16)),
    ("fp8_e5m2 with a bf16 cache", "cache_dtype", r"dtype BFloat16 does not hold kv_cache_dtype \"fp8_e5m2\"",
     dict(cache_dtype=torch.bfloat16, q_dtype=torch.bfloat16)),
    ("auto with a uint8 cache", "cache_dtype", r"uint8 cache holds fp8 codes of an unstated format",
     dict(kv_cache_dtype="auto", cache_dtype=torch.uint8)),
    ("fp8_e5m2 with an fp16 cache", "cache_dtype", r"dtype Half does not hold kv_cache_dtype",
     dict(cache_dtype=torch.float16)),
    ("auto without cache_dtype", "cache_dtype", r"needed with kv_cache_dtype \"auto\"",
     dict(kv_cache_dtype="auto")),
    ("q float32", "q_dtype", r"Float is not supported \(Half or BFloat16\)", dict(q_dtype=torch.float32)),
    ("q heads not a multiple", "num_q_heads", r"6 is not a multiple of num_kv_heads 4", dict(num_kv_heads=4)),
    ("both heads and group", "num_q_heads", r"give num_q_heads or group_size", dict(group_size=3)),
    ("max_batch too big for an int", "max_batch", r"does not fit in an int", dict(max_batch=1 << 40)),
    ("a negative window", "sliding_window", r"-1 must be >= 0 \(0: no window; W > 0: runs pass windows of 1\.\.W\)",
     dict(sliding_window=-1)),
    ("a float window", "sliding_window", r"128\.0 is not an int", dict(sliding_window=128.0)),
    ("a window past INT_MAX", "sliding_window", r"2147483648 does not fit in an int", dict(sliding_window=2**31)),
    ("a bool window", "sliding_window", r"True is not an int", dict(sliding_window=True)),
    ("a cap given to the plan", "logit_softcap", r"DecodePlan takes True or False \(whether its runs pass "
     r"logit_softcap\), got float: the value itself goes to run\(\.\.\., logit_softcap=50\.0\)",
     dict(logit_softcap=50.0)),
    ("a sinks tensor given to the plan", "sinks", r"DecodePlan takes True or False .*got Tensor",
     dict(sinks=torch.zeros(6))),
    # (accepted: every variant, then the device is the first refusal)
    ("every variant, on the CPU", "device", r"must be a CUDA device, got cpu",
     dict(sliding_window=128, logit_softcap=True, sinks=True)),
    ("vLLM's None for no window, on the CPU", "device", r"must be a CUDA device", dict(sliding_window=None)),
    ("max_q_len 0", "max_q_len", r"0 is outside 1\.\.16 \(the most query tokens of a sequence in a run\)",
     dict(max_q_len=0)),
    ("max_q_len 17", "max_q_len", r"17 is outside 1\.\.16", dict(max_q_len=17)),
    ("a float max_q_len", "max_q_len", r"4\.0 is not an int \(the most query tokens of a sequence its runs pass, "
     r"1\.\.16\)", dict(max_q_len=4.0)),
    ("a bool max_q_len", "max_q_len", r"True is not an int", dict(max_q_len=True)),
    ("max_q_len 16 with every variant, on the CPU", "device", r"must be a CUDA device",
     dict(max_q_len=16, sliding_window=128, logit_softcap=True, sinks=True)),
]


@pytest.mark.parametrize("what,field,reason,kw", PLAN_DECODE_CASES, ids=[c[0] for c in PLAN_DECODE_CASES])
def test_decode_plan_names_the_bad_argument(what, field, reason, kw):
    args = dict(num_q_heads=HKV * G, num_kv_heads=HKV, head_dim=D, page_size=P, max_batch=4, max_context=64,
                kv_cache_dtype="fp8_e5m2", device="cpu")
    args.update(kw)
    with pytest.raises(ValueError, match=rf"^{field}: .*{reason}"):
        vxqa_torch.DecodePlan(**args)


PLAN_OP_CASES = [  # torch.ops.vxqa.plan_decode's own variant arguments (checked before the device)
    ("unknown variant bits", "variant", r"8 has bits that are not vxqa::VariantFlag values \(1 sliding window, 2 "
     r"logit soft-cap, 4 sinks\)", dict(variant=8)),
    ("a negative variant", "variant", r"-1 has bits", dict(variant=-1)),
    ("a negative max_window", "max_window", r"-1 must be >= 0", dict(variant=1, max_window=-1)),
    ("max_window without the window bit", "max_window", r"32 is set, but variant has no sliding window \(bit 1\)",
     dict(variant=6, max_window=32)),
    ("max_window past INT_MAX", "max_window", r"2147483648 does not fit in an int", dict(variant=1, max_window=2**31)),
    ("every variant: accepted, then the device", "device", r"must be a CUDA device", dict(variant=7, max_window=32)),
    ("max_q_len 0", "max_q_len", r"0 is outside 1\.\.16", dict(max_q_len=0)),
    ("max_q_len 17", "max_q_len", r"17 is outside 1\.\.16", dict(max_q_len=17)),
    ("max_q_len 16: accepted, then the device", "device", r"must be a CUDA device", dict(max_q_len=16)),
]


@pytest.mark.parametrize("what,field,reason,kw", PLAN_OP_CASES, ids=[c[0] for c in PLAN_OP_CASES])
def test_plan_decode_op_names_the_bad_variant(what, field, reason, kw):
    with pytest.raises(ValueError, match=rf"^{field}: .*{reason}"):
        torch.ops.vxqa.plan_decode(HKV, G, D, P, 4, 64, torch.half, "fp8_e5m2", torch.uint8, torch.device("cpu"), **kw)


def test_plan_span_mirrors_split_plan():
    """vxqa::plan_span: max_context, or a window's max_window + 15 keys where that is less."""
    assert plan_span(1000, 0) == 1000
    assert plan_span(1000, 100) == 115
    assert plan_span(115, 100) == 115 and plan_span(116, 100) == 115
    assert plan_span(100, 100) == 100 and plan_span(50, 100) == 50
    assert plan_span(8192, 1) == 16
    assert plan_num_chunks(8192, 128, 64) == 3 and plan_num_chunks(8192, 0, 64) == 128
    assert plan_num_chunks(100, 0, 64) == 2 and plan_num_chunks(64, 0, 64) == 1
    # With max_q_len tokens the first token's window starts max_q_len - 1 keys earlier.
    assert plan_span(1000, 100, 4) == 118 and plan_span(1000, 100, 1) == 115
    assert plan_span(118, 100, 4) == 118 and plan_span(119, 100, 4) == 118 and plan_span(117, 100, 4) == 117
    assert plan_span(1000, 0, 16) == 1000  # no window: max_context whatever the tokens
    assert plan_num_chunks(8192, 98, 64, 16) == 2 and plan_num_chunks(8192, 99, 64, 16) == 3  # 128, 129 keys
    assert plan_num_chunks(8192, 113, 64) == 2 and plan_num_chunks(8192, 113, 64, 16) == 3  # 128, 143 keys


def test_a_plan_reads_its_variant():
    plan = fake_plan("meta", variant=7, max_window=32)
    assert (plan.sliding_window, plan.logit_softcap, plan.sinks) == (32, True, True)
    assert (plan.variant, plan.max_window, plan.num_chunks) == (7, 32, 1)
    plan = fake_plan("meta", variant=2)
    assert (plan.sliding_window, plan.logit_softcap, plan.sinks) == (0, True, False)
    assert "variant=2" in repr(plan) and "max_window=0" in repr(plan)


def test_a_plan_reads_its_max_q_len():
    plan = fake_plan("meta", max_q_len=4, variant=1, max_window=32, chunk_tokens=16)
    assert (plan.max_q_len, plan.num_chunks) == (4, 4)  # 32 + 3 + 15 keys
    assert "max_q_len=4" in repr(plan)
    assert vxqa_torch.PLAN_FIELDS.index("max_q_len") == vxqa_torch.PLAN_FIELDS.index("max_window") + 1
    assert vxqa_torch._fake.PLAN_TAG & 0xff == 3 and len(vxqa_torch.PLAN_FIELDS) == 17


def test_fake_tensors_give_multi_token_shapes():
    """With q_indptr, out [num_tokens, Hq, D] (q's shape) and lse [num_tokens, Hq]: the batch
    is the block table's; a lse of a row a sequence is refused."""
    with FakeTensorMode():
        a = multi_args("cuda")
        out = call_decode({k: v for k, v in a.items() if k != "out"})
        assert out.shape == (QT, HKV * G, D) and out.dtype == torch.half and out.device.type == "cuda"
        plan = fake_plan("cuda", max_q_len=4)
        out = call_planned({**{k: v for k, v in a.items() if k != "out"}, "plan": plan}, max_q_len=4)
        assert out.shape == (QT, HKV * G, D)
        with pytest.raises(ValueError, match=r"^lse: must be \[num_tokens, num_q_heads\] = \[5, 6\]"):
            call_decode({**a, "lse": a["lse"][:B]})
        with pytest.raises(ValueError, match=r"^q_indptr: must be \[batch \+ 1\] = \[3\]"):
            call_decode({**a, "q_indptr": a["q_indptr"][:B]})


def test_fake_tensors_give_out_shape_dtype_device_and_check_arguments():
    with FakeTensorMode():
        a = decode_args("cuda")
        out = call_decode({k: v for k, v in a.items() if k != "out"})
        assert out.shape == a["q"].shape and out.dtype == torch.half and out.device.type == "cuda"
        call_append(append_args("cuda"))
        out = call_decode({k: v for k, v in a.items() if k != "out"}, sliding_window=7, logit_softcap=20.0,
                          sinks=torch.zeros(HKV * G, device="cuda"))
        assert out.shape == a["q"].shape and out.device.type == "cuda"
        with pytest.raises(ValueError, match=r"^sinks: must be \[num_q_heads\] = \[6\]"):
            call_decode(a, sinks=torch.zeros(HKV, device="cuda"))
        a["block_table"] = a["block_table"][:1]
        with pytest.raises(ValueError, match=r"^block_table: "):
            call_decode(a)


def test_opcheck_on_meta_tensors():
    a = decode_args("meta")
    scale = torch.ones((), device="meta")
    torch.library.opcheck(torch.ops.vxqa.decode_out.default,
                          (a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"], "auto", None, 1.0,
                           1.0, scale, None, 0, a["out"], a["lse"], a["errors"]))
    plan = fake_plan("meta")
    torch.library.opcheck(torch.ops.vxqa.decode_planned.default,
                          (plan.ints, plan.workspace, a["q"], a["k_cache"], a["v_cache"], a["block_table"],
                           a["seq_lens"], "auto", 0.125, 1.0, 1.0, None, scale, a["out"], a["lse"], a["errors"]))
    sinks = torch.zeros(HKV * G, device="meta")
    torch.library.opcheck(torch.ops.vxqa.decode_out.default,
                          (a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"], "auto", None, 1.0,
                           1.0, None, None, 0, a["out"], a["lse"], a["errors"]),
                          dict(sliding_window=5, logit_softcap=30.0, sinks=sinks))
    plan = fake_plan("meta", variant=7, max_window=32)
    torch.library.opcheck(torch.ops.vxqa.decode_planned.default,
                          (plan.ints, plan.workspace, a["q"], a["k_cache"], a["v_cache"], a["block_table"],
                           a["seq_lens"], "auto", None, 1.0, 1.0, None, None, a["out"], a["lse"], a["errors"]),
                          dict(sliding_window=17, logit_softcap=30.0, sinks=sinks))
    m = multi_args("meta")
    torch.library.opcheck(torch.ops.vxqa.decode_out.default,
                          (m["q"], m["k_cache"], m["v_cache"], m["block_table"], m["seq_lens"], "auto", None, 1.0,
                           1.0, None, None, 0, m["out"], m["lse"], m["errors"]),
                          dict(q_indptr=m["q_indptr"], max_q_len=3, sliding_window=5, sinks=sinks))
    plan = fake_plan("meta", variant=7, max_window=32, max_q_len=4)
    torch.library.opcheck(torch.ops.vxqa.decode_planned.default,
                          (plan.ints, plan.workspace, m["q"], m["k_cache"], m["v_cache"], m["block_table"],
                           m["seq_lens"], "auto", None, 1.0, 1.0, None, None, m["out"], m["lse"], m["errors"]),
                          dict(q_indptr=m["q_indptr"], sliding_window=17, logit_softcap=30.0, sinks=sinks))
    b = append_args("meta")
    torch.library.opcheck(torch.ops.vxqa.append_kv.default,
                          (b["key"], b["value"], b["slot_mapping"][:3], b["k_cache"].view(torch.uint8),
                           b["v_cache"].view(torch.uint8), "fp8_e5m2", 1.0, 0.5, None, scale, b["errors"]))


# ---- torch.compile: dynamic batch without recompiling, bad shapes refused while tracing ----

CHD, CG, CD, CPAGES, CMAX_PAGES = 4, 3, 64, 11, 5  # sizes no batch below equals (dynamo's duck sizing)


def meta(*shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def layer_inputs(batch, head_dim=CD, padding=1, sinks=False, dtype=torch.half, cache_dtype=torch.uint8):
    """A decode step's tensors for `batch` sequences: key/value padded by `padding` rows, as
    vLLM pads them for CUDA graphs, and slot_mapping not (and the layer's sinks); q, key and
    value of `dtype`, the caches of `cache_dtype`."""
    extra = dict(sinks=meta(CHD * CG, dtype=torch.float32)) if sinks else {}
    return dict(**extra, q=meta(batch, CHD * CG, head_dim, dtype=dtype),
                key=meta(batch + padding, CHD, head_dim, dtype=dtype),
                value=meta(batch + padding, CHD, head_dim, dtype=dtype), slots=meta(batch, dtype=torch.long),
                k_cache=meta(CPAGES, P, CHD, head_dim, dtype=cache_dtype),
                v_cache=meta(CPAGES, P, CHD, head_dim, dtype=cache_dtype),
                block_table=meta(batch, CMAX_PAGES, dtype=torch.int32), seq_lens=meta(batch, dtype=torch.int32))


def plain_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens):
    vxqa_torch.append_kv(key, value, slots, k_cache, v_cache, kv_cache_dtype="fp8_e5m2")
    return vxqa_torch.decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype="fp8_e5m2") * 2


def bf16_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens):
    """A bf16 model's layer: its bf16 caches under "auto" (the default), bf16 q."""
    vxqa_torch.append_kv(key, value, slots, k_cache, v_cache)
    return vxqa_torch.decode(q, k_cache, v_cache, block_table, seq_lens) * 2


BF16_LAYER = dict(dtype=torch.bfloat16, cache_dtype=torch.bfloat16)
META_PLAN = None


def planned_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens):
    vxqa_torch.append_kv(key, value, slots, k_cache, v_cache, kv_cache_dtype="fp8_e5m2")
    return META_PLAN.run(q, k_cache, v_cache, block_table, seq_lens) * 2


WINDOW, CAP = 24, 30.0  # the variant layers' window (shorter than the table's 80 tokens) and soft-cap


def variant_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens, sinks):
    vxqa_torch.append_kv(key, value, slots, k_cache, v_cache, kv_cache_dtype="fp8_e5m2")
    return vxqa_torch.decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype="fp8_e5m2",
                             sliding_window=WINDOW, logit_softcap=CAP, sinks=sinks) * 2


def planned_variant_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens, sinks):
    vxqa_torch.append_kv(key, value, slots, k_cache, v_cache, kv_cache_dtype="fp8_e5m2")
    return META_PLAN.run(q, k_cache, v_cache, block_table, seq_lens, sliding_window=WINDOW, logit_softcap=CAP,
                         sinks=sinks) * 2


QL = 3  # the multi-token layers' query tokens a sequence (a draft of 2 and the bonus token)


def multi_inputs(batch, head_dim=CD):
    """A speculative-decoding verification step's tensors for `batch` sequences of QL tokens
    each: q [batch * QL, ...], the new K/V rows of every token (padded by one row), q_indptr."""
    tokens = batch * QL
    return dict(q=meta(tokens, CHD * CG, head_dim, dtype=torch.half),
                key=meta(tokens + 1, CHD, head_dim, dtype=torch.half),
                value=meta(tokens + 1, CHD, head_dim, dtype=torch.half), slots=meta(tokens, dtype=torch.long),
                k_cache=meta(CPAGES, P, CHD, head_dim, dtype=torch.uint8),
                v_cache=meta(CPAGES, P, CHD, head_dim, dtype=torch.uint8),
                block_table=meta(batch, CMAX_PAGES, dtype=torch.int32), seq_lens=meta(batch, dtype=torch.int32),
                q_indptr=meta(batch + 1, dtype=torch.int32))


def multi_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens, q_indptr):
    vxqa_torch.append_kv(key, value, slots, k_cache, v_cache, kv_cache_dtype="fp8_e5m2")
    return vxqa_torch.decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype="fp8_e5m2",
                             q_indptr=q_indptr, max_q_len=QL) * 2


def planned_multi_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens, q_indptr):
    vxqa_torch.append_kv(key, value, slots, k_cache, v_cache, kv_cache_dtype="fp8_e5m2")
    return META_PLAN.run(q, k_cache, v_cache, block_table, seq_lens, q_indptr=q_indptr, sliding_window=WINDOW) * 2


def specialising_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens):
    """A control: branches on the batch, so each batch size needs a graph of its own."""
    out = plain_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens)
    return out + 1 if q.shape[0] % 2 else out


@pytest.mark.parametrize("layer,graphs", [(plain_layer, 1), (planned_layer, 1), (variant_layer, 1),
                                          (planned_variant_layer, 1), (multi_layer, 1), (planned_multi_layer, 1),
                                          (bf16_layer, 1), (specialising_layer, 2)],
                         ids=["decode", "DecodePlan.run", "decode with every variant",
                              "DecodePlan.run with every variant", "decode with q_indptr",
                              "DecodePlan.run with q_indptr and a window", "decode of a bf16 cache",
                              "control: a layer that specialises"])
def test_torch_compile_dynamic_batch_does_not_recompile(layer, graphs):
    """Batches 2, 3 and 7 (with q_indptr: 6, 9 and 21 query rows) compile one graph."""
    global META_PLAN
    variant = layer in (variant_layer, planned_variant_layer, planned_multi_layer)
    multi = layer in (multi_layer, planned_multi_layer)
    META_PLAN = fake_plan("meta", max_batch=8, num_kv_heads=CHD, max_context=CMAX_PAGES * P,
                          kv_cache_dtype="fp8_e5m2", variant=7 if variant else 0, max_window=WINDOW if variant else 0,
                          max_q_len=4 if multi else 1)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(layer, backend=counter, fullgraph=True, dynamic=True)
    frames = []
    for batch in (2, 3, 7):
        inputs = (multi_inputs(batch) if multi else
                  layer_inputs(batch, sinks=variant, **(BF16_LAYER if layer is bf16_layer else {})))
        out = compiled(**inputs)
        assert out.shape == inputs["q"].shape and out.dtype == inputs["q"].dtype
        frames.append(counter.frame_count)
    # The first call may compile more than one frame; later batch sizes must reuse them.
    assert frames[-1] - frames[0] == graphs - 1, f"frames compiled after each call: {frames}"


@pytest.mark.parametrize("layer", [plain_layer, planned_layer], ids=["decode", "DecodePlan.run"])
def test_torch_compile_refuses_head_dim_96_while_tracing(layer):
    global META_PLAN
    META_PLAN = fake_plan("meta", head_dim=96, num_kv_heads=CHD, kv_cache_dtype="fp8_e5m2")
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(layer, backend=counter, fullgraph=True, dynamic=True)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as refusal:
        compiled(**layer_inputs(2, head_dim=96))
    assert "ValueError('q: head_dim 96 is not supported (64, 128, 256 or 512)')" in str(refusal.value)
    assert counter.frame_count == 0  # no graph reached the backend: refused while tracing


@pytest.mark.parametrize("layer,max_window,sinks,message", [
    (planned_variant_layer, WINDOW - 1, CHD * CG, "ValueError('sliding_window: 24 is outside 1..23, the windows of "
     "this plan (DecodePlan(sliding_window=23): its chunks cover no more keys')"),
    (variant_layer, 0, CHD, "ValueError('sinks: must be [num_q_heads] = [12], got shape [4]')"),
    (planned_variant_layer, WINDOW, CHD, "ValueError('sinks: must be [num_q_heads] = [12], got shape [4]')"),
], ids=["DecodePlan.run: a window above the plan's", "decode: sinks per KV head", "DecodePlan.run: sinks per KV head"])
def test_torch_compile_refuses_a_bad_variant_while_tracing(layer, max_window, sinks, message):
    global META_PLAN
    META_PLAN = fake_plan("meta", max_batch=8, num_kv_heads=CHD, max_context=CMAX_PAGES * P, kv_cache_dtype="fp8_e5m2",
                          variant=7, max_window=max_window)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(layer, backend=counter, fullgraph=True, dynamic=True)
    inputs = layer_inputs(3, sinks=True)
    inputs["sinks"] = meta(sinks, dtype=torch.float32)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as refusal:
        compiled(**inputs)
    assert message in str(refusal.value)
    assert counter.frame_count == 0


def planned_max_q_len_layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens, q_indptr):
    vxqa_torch.append_kv(key, value, slots, k_cache, v_cache, kv_cache_dtype="fp8_e5m2")
    return META_PLAN.run(q, k_cache, v_cache, block_table, seq_lens, q_indptr=q_indptr, max_q_len=QL,
                         sliding_window=WINDOW) * 2


@pytest.mark.parametrize("layer,max_q_len,spoil,message", [
    (multi_layer, 4, lambda i: i.update(q_indptr=meta(3, dtype=torch.int32)),
     "ValueError('q_indptr: must be [batch + 1] = [4] (batch = block_table.size(0)), got shape [3]')"),
    (planned_max_q_len_layer, 2, lambda i: None,
     "ValueError(\"max_q_len: 3 is above the plan's 2 (DecodePlan(max_q_len=2): its workspace holds no more rows)\")"),
    (planned_multi_layer, 1, lambda i: None,
     "ValueError('q_indptr: given to a plan made for one query token a sequence"),
    (planned_multi_layer, 4, lambda i: i.update(seq_lens=meta(9, dtype=torch.int32)),
     "ValueError(\"seq_lens: size(0) is 9, must be 3 (block_table's batch); shape [9]\")"),
], ids=["decode: q_indptr of batch entries", "DecodePlan.run: max_q_len above the plan's",
        "DecodePlan.run: q_indptr on a one-token plan", "DecodePlan.run: seq_lens of q's rows"])
def test_torch_compile_refuses_bad_query_tokens_while_tracing(layer, max_q_len, spoil, message):
    global META_PLAN
    META_PLAN = fake_plan("meta", max_batch=8, num_kv_heads=CHD, max_context=CMAX_PAGES * P, kv_cache_dtype="fp8_e5m2",
                          variant=7, max_window=WINDOW, max_q_len=max_q_len)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(layer, backend=counter, fullgraph=True, dynamic=True)
    inputs = multi_inputs(3)
    spoil(inputs)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as refusal:
        compiled(**inputs)
    assert message in str(refusal.value)
    assert counter.frame_count == 0


def test_torch_compile_refuses_fp16_q_with_a_bf16_cache_while_tracing():
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(bf16_layer, backend=counter, fullgraph=True, dynamic=True)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as refusal:
        compiled(**layer_inputs(3, cache_dtype=torch.bfloat16))
    assert ("ValueError('q: dtype Half with a bf16 cache (k_cache BFloat16): a bf16 cache takes BFloat16 q and out "
            "only')") in str(refusal.value)
    assert counter.frame_count == 0


def test_torch_compile_refuses_a_slot_mapping_longer_than_key_while_tracing():
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(plain_layer, backend=counter, fullgraph=True, dynamic=True)
    inputs = layer_inputs(3, padding=0)
    inputs["slots"] = meta(4, dtype=torch.long)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as refusal:
        compiled(**inputs)
    assert "ValueError(\"slot_mapping: 4 tokens, more than key's 3 rows" in str(refusal.value)
    assert counter.frame_count == 0
