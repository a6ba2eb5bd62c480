"""vxqa's torch ops: decode attention over a paged FP8 (E5M2 or E4M3), fp16 or bf16 KV cache, and
the writer that puts each step's new K/V into it. docs/torch.md is the guide, docs/vllm.md the
mapping from a vLLM attention backend.

    vxqa_torch.append_kv(key, value, slot_mapping, k_cache, v_cache, kv_cache_dtype="fp8_e5m2")
    plan = vxqa_torch.DecodePlan(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                                 max_batch=64, max_context=8192, kv_cache_dtype="fp8_e5m2")
    out = plan.run(q, k_cache, v_cache, block_table, seq_lens)     # every layer, every step
    out = vxqa_torch.decode(q, k_cache, v_cache, block_table, seq_lens)  # slow path: plans each call

Attention variants, as keyword arguments of decode() and DecodePlan.run(): sliding_window
(the last W keys), logit_softcap (cap * tanh(s / cap)) and sinks (one fp32 logit a query head
in the softmax denominator). A DecodePlan is made for the ones its runs use:

    plan = vxqa_torch.DecodePlan(..., sliding_window=128, sinks=True)   # windows 1..128, sinks
    out = plan.run(q, k_cache, v_cache, block_table, seq_lens, sliding_window=128, sinks=layer_sinks)

Multi-token queries (speculative-decoding verification, MTP): q [num_tokens, num_q_heads,
head_dim] with q_indptr (int32 [batch + 1], vLLM's query_start_loc): sequence b's tokens are
rows q_indptr[b] .. q_indptr[b + 1] - 1, its last n tokens, already in the cache; token i of n
sees keys 0 .. len - n + i. The plan takes the most tokens a sequence (max_q_len, up to 16):

    plan = vxqa_torch.DecodePlan(..., max_q_len=4)
    out = plan.run(q, k_cache, v_cache, block_table, seq_lens, q_indptr=query_start_loc)

They are torch.library custom ops underneath (torch.ops.vxqa.*) with fake kernels, so they
work under torch.compile and in CUDA-graph capture. A bad argument raises ValueError naming
it ("q: ...").
"""
import operator

import torch

from . import _C  # noqa: F401  (registers torch.ops.vxqa)
from . import _fake
from ._fake import HEAD_DIMS, KV_CACHE_DTYPES, MAX_Q_LEN, PLAN_FIELDS, plan_span  # noqa: F401
from ._fake import VARIANT_LOGIT_SOFTCAP, VARIANT_SINKS, VARIANT_SLIDING_WINDOW  # noqa: F401

# Bits of an error word (include/vxqa/kernel/error_bits.cuh): one set for decode and
# append_kv, so one int32 word can collect a whole layer's.
DECODE_ERROR_BAD_LENGTH = 1  # a length < 0, above max_context or past the block table, or (q_indptr) a
#                              sequence with more query tokens than its length or than max_q_len: its out is NaN
DECODE_ERROR_BAD_PAGE = 2  # a block-table id outside [0, num_pages) within the length: that sequence's out is NaN
APPEND_ERROR_BAD_SLOT = 4  # a slot at or past num_pages * page_size: that token was not written
ERROR_BAD_K_SCALE = 8  # a k_scale tensor holding 0, < 0, inf or NaN: decode's out and lse NaN, appended K rows NaN
ERROR_BAD_V_SCALE = 16  # the same for v_scale: decode's out NaN, appended V rows NaN


def _scale(value):
    """(float, tensor) for the op: a device tensor is read at every launch (graph replays
    follow its updates); a number is baked in."""
    if isinstance(value, torch.Tensor):
        return 1.0, value
    return float(value), None


def _softmax_scale(value):
    # None: the op takes 1 / sqrt(head_dim) itself, which keeps head_dim symbolic under compile.
    return None if value is None else float(value)


def _variant(sliding_window, logit_softcap):
    """The op's (sliding_window, logit_softcap): None is vLLM's "off", 0 here. Anything else
    goes to the op as given (its schema refuses a non-integer window)."""
    return (0 if sliding_window is None else sliding_window,
            0.0 if logit_softcap is None else float(logit_softcap))


