"""The ops' fake kernels: what torch.compile, FakeTensorMode and meta tensors run instead of
the CUDA kernels. Each makes the argument checks of the C++ side (python/csrc) that shapes
and dtypes can tell, with the same "name: why" ValueError, so a bad call fails while a
model is traced, not when the compiled graph first runs.

Sizes may be SymInts here (torch.compile with dynamic shapes): every condition is built with
symbolic operators and handed to torch._check_value, which records it as a guard or a
runtime assert; nothing is turned into a Python bool first, so no size is specialised
(batch and token counts stay symbolic across calls). tests/test_ops.py runs every argument
case both here (meta tensors) and through the C++ checks (CPU tensors).

The plan's chunk arithmetic is mirrored too (plan_span, read_plan's num_chunks check): keep
it in sync with include/vxqa/kernel/split_plan.cuh.

Multi-token queries (q_indptr, max_q_len): q, out and lse have a row a query token,
[num_tokens, ...], and the batch is the block table's; the fake kernels check q_indptr's
dtype, shape [batch + 1] and contiguity and max_q_len's range, and against a plan its
max_q_len. q_indptr's values are on the device: the kernel checks them.
"""
import math
import struct

import torch
from torch.fx.experimental.symbolic_shapes import sym_and, sym_or

# c10's ScalarType names, as the C++ messages print them.
_DTYPE_NAMES = {
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
    torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double",
    torch.bool: "Bool", torch.float8_e5m2: "Float8_e5m2", torch.float8_e4m3fn: "Float8_e4m3fn",
}

HEAD_DIMS = (64, 128, 256, 512)  # vxqa::DefaultDecoderConfigs
MULTI_TOKEN_MAX_HEAD_DIM = 256  # multi-token queries (q_indptr) stop here: D 512 has no such Config
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8", "fp8_e4m3")  # vLLM's strings the ops take
E5M2, FP16, E4M3, BF16 = 1, 2, 3, 4  # vxqa::KvType values (kUnset = 0)
CACHE_TYPE_NAMES = {E5M2: "e5m2", E4M3: "e4m3", FP16: "fp16", BF16: "bf16"}  # vxqa::kv_type_name
# vLLM's fp8 strings: the format each names and the float8 dtype holding it ("fp8" is vLLM's
# default fp8, E4M3); a uint8 cache holds either.
FP8_KV_CACHE_DTYPES = {"fp8_e5m2": (E5M2, torch.float8_e5m2), "fp8": (E4M3, torch.float8_e4m3fn),
                       "fp8_e4m3": (E4M3, torch.float8_e4m3fn)}
# The cache dtypes that say their own format (kv_cache_dtype "auto"; vLLM's "auto" is the
# model's dtype, float16 or bfloat16).
DTYPE_FORMATS = {torch.float16: FP16, torch.bfloat16: BF16, torch.float8_e5m2: E5M2, torch.float8_e4m3fn: E4M3}
FP16_Q, BF16_Q = 0, 1  # vxqa::ActType values

# vxqa::VariantFlag bits (include/vxqa/kernel/attention_variant.cuh): plan_decode's `variant`,
# the plan's "variant" field.
VARIANT_SLIDING_WINDOW, VARIANT_LOGIT_SOFTCAP, VARIANT_SINKS = 1, 2, 4
ALL_VARIANT_FLAGS = 7

# torch.ops.vxqa.plan_decode's ints, in order (decode_op.cpp's PlanField).
PLAN_FIELDS = ("tag", "device", "head_dim", "cache_type", "qo_type", "page_size", "num_kv_heads", "group_size",
               "config", "variant", "max_batch", "max_context", "max_window", "max_q_len", "chunk_tokens",
               "num_chunks", "workspace_bytes")
PLAN_TAG = 0x7678716103  # "vxqa", layout 3
# The tags of older layouts (1: no variant, no max_window; 2: no max_q_len), refused by name.
OLD_PLAN_TAGS = (0x7678716101, 0x7678716102)
MAX_Q_LEN = 16  # launch.h's kMaxQueryLen: the most query tokens a sequence (the default Configs' opt::MaxQueryLen)
INT_MAX = 2**31 - 1
WINDOW_CHUNK_ALIGN = 16  # vxqa::kWindowChunkAlign


