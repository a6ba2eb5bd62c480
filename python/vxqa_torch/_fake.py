"""The ops' fake kernels: what torch.compile, FakeTensorMode and meta tensors run instead of
the CUDA kernels. Each makes the argument checks of the C++ side (python/csrc) that shapes
and dtypes can tell, with the same "name: why" ValueError, so a bad call fails while a
model is traced, not when the compiled graph first runs.

Sizes may be SymInts here (torch.compile with dynamic shapes): every condition is built with
symbolic operators and handed to torch._check_value, which records it as a guard or a
runtime assert; nothing is turned into a Python bool first, so no size is specialised
(batch and token counts stay symbolic across calls). tests/test_ops.py runs every argument
case both here (meta tensors) and through the C++ checks (CPU tensors).
"""
import torch
from torch.fx.experimental.symbolic_shapes import sym_and, sym_or

# c10's ScalarType names, as the C++ messages print them.
_DTYPE_NAMES = {
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
    torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double",
    torch.bool: "Bool", torch.float8_e5m2: "Float8_e5m2", torch.float8_e4m3fn: "Float8_e4m3fn",
}

HEAD_DIMS = (64, 128, 256)  # vxqa::DefaultDecoderConfigs
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8", "fp8_e4m3")  # accepted strings; the last two are refused for now
E5M2, FP16 = 1, 2  # vxqa::KvType values (kUnset = 0)
FP16_Q, BF16_Q = 0, 1  # vxqa::ActType values

# torch.ops.vxqa.plan_decode's ints, in order (decode_op.cpp's PlanField).
PLAN_FIELDS = ("tag", "device", "head_dim", "cache_type", "qo_type", "page_size", "num_kv_heads", "group_size",
               "config", "max_batch", "max_context", "chunk_tokens", "num_chunks", "workspace_bytes")
PLAN_TAG = 0x7678716101
INT_MAX = 2**31 - 1


def dtype_name(dtype):
    return _DTYPE_NAMES.get(dtype, str(dtype))


def _n(x):
    """A size for a message: a SymInt's example value (no guard), as the C++ side prints it."""
    if isinstance(x, torch.SymInt) and x.node.has_hint():
        return str(x.node.hint)
    return str(x)


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


def cache_format(kv_cache_dtype, dtype, name):
    """The cache's format (E5M2 or FP16) from vLLM's kv_cache_dtype and the tensor's dtype;
    tensor_checks.h's cache_format, message for message."""
    e4m3 = kv_cache_dtype in ("fp8", "fp8_e4m3")
    check(kv_cache_dtype in KV_CACHE_DTYPES,
          lambda: f'kv_cache_dtype: "{kv_cache_dtype}" is not one of "auto" (the cache\'s dtype says), "fp8_e5m2", '
                  f'"fp8" or "fp8_e4m3" (E4M3: not supported yet)')
    check(not e4m3, lambda: f'kv_cache_dtype: "{kv_cache_dtype}" means E4M3 codes: E4M3 caches are not supported '
                            f'yet (vxqa reads E5M2 codes, kv_cache_dtype "fp8_e5m2", or fp16)')
    if kv_cache_dtype == "fp8_e5m2":
        check(dtype in (torch.uint8, torch.float8_e5m2),
              lambda: f'{name}: dtype {dtype_name(dtype)} does not hold kv_cache_dtype "fp8_e5m2" '
                      f'(Byte or Float8_e5m2)')
        return E5M2
    check(dtype != torch.uint8,
          lambda: f'{name}: a uint8 cache holds fp8 codes of an unstated format (E5M2 or E4M3; vLLM\'s "fp8" means '
                  f'E4M3), which kv_cache_dtype "auto" cannot tell: pass kv_cache_dtype="fp8_e5m2" or the cache '
                  f'as a torch.float8_e5m2 view')
    check(dtype != torch.float8_e4m3fn,
          lambda: f"{name}: dtype Float8_e4m3fn: E4M3 caches are not supported yet")
    check(dtype in (torch.float16, torch.float8_e5m2),
          lambda: f'{name}: dtype {dtype_name(dtype)} is not supported (Half or Float8_e5m2, or Byte with '
                  f'kv_cache_dtype "fp8_e5m2")')
    return FP16 if dtype == torch.float16 else E5M2


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
                 lse, errors):
    """decode_op.cpp's check_decode."""
    check_dim(q, "q", 3, "[batch, num_q_heads, head_dim]")
    check_dtype(q, "q", (torch.float16, torch.bfloat16))
    check_rows_contiguous(q, "q")
    fmt = check_cache_pair(k_cache, v_cache, kv_cache_dtype)
    batch, q_heads, head_dim = q.shape
    kv_heads = k_cache.size(2)
    check_size(q, "q", 2, k_cache.size(3), "the cache's head_dim")
    check(sym_or(*(head_dim == d for d in HEAD_DIMS)),
          lambda: f"q: head_dim {_n(head_dim)} is not supported (64, 128 or 256)")
    # (the modulus by at least 1: with 0 KV heads the first condition fails, and no division by 0)
    check(sym_and(kv_heads >= 1, q_heads % torch.sym_max(kv_heads, 1) == 0),
          lambda: f"q: {_n(q_heads)} query heads are not a multiple of the cache's {_n(kv_heads)} KV heads")

    check_dim(block_table, "block_table", 2, "[batch, max_pages_per_seq]")
    check_dtype(block_table, "block_table", (torch.int32,))
    check_size(block_table, "block_table", 0, batch, "q's batch")
    check_rows_contiguous(block_table, "block_table")
    check(block_table.size(1) >= 1, lambda: "block_table: needs at least one page per sequence")
    check_dim(seq_lens, "seq_lens", 1, "[batch]")
    check_dtype(seq_lens, "seq_lens", (torch.int32,))
    check_size(seq_lens, "seq_lens", 0, batch, "q's batch")
    check_contiguous(seq_lens, "seq_lens")

    check(_same_shape(out, q), lambda: f"out: shape {_dims(out.shape)} differs from q's {_dims(q.shape)}")
    check(out.dtype == q.dtype, lambda: f"out: dtype {dtype_name(out.dtype)} differs from q's {dtype_name(q.dtype)}")
    check_rows_contiguous(out, "out")
    if lse is not None:
        check_dtype(lse, "lse", (torch.float32,))
        check(lse.dim() == 2 and sym_and(lse.size(0) == batch, lse.size(1) == q_heads),
              lambda: f"lse: must be [batch, num_q_heads] = [{_n(batch)}, {_n(q_heads)}], got shape {_dims(lse.shape)}")
        check_contiguous(lse, "lse")
    check_errors(errors)
    check_scale_tensor(k_scale_tensor, "k_scale")
    check_scale_tensor(v_scale_tensor, "v_scale")
    return fmt