def _max_q_len(max_q_len):
    """The op's max_q_len: None is the default (0: the op works it out from q's rows and the
    plan), anything else goes as given (the op refuses what is out of range)."""
    return 0 if max_q_len is None else max_q_len


def decode(q, k_cache, v_cache, block_table, seq_lens, *, kv_cache_dtype="auto", softmax_scale=None, k_scale=1.0,
           v_scale=1.0, max_context=None, out=None, lse=None, errors=None, sliding_window=0, logit_softcap=0.0,
           sinks=None, q_indptr=None, max_q_len=None):
    """One decode step: softmax(q K^T * softmax_scale) V per query head over the paged cache.

    The slow path: every call plans (asks the device for its SMs and occupancy) and takes a
    workspace from torch's allocator. A serving loop makes a DecodePlan once and calls
    plan.run(...) instead.

    q            float16 or bfloat16 [batch, num_q_heads, head_dim], the last dimension contiguous
                 (with q_indptr [num_tokens, num_q_heads, head_dim]: a row a query token);
                 bfloat16 only with a bf16 cache.
    k_cache      [num_pages, page_size, num_kv_heads, head_dim] (vLLM NHD, any strides but
    v_cache      the last): float16, bfloat16 (sm_80 and newer: the bf16 MMA), float8_e5m2
                 (E5M2) or float8_e4m3fn (E4M3), or uint8 holding fp8 codes of the format
                 kv_cache_dtype states; K and V share dtype, shape and strides. Query head h
                 reads KV head h // group.
    block_table  int32 [batch, max_pages_per_seq]: page ids in [0, num_pages).
    seq_lens     int32 [batch]: each sequence's tokens in the cache, this step's included;
                 read on the device at every launch (graph-safe). 0 gives out 0, lse -inf.
    kv_cache_dtype  vLLM's string: "auto" (the cache's dtype says: float16, bfloat16 or a
                 float8 dtype; uint8 is refused, its bytes do not say E5M2 from E4M3),
                 "fp8_e5m2" (E5M2), "fp8" or "fp8_e4m3" (E4M3: vLLM's "fp8"). An fp8 string
                 takes uint8 or its own float8 dtype, and refuses the other one (and 16-bit
                 caches). E4M3 is decoded exactly: the hardware cvt on sm_89 and newer, a
                 bit-move on SM70, SM75, sm_80 and sm_86. A bf16 cache runs on sm_80 and newer
                 only (SM70 and SM75 refuse it) and takes bfloat16 q and out only.
    softmax_scale  default 1 / sqrt(head_dim).
    k_scale, v_scale  real = stored * scale: a float, or a one-element float32 CUDA tensor.
    max_context  the plan's capacity (default block_table.size(1) * page_size): lengths
                 above it give NaN and DECODE_ERROR_BAD_LENGTH.
    out          q's shape and dtype (allocated when None).
    lse          optional float32 [batch, num_q_heads] ([num_tokens, num_q_heads] with q_indptr),
                 filled with the natural-log LSE.
    errors       optional int32 CUDA tensor of one element: the ERROR bits are OR-ed in.
    sliding_window  0 or None (default): every key of the sequence. W > 0: the query (the
                 sequence's last token, position len - 1) sees keys len - W .. len - 1 only
                 (vLLM's sliding_window; FlashInfer's window_left + 1). The plan's chunks then
                 cover only the window.
    logit_softcap  0 or None (default): off. cap > 0: each score s = softmax_scale * q.k
                 becomes cap * tanh(s / cap) (Gemma 2; vLLM's and FlashInfer's logits_soft_cap).
    sinks        None (default), or float32 [num_q_heads] on q's device, contiguous: one
                 natural-log logit a query head that joins its softmax denominator with no
                 value row (gpt-oss); lse includes it. Read at every launch. A length-0
                 sequence then gives out 0 and lse = its sink. A head's -inf: that head has
                 no sink (lse -inf for a length-0 sequence).
    q_indptr     None (default): row b of q is sequence b's one query token. Or int32
                 [batch + 1] on q's device, contiguous, non-decreasing from 0 (vLLM's
                 query_start_loc, FlashInfer's qo_indptr; batch = block_table.size(0)):
                 sequence b's n = q_indptr[b + 1] - q_indptr[b] query tokens (0..max_q_len)
                 are rows q_indptr[b] .. q_indptr[b + 1] - 1 of q, out and lse; rows past
                 q_indptr[batch] are neither read nor written. They are the sequence's last
                 n tokens, already in the cache (seq_lens counts them): token i sees keys
                 0 .. len - n + i, with a window the W keys ending there. A sequence with
                 n > len or n > max_q_len gets DECODE_ERROR_BAD_LENGTH (its rows NaN where
                 n <= max_q_len). Read at every launch; q_indptr[batch] must not pass q's rows
                 (not checked: it is on the device).
    max_q_len    with q_indptr, the most query tokens of a sequence, 1..16 (default: q's rows,
                 at most 16); without it None or 1.
    Returns out. Batch 0, or no query rows, does nothing.
    """
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_value, k_tensor = _scale(k_scale)
    v_value, v_tensor = _scale(v_scale)
    window, cap = _variant(sliding_window, logit_softcap)
    torch.ops.vxqa.decode_out(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype,
                              _softmax_scale(softmax_scale), k_value, v_value, k_tensor, v_tensor,
                              int(max_context or 0), out, lse, errors, sliding_window=window, logit_softcap=cap,
                              sinks=sinks, q_indptr=q_indptr, max_q_len=_max_q_len(max_q_len))
    return out