def plan_span(max_context, max_window, max_q_len=1):
    """vxqa::plan_span (split_plan.cuh): the keys a step may read of one sequence, which the
    plan's chunks cover: max_context, or with a window of at most max_window keys, those and up
    to WINDOW_CHUNK_ALIGN - 1 before them (a window's chunks start 16-aligned), and with up to
    max_q_len query tokens the max_q_len - 1 keys by which the first token's window starts
    before the last's."""
    window_span = max_window + (max_q_len - 1) + WINDOW_CHUNK_ALIGN - 1
    return window_span if max_window > 0 and window_span < max_context else max_context


def plan_num_chunks(max_context, max_window, chunk_tokens, max_q_len=1):
    """The chunks of chunk_tokens a plan of (max_context, max_window, max_q_len) has
    (make_decode_plan)."""
    return -(-plan_span(max_context, max_window, max_q_len) // chunk_tokens)


def fp32(x):
    """x rounded to fp32 as static_cast<float> does (out of range: +-inf)."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


LOG2E_FP32 = fp32(1.4426950408889634)


def dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype, str(dtype))


def _n(x):
    """A size for a message: a SymInt's example value (no guard), as the C++ side prints it."""
    if isinstance(x, torch.SymInt) and x.node.has_hint():
        return str(x.node.hint)
    return str(x)


def _g(x):
    """A float for a message as C++'s %g writes it (a SymFloat by its example value)."""
    if isinstance(x, torch.SymFloat) and x.node.has_hint():
        x = x.node.hint
    return f"{x:g}" if isinstance(x, (int, float)) else str(x)


def _dims(sizes):
    return "[" + ", ".join(_n(s) for s in sizes) + "]"


def _all(conds):
    """The conjunction of conds (bools or SymBools) without a bool() of any SymBool."""
    conds = list(conds)
    return sym_and(*conds) if conds else True


def check(cond, message):
    """ValueError(message()) unless cond; cond may be a SymBool (then a guard, not a bool())."""
    torch._check_value(cond, message)


def check_dim(t, name, dim, shape):
    check(t.dim() == dim, lambda: f"{name}: must be {shape} ({dim} dims), got shape {_dims(t.shape)}")


def check_dtype(t, name, allowed):
    names = " or ".join(dtype_name(d) for d in allowed)
    check(t.dtype in allowed, lambda: f"{name}: dtype {dtype_name(t.dtype)} is not supported ({names})")


def check_size(t, name, d, want, what):
    check(t.size(d) == want,
          lambda: f"{name}: size({d}) is {_n(t.size(d))}, must be {_n(want)} ({what}); shape {_dims(t.shape)}")


def check_rows_contiguous(t, name):
    check(sym_or(t.size(-1) <= 1, t.stride(-1) == 1),
          lambda: f"{name}: the last dimension must be contiguous (stride 1), got strides {_dims(t.stride())}")


def _is_contiguous(t):
    """t.is_contiguous() as a symbolic condition: a size-1 dimension's stride is free."""
    conds, expected = [], 1
    for size, stride in reversed(list(zip(t.shape, t.stride()))):
        conds.append(sym_or(size <= 1, stride == expected))
        expected = expected * size
    return _all(conds)


def check_contiguous(t, name):
    check(_is_contiguous(t), lambda: f"{name}: must be contiguous, got strides {_dims(t.stride())}")


def check_errors(errors):
    if errors is None:
        return
    check_dtype(errors, "errors", (torch.int32,))
    check(errors.numel() == 1, lambda: f"errors: must hold one int32 word, got shape {_dims(errors.shape)}")


def check_scale_tensor(t, name):
    if t is None:
        return
    check_dtype(t, name, (torch.float32,))
    check(t.numel() == 1, lambda: f"{name}: must hold one float32 element, got shape {_dims(t.shape)}")


def check_variant(sliding_window, logit_softcap, sinks, q_heads):
    """decode_op.cpp's check_variant: the attention variant's values."""
    check(sliding_window >= 0, lambda: f"sliding_window: {_n(sliding_window)} must be >= 0 (0: the whole context; "
                                       f"W > 0: the last W keys)")
    check(sliding_window <= INT_MAX, lambda: f"sliding_window: {_n(sliding_window)} does not fit in an int")
    cap = logit_softcap
    # (one comparison pair: NaN, negatives and inf all fail it; a SymFloat makes it a guard)
    check(sym_and(cap >= 0, cap < math.inf), lambda: f"logit_softcap: {_g(cap)} must be finite and >= 0 (0: off)")
    if not isinstance(cap, torch.SymFloat):  # its fp32 value: known only for a number
        cap32 = fp32(cap)
        check(math.isfinite(fp32(cap32 * LOG2E_FP32)),
              lambda: f"logit_softcap: {_g(cap)} is past fp32's range (logit_softcap * log2(e) must be finite in fp32)")
        check(cap == 0 or cap32 > 0,
              lambda: f"logit_softcap: {_g(cap)} rounds to 0 in fp32, which would turn the soft-cap off")
    if sinks is None:
        return
    check_dtype(sinks, "sinks", (torch.float32,))
    check(sinks.dim() == 1 and sinks.size(0) == q_heads,
          lambda: f"sinks: must be [num_q_heads] = [{_n(q_heads)}], got shape {_dims(sinks.shape)}")
    check_contiguous(sinks, "sinks")


def check_queries(q_indptr, max_q_len, batch):
    """decode_op.cpp's check_queries: max_q_len 0 (the default) or 1..MAX_Q_LEN, at most 1
    without q_indptr; q_indptr int32 [batch + 1], contiguous."""
    check(sym_and(max_q_len >= 0, max_q_len <= MAX_Q_LEN),
          lambda: f"max_q_len: {_n(max_q_len)} must be in 0..{MAX_Q_LEN} (the most query tokens of a sequence; "
                  f"0: the default)")
    if q_indptr is None:
        check(max_q_len <= 1, lambda: f"max_q_len: {_n(max_q_len)} query tokens a sequence need q_indptr (the rows "
                                      f"of each sequence's tokens); without it row b of q is sequence b's one token")
        return
    check_dtype(q_indptr, "q_indptr", (torch.int32,))
    check(q_indptr.dim() == 1 and q_indptr.size(0) == batch + 1,
          lambda: f"q_indptr: must be [batch + 1] = [{_n(batch + 1)}] (batch = block_table.size(0)), got shape "
                  f"{_dims(q_indptr.shape)}")
    check_contiguous(q_indptr, "q_indptr")


def cache_format(kv_cache_dtype, dtype, name):
    """The cache's format (E5M2, E4M3, FP16 or BF16) from vLLM's kv_cache_dtype and the
    tensor's dtype; tensor_checks.h's cache_format, message for message."""
    check(kv_cache_dtype in KV_CACHE_DTYPES,
          lambda: f'kv_cache_dtype: "{kv_cache_dtype}" is not one of "auto" (the cache\'s dtype says), "fp8_e5m2", '
                  f'"fp8" or "fp8_e4m3" (E4M3)')
    if kv_cache_dtype in FP8_KV_CACHE_DTYPES:
        fmt, own = FP8_KV_CACHE_DTYPES[kv_cache_dtype]
        e5m2 = fmt == E5M2
        other = torch.float8_e4m3fn if e5m2 else torch.float8_e5m2
        check(dtype != other,
              lambda: f'{name}: dtype {dtype_name(dtype)} holds {"E4M3" if e5m2 else "E5M2"} codes, but kv_cache_dtype '
                      f'"{kv_cache_dtype}" means {"E5M2" if e5m2 else "E4M3"} (for this cache pass kv_cache_dtype '
                      + ('"auto", "fp8" or "fp8_e4m3")' if e5m2 else '"auto" or "fp8_e5m2")'))
        check(dtype in (torch.uint8, own),
              lambda: f'{name}: dtype {dtype_name(dtype)} does not hold kv_cache_dtype "{kv_cache_dtype}" '
                      f'(Byte or {dtype_name(own)})')
        return fmt
    check(dtype != torch.uint8,
          lambda: f'{name}: a uint8 cache holds fp8 codes of an unstated format (E5M2 or E4M3; vLLM\'s "fp8" means '
                  f'E4M3), which kv_cache_dtype "auto" cannot tell: pass kv_cache_dtype="fp8_e5m2" (E5M2) or "fp8" / '
                  f'"fp8_e4m3" (E4M3), or the cache as a torch.float8_e5m2 or torch.float8_e4m3fn view')
    check(dtype in DTYPE_FORMATS,
          lambda: f'{name}: dtype {dtype_name(dtype)} is not supported (Half, BFloat16, Float8_e5m2 or Float8_e4m3fn, '
                  f'or Byte with kv_cache_dtype "fp8_e5m2", "fp8" or "fp8_e4m3")')
    return DTYPE_FORMATS[dtype]


def check_q_for_cache(q_dtype, fmt):
    """tensor_checks.h's check_q_for_cache for q and k_cache: a bf16 cache runs on the bf16
    MMA, which takes q as it is, so fp16 q is refused, never converted."""
    check(fmt != BF16 or q_dtype == torch.bfloat16,
          lambda: f"q: dtype {dtype_name(q_dtype)} with a bf16 cache (k_cache BFloat16): a bf16 cache takes BFloat16 q "
                  f"and out only")


def check_cache_pair(k, v, kv_cache_dtype):
    check_dim(k, "k_cache", 4, "[num_pages, page_size, num_kv_heads, head_dim]")
    fmt = cache_format(kv_cache_dtype, k.dtype, "k_cache")
    check_rows_contiguous(k, "k_cache")
    check(v.dtype == k.dtype,
          lambda: f"v_cache: dtype {dtype_name(v.dtype)} differs from k_cache's {dtype_name(k.dtype)}")
    check(_same_shape(v, k),
          lambda: f"v_cache: shape {_dims(v.shape)} differs from k_cache's {_dims(k.shape)}")
    # A dimension of one row never uses its stride (framework views carry any there).
    check(_all(sym_or(size <= 1, a == b) for size, a, b in zip(k.shape, v.stride(), k.stride())),
          lambda: f"v_cache: strides {_dims(v.stride())} differ from k_cache's {_dims(k.stride())} "
                  f"(vxqa takes one set of cache strides)")
    return fmt


def _same_shape(a, b):
    return a.dim() == b.dim() and _all(x == y for x, y in zip(a.shape, b.shape))


def check_decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, k_scale_tensor, v_scale_tensor, out,
                 lse, errors, sliding_window=0, logit_softcap=0.0, sinks=None, q_indptr=None, max_q_len=0):
    """decode_op.cpp's check_decode. With q_indptr a row of q is a query token and the batch
    is the block table's."""
    multi = q_indptr is not None
    check_dim(q, "q", 3, "[num_tokens, num_q_heads, head_dim]" if multi else "[batch, num_q_heads, head_dim]")
    check_dtype(q, "q", (torch.float16, torch.bfloat16))
    check_rows_contiguous(q, "q")
    fmt = check_cache_pair(k_cache, v_cache, kv_cache_dtype)
    check_q_for_cache(q.dtype, fmt)
    rows, q_heads, head_dim = q.shape
    kv_heads = k_cache.size(2)
    check_size(q, "q", 2, k_cache.size(3), "the cache's head_dim")
    check(sym_or(*(head_dim == d for d in HEAD_DIMS)),
          lambda: f"q: head_dim {_n(head_dim)} is not supported (64, 128, 256 or 512)")
    check(not multi or head_dim <= MULTI_TOKEN_MAX_HEAD_DIM,
          lambda: f"q_indptr: head_dim {_n(head_dim)} takes one query token a sequence and no q_indptr "
                  f"(multi-token queries stop at head_dim {MULTI_TOKEN_MAX_HEAD_DIM})")
    # (the modulus by at least 1: with 0 KV heads the first condition fails, and no division by 0)
    check(sym_and(kv_heads >= 1, q_heads % torch.sym_max(kv_heads, 1) == 0),
          lambda: f"q: {_n(q_heads)} query heads are not a multiple of the cache's {_n(kv_heads)} KV heads")

    check_dim(block_table, "block_table", 2, "[batch, max_pages_per_seq]")
    check_dtype(block_table, "block_table", (torch.int32,))
    batch = block_table.size(0) if multi else rows
    if not multi:
        check_size(block_table, "block_table", 0, batch, "q's batch")
    check_rows_contiguous(block_table, "block_table")
    check(block_table.size(1) >= 1, lambda: "block_table: needs at least one page per sequence")
    check_dim(seq_lens, "seq_lens", 1, "[batch]")
    check_dtype(seq_lens, "seq_lens", (torch.int32,))
    check_size(seq_lens, "seq_lens", 0, batch, "block_table's batch" if multi else "q's batch")
    check_contiguous(seq_lens, "seq_lens")

    check(_same_shape(out, q), lambda: f"out: shape {_dims(out.shape)} differs from q's {_dims(q.shape)}")
    check(out.dtype == q.dtype, lambda: f"out: dtype {dtype_name(out.dtype)} differs from q's {dtype_name(q.dtype)}")
    check_rows_contiguous(out, "out")
    if lse is not None:
        check_dtype(lse, "lse", (torch.float32,))
        check(lse.dim() == 2 and sym_and(lse.size(0) == rows, lse.size(1) == q_heads),
              lambda: f"lse: must be {'[num_tokens, num_q_heads]' if multi else '[batch, num_q_heads]'} = "
                      f"[{_n(rows)}, {_n(q_heads)}], got shape {_dims(lse.shape)}")
        check_contiguous(lse, "lse")
    check_errors(errors)
    check_scale_tensor(k_scale_tensor, "k_scale")
    check_scale_tensor(v_scale_tensor, "v_scale")
    check_variant(sliding_window, logit_softcap, sinks, q_heads)
    check_queries(q_indptr, max_q_len, batch)
    return fmt


