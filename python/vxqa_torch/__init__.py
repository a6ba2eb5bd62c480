"""vxqa's torch ops: decode attention over a paged FP8 E5M2 (or fp16) KV cache, and the
writer that puts each step's new K/V into it. docs/torch.md is the guide.

    vxqa_torch.append_kv(key, value, slot_mapping, k_cache, v_cache, k_scale=ks, v_scale=vs)
    out = vxqa_torch.decode(q, k_cache, v_cache, block_table, seq_lens, k_scale=ks, v_scale=vs)

Both are torch.library custom ops underneath (torch.ops.vxqa.decode_out and
torch.ops.vxqa.append_kv) with fake kernels, so they work under torch.compile and in
CUDA-graph capture. A bad argument raises ValueError naming it ("q: ...").
"""
import math

import torch

from . import _C  # noqa: F401  (registers torch.ops.vxqa)

# Bits of the error words (one int32 each; see `errors` below).
DECODE_ERROR_BAD_LENGTH = 1  # a length < 0 or above max_context: that sequence's out is NaN
DECODE_ERROR_BAD_PAGE = 2  # a block-table id outside [0, num_pages): that sequence's out is NaN
APPEND_ERROR_BAD_SLOT = 1  # a slot below -1 or past the pool: that token was not written


def _scale(value):
    """(float, tensor) for the op: a device tensor is read at every launch (graph replays
    follow its updates); a number is baked in."""
    if isinstance(value, torch.Tensor):
        return 1.0, value
    return float(value), None


def decode(q, k_cache, v_cache, block_table, seq_lens, *, softmax_scale=None, k_scale=1.0, v_scale=1.0,
           max_context=None, out=None, lse=None, errors=None):
    """One decode step: softmax(q K^T * softmax_scale) V per query head over the paged cache.

    q            float16 or bfloat16 [batch, num_q_heads, head_dim], the last dimension contiguous.
    k_cache      [num_pages, page_size, num_kv_heads, head_dim] (vLLM NHD, any strides but
    v_cache      the last), uint8 or float8_e5m2 (E5M2 codes) or float16; K and V share
                 dtype, shape and strides. Query head h reads KV head h // group.
    block_table  int32 [batch, max_pages_per_seq]: page ids in [0, num_pages).
    seq_lens     int32 [batch]: read on the device at every launch (graph-safe).
    softmax_scale  default 1 / sqrt(head_dim).
    k_scale, v_scale  real = stored * scale: a float, or a one-element float32 CUDA tensor.
    max_context  the plan's capacity (default block_table.size(1) * page_size): lengths
                 above it give NaN and DECODE_ERROR_BAD_LENGTH.
    out          [batch, num_q_heads, head_dim] of q's dtype (allocated when None).
    lse          optional float32 [batch, num_q_heads], filled with the natural-log LSE.
    errors       optional int32 CUDA tensor of one element: DECODE_ERROR_* bits are OR-ed in.
    Returns out.
    """
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    k_value, k_tensor = _scale(k_scale)
    v_value, v_tensor = _scale(v_scale)
    torch.ops.vxqa.decode_out(q, k_cache, v_cache, block_table, seq_lens, float(softmax_scale), k_value, v_value,
                              k_tensor, v_tensor, int(max_context or 0), out, lse, errors)
    return out


def append_kv(key, value, slot_mapping, k_cache, v_cache, *, k_scale=1.0, v_scale=1.0, errors=None):
    """Writes this step's new rows into the paged cache (vLLM's reshape_and_cache_flash).

    key, value   float16 or bfloat16 [num_tokens, num_kv_heads, head_dim], last dim contiguous.
    slot_mapping int64 [num_tokens]: slot = page * page_size + offset; -1 skips the token.
    k_cache, v_cache  as in decode(); written in place. E5M2 stores x / scale rounded to
                 nearest even, saturated to +-57344; fp16 caches store x / scale.
    k_scale, v_scale  a float, or a one-element float32 CUDA tensor.
    errors       optional int32 CUDA tensor of one element: APPEND_ERROR_BAD_SLOT is OR-ed in.
    """
    k_value, k_tensor = _scale(k_scale)
    v_value, v_tensor = _scale(v_scale)
    torch.ops.vxqa.append_kv(key, value, slot_mapping, k_cache, v_cache, k_value, v_value, k_tensor, v_tensor,
                             errors)