class DecodePlan:
    """Plan once, run every layer and step: vxqa::Decoder's choice of Config and its plan,
    made once from the model's shape and capacity, and the workspace allocated once.

        plan = DecodePlan(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, max_batch=256,
                          max_context=32768, q_dtype=torch.bfloat16, kv_cache_dtype="fp8_e5m2")
        out = plan.run(q, k_cache, v_cache, block_table, seq_lens, k_scale=k_scale, v_scale=v_scale)

    run() validates and launches only: no device query, no allocation (but `out`'s when
    not given). Any batch up to max_batch runs with the plan, each on its sequences' own
    lengths; the grid is the plan's, so a CUDA graph captured once replays as lengths change.

    Construct it outside torch.compile'd code (it asks the device); run() compiles. One plan
    serves every layer of the shape, one after another on one stream: its workspace holds one
    step at a time, so decodes that may overlap (other streams) need a plan each.

    num_q_heads or group_size   query heads, or query heads per KV head.
    num_kv_heads, head_dim, page_size   the cache's shape (head_dim 64, 128, 256 or 512; 512: one query token a sequence).
    max_batch, max_context      the capacity: sequences per call, tokens per sequence (the
                                block table passed to run() must hold max_context tokens).
    q_dtype                     float16 or bfloat16 (q and out; bfloat16 with a bf16 cache).
    kv_cache_dtype, cache_dtype vLLM's string as for decode(), and the cache tensors' dtype
                                ("auto" needs it: float16, bfloat16 (a bf16 cache) or a
                                float8 dtype; an fp8 string takes uint8, the default, or its
                                float8 dtype: "fp8_e5m2" float8_e5m2, "fp8" and "fp8_e4m3"
                                float8_e4m3fn).
    device                      default: the current CUDA device.

    The attention variants its runs may use (each off by default; a plan with one runs on
    vxqa's Config with every variant flag, which takes the others off at run time):
    sliding_window              0 or None: no window (run() passes none). W > 0: every run
                                passes a window of 1..W keys, and the plan's chunks cover
                                only W + 15 keys (plan_span), so a windowed step costs what a
                                step over W keys costs. Layers of full attention need a plan
                                of their own, without sliding_window.
    logit_softcap               True: run() may pass logit_softcap (the cap itself is run()'s).
    sinks                       True: run() may pass sinks (the tensor is run()'s).

    max_q_len                   the most query tokens a sequence of a run has (1, default: one,
                                q without q_indptr; up to 16: multi-token queries, run(...,
                                q_indptr=...)). A plan for N > 1 runs on vxqa's multi-token
                                Config, its workspace holds max_batch * N rows, and it runs
                                steps of one token a sequence (without q_indptr) as well.
    """

    def __init__(self, *, num_kv_heads, head_dim, page_size, max_batch, max_context, num_q_heads=None,
                 group_size=None, q_dtype=torch.float16, kv_cache_dtype="auto", cache_dtype=None, device=None,
                 sliding_window=0, logit_softcap=False, sinks=False, max_q_len=1):
        if (num_q_heads is None) == (group_size is None):
            raise ValueError("num_q_heads: give num_q_heads or group_size (query heads per KV head), one of them")
        if group_size is None:
            if num_kv_heads < 1 or num_q_heads % num_kv_heads:
                raise ValueError(f"num_q_heads: {num_q_heads} is not a multiple of num_kv_heads {num_kv_heads}")
            group_size = num_q_heads // num_kv_heads
        if cache_dtype is None:
            if kv_cache_dtype == "auto":
                raise ValueError('cache_dtype: needed with kv_cache_dtype "auto" (the cache\'s dtype says its format)')
            cache_dtype = torch.uint8  # the plan keeps the format only: it runs on float8 views too
        variant, max_window = _plan_variant(sliding_window, logit_softcap, sinks)
        q_len = _plan_max_q_len(max_q_len)
        device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        ints = torch.ops.vxqa.plan_decode(num_kv_heads, group_size, head_dim, page_size, max_batch, max_context,
                                          q_dtype, kv_cache_dtype, cache_dtype, device, variant=variant,
                                          max_window=max_window, max_q_len=q_len)
        workspace = torch.empty(ints[PLAN_FIELDS.index("workspace_bytes")], dtype=torch.uint8, device=device)
        self._init(ints, workspace, kv_cache_dtype)

    @classmethod
    def from_ints(cls, ints, workspace, kv_cache_dtype="auto"):
        """A plan from plan_decode's ints and a workspace (of at least workspace_bytes): for
        tests and for callers that keep the ints. decode_planned checks both."""
        self = cls.__new__(cls)
        self._init(list(ints), workspace, kv_cache_dtype)
        return self

    def _init(self, ints, workspace, kv_cache_dtype):
        self.ints = list(ints)  # torch.ops.vxqa.decode_planned's `plan`
        self.workspace = workspace
        self.kv_cache_dtype = kv_cache_dtype

    def __getattr__(self, name):
        """The plan's fields by name: plan.head_dim, plan.chunk_tokens, plan.max_q_len,
        plan.workspace_bytes, ..."""
        ints = self.__dict__.get("ints")
        if name in PLAN_FIELDS and ints is not None and len(ints) == len(PLAN_FIELDS):
            return ints[PLAN_FIELDS.index(name)]
        raise AttributeError(f"DecodePlan has no attribute {name!r}")

    @property
    def config_name(self):
        """The chosen Config, e.g. "D128 e5m2 fp16 W4 page16", "D128 e4m3 bf16 W4 page16" or,
        for a bf16 cache, "D128 bf16 bf16 W4 page*" (with a variant, e.g. "D128 e5m2 fp16 W4
        page* +window +softcap +sinks")."""
        return torch.ops.vxqa.describe_plan(self.ints)

    @property
    def sliding_window(self):
        """The largest window a run may pass (the plan's max_window); 0: none (or any, for a
        plan made by plan_decode with the window bit and max_window 0)."""
        return self.max_window

    @property
    def logit_softcap(self):
        """Whether a run may pass logit_softcap."""
        return bool(self.variant & VARIANT_LOGIT_SOFTCAP)

    @property
    def sinks(self):
        """Whether a run may pass sinks."""
        return bool(self.variant & VARIANT_SINKS)

    def __repr__(self):
        return "DecodePlan(" + ", ".join(f"{n}={v}" for n, v in zip(PLAN_FIELDS[1:], self.ints[1:])) + ")"

    def run(self, q, k_cache, v_cache, block_table, seq_lens, *, softmax_scale=None, k_scale=1.0, v_scale=1.0,
            out=None, lse=None, errors=None, sliding_window=0, logit_softcap=0.0, sinks=None, q_indptr=None,
            max_q_len=None):
        """One decode step with this plan: decode()'s arguments and results (batch up to
        max_batch; the block table holds at least max_context tokens). Returns out.
        sliding_window, logit_softcap and sinks as for decode(), each only where the plan was
        made for it: a window of 1..plan.sliding_window on a plan made with one (0 is then
        refused), a cap on a plan made with logit_softcap=True, sinks with sinks=True.
        q_indptr and max_q_len as for decode(), on a plan made with max_q_len > 1: max_q_len
        at most plan.max_q_len (default: q's rows, at most plan.max_q_len)."""
        if out is None:
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        k_value, k_tensor = _scale(k_scale)
        v_value, v_tensor = _scale(v_scale)
        window, cap = _variant(sliding_window, logit_softcap)
        torch.ops.vxqa.decode_planned(self.ints, self.workspace, q, k_cache, v_cache, block_table, seq_lens,
                                      self.kv_cache_dtype, _softmax_scale(softmax_scale), k_value, v_value,
                                      k_tensor, v_tensor, out, lse, errors, sliding_window=window,
                                      logit_softcap=cap, sinks=sinks, q_indptr=q_indptr,
                                      max_q_len=_max_q_len(max_q_len))
        return out