@torch.library.register_fake("vxqa::decode_out")
def _decode_out_fake(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, softmax_scale, k_scale, v_scale,
                     k_scale_tensor, v_scale_tensor, max_context, out, lse, errors, sliding_window=0,
                     logit_softcap=0.0, sinks=None, q_indptr=None, max_q_len=0):
    check_decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, k_scale_tensor, v_scale_tensor, out,
                 lse, errors, sliding_window, logit_softcap, sinks, q_indptr, max_q_len)
    table_tokens = block_table.size(1) * k_cache.size(1)
    # 0 means the table's capacity, which is itself checked (a page size of 0 makes it 0)
    check(sym_or(sym_and(max_context == 0, table_tokens >= 1), sym_and(max_context >= 1, max_context <= table_tokens)),
          lambda: f"max_context: {max_context or _n(table_tokens)} must be in 1..block_table.size(1) * page_size "
                  f"({_n(table_tokens)})")


def read_plan(plan):
    """decode_op.cpp's read_plan: the plan's fields by name, or ValueError("plan: ...")."""
    tag = plan[0] if len(plan) else 0
    check(tag not in OLD_PLAN_TAGS,
          lambda: f"plan: made by an older vxqa_torch (plan layout {tag & 0xff}; this one reads layout 3, which adds "
                  f"max_q_len): make the plan again with vxqa_torch.DecodePlan")
    check(len(plan) == len(PLAN_FIELDS) and tag == PLAN_TAG,
          lambda: f"plan: not made by torch.ops.vxqa.plan_decode ({len(plan)} ints; use vxqa_torch.DecodePlan)")
    check(all(v >= 0 for v in plan), lambda: "plan: holds a negative field: not made by plan_decode")
    fields = dict(zip(PLAN_FIELDS, plan))

    def check_int(name):  # decode_op.cpp's to_int(field, "plan")
        check(fields[name] <= INT_MAX, lambda: f"plan: {fields[name]} does not fit in an int")

    check_int("head_dim")
    check(fields["cache_type"] in CACHE_TYPE_NAMES,
          lambda: f"plan: cache type {fields['cache_type']} is not e5m2, e4m3, fp16 or bf16")
    check(fields["qo_type"] in (FP16_Q, BF16_Q), lambda: f"plan: q type {fields['qo_type']} is unknown")
    for name in ("page_size", "device", "config", "num_kv_heads", "group_size", "max_batch", "max_context",
                 "chunk_tokens", "num_chunks", "max_window", "max_q_len"):  # in read_plan's order
        check_int(name)
    check(fields["variant"] <= ALL_VARIANT_FLAGS,
          lambda: f"plan.variant: {fields['variant']} has bits that are not vxqa::VariantFlag values")
    check(fields["max_window"] == 0 or bool(fields["variant"] & VARIANT_SLIDING_WINDOW),
          lambda: f"plan.max_window: {fields['max_window']} is set, but the plan's variant has no sliding window")
    q_len = fields["max_q_len"]
    check(1 <= q_len <= MAX_Q_LEN, lambda: f"plan.max_q_len: {q_len} is outside 1..{MAX_Q_LEN}")
    chunk = fields["chunk_tokens"]
    check(chunk >= 1, lambda: f"plan.chunk_tokens: {chunk} must be >= 1")
    span = plan_span(fields["max_context"], fields["max_window"], q_len)
    chunks = plan_num_chunks(fields["max_context"], fields["max_window"], chunk, q_len)
    check(fields["num_chunks"] == chunks,
          lambda: f"plan.num_chunks: {fields['num_chunks']} does not match the {chunks} chunks of {chunk} tokens that "
                  f"cover the plan's span of {span} keys (max_context, or max_window + max_q_len + "
                  f"{WINDOW_CHUNK_ALIGN - 2})")
    return fields