@torch.library.register_fake("vxqa::decode_out")
def _decode_out_fake(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, softmax_scale, k_scale, v_scale,
                     k_scale_tensor, v_scale_tensor, max_context, out, lse, errors):
    check_decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, k_scale_tensor, v_scale_tensor, out,
                 lse, errors)
    table_tokens = block_table.size(1) * k_cache.size(1)
    # 0 means the table's capacity, which is itself checked (a page size of 0 makes it 0)
    check(sym_or(sym_and(max_context == 0, table_tokens >= 1), sym_and(max_context >= 1, max_context <= table_tokens)),
          lambda: f"max_context: {max_context or _n(table_tokens)} must be in 1..block_table.size(1) * page_size "
                  f"({_n(table_tokens)})")


def read_plan(plan):
    """decode_op.cpp's read_plan: the plan's fields by name, or ValueError("plan: ...")."""
    check(len(plan) == len(PLAN_FIELDS) and plan[0] == PLAN_TAG,
          lambda: f"plan: not made by torch.ops.vxqa.plan_decode ({len(plan)} ints; use vxqa_torch.DecodePlan)")
    check(all(v >= 0 for v in plan), lambda: "plan: holds a negative field: not made by plan_decode")
    fields = dict(zip(PLAN_FIELDS, plan))

    def check_int(name):  # decode_op.cpp's to_int(field, "plan")
        check(fields[name] <= INT_MAX, lambda: f"plan: {fields[name]} does not fit in an int")

    check_int("head_dim")
    check(fields["cache_type"] in (E5M2, FP16), lambda: f"plan: cache type {fields['cache_type']} is not e5m2 or fp16")
    check(fields["qo_type"] in (FP16_Q, BF16_Q), lambda: f"plan: q type {fields['qo_type']} is unknown")
    for name in ("page_size", "device", "config", "num_kv_heads", "group_size", "max_batch", "max_context",
                 "chunk_tokens", "num_chunks"):  # in read_plan's order
        check_int(name)
    return fields


def check_against_plan(pl, q, k_cache, block_table, fmt, workspace):
    """decode_op.cpp's check_against_plan."""
    remedy = " (a DecodePlan serves one model shape: make one per shape)"
    names = {E5M2: "e5m2", FP16: "fp16"}
    check(fmt == pl["cache_type"],
          lambda: f"k_cache: an {names[fmt]} cache, the plan was made for {names[pl['cache_type']]}{remedy}")
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
    check(q.size(0) <= pl["max_batch"],
          lambda: f"q: batch {_n(q.size(0))} is above the plan's max_batch {pl['max_batch']}")
    check(block_table.size(1) * k_cache.size(1) >= pl["max_context"],
          lambda: f"block_table: {_n(block_table.size(1))} pages of {_n(k_cache.size(1))} tokens hold less than the plan's "
                  f"max_context {pl['max_context']}")
    check_dtype(workspace, "workspace", (torch.uint8,))
    check(workspace.dim() == 1 and _is_contiguous(workspace),
          lambda: "workspace: must be a contiguous 1-D uint8 tensor")
    check(workspace.numel() >= pl["workspace_bytes"],
          lambda: f"workspace: {_n(workspace.numel())} bytes, the plan needs {pl['workspace_bytes']}")


@torch.library.register_fake("vxqa::decode_planned")
def _decode_planned_fake(plan, workspace, q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, softmax_scale,
                         k_scale, v_scale, k_scale_tensor, v_scale_tensor, out, lse, errors):
    pl = read_plan(plan)
    fmt = check_decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype, k_scale_tensor, v_scale_tensor,
                       out, lse, errors)
    check_against_plan(pl, q, k_cache, block_table, fmt, workspace)


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