def _plan_variant(sliding_window, logit_softcap, sinks):
    """plan_decode's (variant, max_window) from DecodePlan's arguments, or ValueError naming
    the argument."""
    if sliding_window is None:
        sliding_window = 0
    try:
        if isinstance(sliding_window, bool):
            raise TypeError
        window = operator.index(sliding_window)
    except TypeError:
        raise ValueError(f"sliding_window: {sliding_window!r} is not an int (the largest window run() passes; "
                         f"0: no window)") from None
    if window < 0:
        raise ValueError(f"sliding_window: {window} must be >= 0 (0: no window; W > 0: runs pass windows of 1..W)")
    if window > _fake.INT_MAX:
        raise ValueError(f"sliding_window: {window} does not fit in an int")
    for name, flag, example in (("logit_softcap", logit_softcap, "logit_softcap=50.0"),
                                ("sinks", sinks, "sinks=layer_sinks")):
        if not isinstance(flag, bool):
            raise ValueError(f"{name}: DecodePlan takes True or False (whether its runs pass {name}), got "
                             f"{type(flag).__name__}: the value itself goes to run(..., {example})")
    variant = ((VARIANT_SLIDING_WINDOW if window > 0 else 0) | (VARIANT_LOGIT_SOFTCAP if logit_softcap else 0)
               | (VARIANT_SINKS if sinks else 0))
    return variant, window