def check_against_plan(pl, q, k_cache, block_table, fmt, workspace, q_indptr=None):
    """decode_op.cpp's check_against_plan."""
    remedy = " (a DecodePlan serves one model shape: make one per shape)"
    article = "a" if fmt == BF16 else "an"  # "an e5m2 cache", "a bf16 cache"
    check(fmt == pl["cache_type"], lambda: f"k_cache: {article} {CACHE_TYPE_NAMES[fmt]} cache, the plan was made for "
                                           f"{CACHE_TYPE_NAMES[pl['cache_type']]}{remedy}")
    check(q.size(2) == pl["head_dim"],
          lambda: f"q: head_dim {_n(q.size(2))} differs from the plan's {pl['head_dim']}{remedy}")
    qo = BF16_Q if q.dtype == torch.bfloat16 else FP16_Q
    check(qo == pl["qo_type"], lambda: f"q: dtype {dtype_name(q.dtype)} differs from the plan's "
                                       f"{'BFloat16' if pl['qo_type'] == BF16_Q else 'Half'}{remedy}")
    check(k_cache.size(1) == pl["page_size"],
          lambda: f"k_cache: page_size {_n(k_cache.size(1))} differs from the plan's {pl['page_size']}{remedy}")
    check(k_cache.size(2) == pl["num_kv_heads"],
          lambda: f"k_cache: {_n(k_cache.size(2))} KV heads differ from the plan's {pl['num_kv_heads']}{remedy}")
    q_heads = pl["num_kv_heads"] * pl["group_size"]
    check(q.size(1) == q_heads, lambda: f"q: {_n(q.size(1))} query heads differ from the plan's {q_heads}{remedy}")
    batch, name = (block_table.size(0), "block_table") if q_indptr is not None else (q.size(0), "q")
    check(batch <= pl["max_batch"],
          lambda: f"{name}: batch {_n(batch)} is above the plan's max_batch {pl['max_batch']}")
    check(block_table.size(1) * k_cache.size(1) >= pl["max_context"],
          lambda: f"block_table: {_n(block_table.size(1))} pages of {_n(k_cache.size(1))} tokens hold less than the plan's "
                  f"max_context {pl['max_context']}")
    check_dtype(workspace, "workspace", (torch.uint8,))
    check(workspace.dim() == 1 and _is_contiguous(workspace),
          lambda: "workspace: must be a contiguous 1-D uint8 tensor")
    check(workspace.numel() >= pl["workspace_bytes"],
          lambda: f"workspace: {_n(workspace.numel())} bytes, the plan needs {pl['workspace_bytes']}")


def check_variant_against_plan(pl, sliding_window, logit_softcap, sinks):
    """decode_op.cpp's check_variant_against_plan: a run's variant within the plan's."""
    max_window = pl["max_window"]
    if not pl["variant"] & VARIANT_SLIDING_WINDOW:
        check(sliding_window == 0,
              lambda: f"sliding_window: {_n(sliding_window)} given to a plan made without a window: make the plan "
                      f"with DecodePlan(..., sliding_window=W), W the largest window its runs pass")
    elif max_window > 0:
        check(sym_and(sliding_window >= 1, sliding_window <= max_window),
              lambda: f"sliding_window: {_n(sliding_window)} is outside 1..{max_window}, the windows of this plan "
                      f"(DecodePlan(sliding_window={max_window}): its chunks cover no more keys"
                      + ("; layers of full attention need a plan without sliding_window"
                         if _n(sliding_window) == "0" else ""))
    if not pl["variant"] & VARIANT_LOGIT_SOFTCAP:
        check(logit_softcap == 0,
              lambda: f"logit_softcap: {_g(logit_softcap)} given to a plan made without a soft-cap: make the plan "
                      f"with DecodePlan(..., logit_softcap=True)")
    if not pl["variant"] & VARIANT_SINKS:
        check(sinks is None,
              lambda: "sinks: given to a plan made without sinks: make the plan with DecodePlan(..., sinks=True)")