def _plan_max_q_len(max_q_len):
    """plan_decode's max_q_len from DecodePlan's argument, or ValueError naming it (plan_decode
    checks the range, 1..MAX_Q_LEN)."""
    try:
        if isinstance(max_q_len, bool):
            raise TypeError
        return operator.index(max_q_len)
    except TypeError:
        raise ValueError(f"max_q_len: {max_q_len!r} is not an int (the most query tokens of a sequence its runs "
                         f"pass, 1..{MAX_Q_LEN})") from None


def append_kv(key, value, slot_mapping, k_cache, v_cache, *, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0,
              errors=None):
    """Writes this step's new rows into the paged cache (vLLM's reshape_and_cache_flash).

    key, value   float16 or bfloat16 [rows, num_kv_heads, head_dim], last dim contiguous; rows
                 may exceed num_tokens (vLLM pads them for CUDA graphs): those past it are not read.
    slot_mapping int64 [num_tokens], num_tokens <= rows: slot = page * page_size + offset;
                 every negative slot skips its token; one at or past the pool sets
                 APPEND_ERROR_BAD_SLOT and is not written.
    k_cache, v_cache  as in decode(); written in place. E5M2 stores x / scale rounded to
                 nearest even, saturated to +-57344; E4M3 likewise, saturated to +-448, every
                 NaN as 0x7F; fp16 and bf16 caches store x / scale rounded to nearest even.
    kv_cache_dtype  as in decode().
    k_scale, v_scale  a float, or a one-element float32 CUDA tensor.
    errors       optional int32 CUDA tensor of one element: the ERROR bits are OR-ed in.
    """
    k_value, k_tensor = _scale(k_scale)
    v_value, v_tensor = _scale(v_scale)
    torch.ops.vxqa.append_kv(key, value, slot_mapping, k_cache, v_cache, kv_cache_dtype, k_value, v_value, k_tensor,
                             v_tensor, errors)