def check_queries_against_plan(pl, q_indptr, max_q_len):
    """decode_op.cpp's check_queries_against_plan: q_indptr needs a plan for several tokens a
    sequence, max_q_len at most the plan's."""
    plan_q_len = pl["max_q_len"]
    check(q_indptr is None or plan_q_len > 1,
          lambda: "q_indptr: given to a plan made for one query token a sequence: make the plan with "
                  "DecodePlan(..., max_q_len=N), N the most query tokens of a sequence its runs pass")
    check(max_q_len <= plan_q_len,
          lambda: f"max_q_len: {_n(max_q_len)} is above the plan's {plan_q_len} (DecodePlan(max_q_len={plan_q_len}): "
                  f"its workspace holds no more rows)")


@torch.library.register_fake("vxqa::decode_planned")
def _decode_planned_fake(plan, workspace, q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, softmax_scale,
                         k_scale, v_scale, k_scale_tensor, v_scale_tensor, out, lse, errors, sliding_window=0,
                         logit_softcap=0.0, sinks=None, q_indptr=None, max_q_len=0):
    pl = read_plan(plan)
    fmt = check_decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, k_scale_tensor, v_scale_tensor,
                       out, lse, errors, sliding_window, logit_softcap, sinks, q_indptr, max_q_len)
    check_against_plan(pl, q, k_cache, block_table, fmt, workspace, q_indptr)
    check_variant_against_plan(pl, sliding_window, logit_softcap, sinks)
    check_queries_against_plan(pl, q_indptr, max_q_len)


@torch.library.register_fake("vxqa::append_kv")
def _append_kv_fake(key, value, slot_mapping, k_cache, v_cache, kv_cache_dtype, k_scale, v_scale, k_scale_tensor,
                    v_scale_tensor, errors):
    """append_kv_op.cpp's check_append_kv."""
    check_dim(key, "key", 3, "[num_tokens, num_kv_heads, head_dim]")
    check_dtype(key, "key", (torch.float16, torch.bfloat16))
    check_rows_contiguous(key, "key")
    check(_same_shape(value, key), lambda: f"value: shape {_dims(value.shape)} differs from key's {_dims(key.shape)}")
    check(value.dtype == key.dtype,
          lambda: f"value: dtype {dtype_name(value.dtype)} differs from key's {dtype_name(key.dtype)}")
    check_rows_contiguous(value, "value")
    check_dim(slot_mapping, "slot_mapping", 1, "[num_tokens]")
    check_dtype(slot_mapping, "slot_mapping", (torch.int64,))
    check(slot_mapping.size(0) <= key.size(0),
          lambda: f"slot_mapping: {_n(slot_mapping.size(0))} tokens, more than key's {_n(key.size(0))} rows (num_tokens = "
                  f"slot_mapping.size(0) must be <= key.size(0): key and value may be padded, slot_mapping not)")
    check_contiguous(slot_mapping, "slot_mapping")
    check_cache_pair(k_cache, v_cache, kv_cache_dtype)
    check_size(key, "key", 1, k_cache.size(2), "the cache's num_kv_heads")
    check_size(key, "key", 2, k_cache.size(3), "the cache's head_dim")
    head_dim = key.size(2)
    check(sym_and(head_dim >= 8, head_dim % 8 == 0),
          lambda: f"key: head_dim {_n(head_dim)} must be a positive multiple of 8")
    check_errors(errors)
    check_scale_tensor(k_scale_tensor, "k_scale")
    check_scale_tensor(v_scale_tensor, "v_scale")
