"""What needs no GPU: the ops' registration and schemas, their fake (meta) kernels under
FakeTensorMode, make_fx and torch.compile, torch.library.opcheck on meta tensors, and the
argument checks, each raising ValueError that names the argument. The argument checks run
on CPU tensors here and again on CUDA tensors where there is a GPU."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import vxqa_torch

B, HKV, G, D, P, PAGES, MAX_PAGES, T = 2, 2, 3, 64, 16, 10, 4, 5


def decode_args(device):
    """A valid decode call's arguments on `device` (contents are irrelevant here)."""
    def t(*shape, dtype):
        return torch.zeros(shape, dtype=dtype, device=device)
    return dict(q=t(B, HKV * G, D, dtype=torch.half), k_cache=t(PAGES, P, HKV, D, dtype=torch.uint8),
                v_cache=t(PAGES, P, HKV, D, dtype=torch.uint8), block_table=t(B, MAX_PAGES, dtype=torch.int32),
                seq_lens=t(B, dtype=torch.int32), out=t(B, HKV * G, D, dtype=torch.half),
                lse=t(B, HKV * G, dtype=torch.float), errors=t(1, dtype=torch.int32))


def append_args(device):
    def t(*shape, dtype):
        return torch.zeros(shape, dtype=dtype, device=device)
    return dict(key=t(T, HKV, D, dtype=torch.bfloat16), value=t(T, HKV, D, dtype=torch.bfloat16),
                slot_mapping=t(T, dtype=torch.long), k_cache=t(PAGES, P, HKV, D, dtype=torch.float8_e5m2),
                v_cache=t(PAGES, P, HKV, D, dtype=torch.float8_e5m2), errors=t(1, dtype=torch.int32))


def call_decode(a, **kw):
    a = dict(a)
    return vxqa_torch.decode(a.pop("q"), a.pop("k_cache"), a.pop("v_cache"), a.pop("block_table"),
                             a.pop("seq_lens"), **a, **kw)


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


# (what is wrong, the argument named, a regex of the refusal's reason, how to make it wrong)
DECODE_CASES = [
    ("q float32", "q", r"dtype Float is not supported", lambda a: a.update(q=a["q"].float())),
    ("q float8", "q", r"dtype Float8_e5m2 is not supported", lambda a: a.update(q=a["q"].to(torch.float8_e5m2))),
    ("q 2-D", "q", r"\(3 dims\)", lambda a: a.update(q=a["q"][0])),
    ("q rows strided", "q", r"last dimension must be contiguous", lambda a: a.update(q=strided_like(a["q"]))),
    ("q heads not a multiple of KV heads", "q", r"not a multiple of the cache's 2 KV heads",
     lambda a: a.update(q=a["q"][:, :5], out=a["out"][:, :5])),
    ("q head dim", "q", r"the cache's head_dim", lambda a: a.update(q=a["q"][..., :32], out=a["out"][..., :32])),
    ("k_cache float32", "k_cache", r"dtype Float is not supported",
     lambda a: a.update(k_cache=a["k_cache"].float(), v_cache=a["v_cache"].float())),
    ("k_cache 3-D", "k_cache", r"\(4 dims\)", lambda a: a.update(k_cache=a["k_cache"][0], v_cache=a["v_cache"][0])),
    ("v_cache dtype", "v_cache", r"dtype Float8_e5m2 differs from k_cache's",
     lambda a: a.update(v_cache=a["v_cache"].view(torch.float8_e5m2))),
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
    ("out dtype", "out", r"dtype Float differs from q's", lambda a: a.update(out=a["out"].float())),
    ("out float16 for bfloat16 q", "out", r"differs from q's BFloat16", lambda a: a.update(q=a["q"].bfloat16())),
    ("out shape", "out", r"shape .* differs from q's", lambda a: a.update(out=a["out"][:1])),
    ("lse dtype", "lse", r"dtype Half is not supported", lambda a: a.update(lse=a["lse"].half())),
    ("lse shape", "lse", r"must be \[batch, num_q_heads\]", lambda a: a.update(lse=a["lse"][:, :1])),
    ("errors int64", "errors", r"dtype Long is not supported", lambda a: a.update(errors=a["errors"].long())),
    ("errors two words", "errors", r"one int32 word",
     lambda a: a.update(errors=torch.zeros_like(a["errors"].repeat(2)))),
    ("k_scale float64 tensor", "k_scale", r"dtype Double is not supported",
     lambda a: a.update(k_scale=a["lse"].new_ones((), dtype=torch.float64))),
    ("v_scale two elements", "v_scale", r"one float32 element", lambda a: a.update(v_scale=a["lse"].new_ones(2))),
    ("max_context past the table", "max_context", r"block_table\.size\(1\) \* page_size",
     lambda a: a.update(max_context=MAX_PAGES * P + 1)),
]

APPEND_CASES = [
    ("key float32", "key", r"dtype Float is not supported",
     lambda a: a.update(key=a["key"].float(), value=a["value"].float())),
    ("key 2-D", "key", r"\(3 dims\)", lambda a: a.update(key=a["key"][0], value=a["value"][0])),
    ("key rows strided", "key", r"last dimension must be contiguous",
     lambda a: a.update(key=strided_like(a["key"]))),
    ("value shape", "value", r"differs from key's", lambda a: a.update(value=a["value"][:-1])),
    ("value dtype", "value", r"dtype Half differs from key's", lambda a: a.update(value=a["value"].half())),
    ("slot_mapping int32", "slot_mapping", r"dtype Int is not supported",
     lambda a: a.update(slot_mapping=a["slot_mapping"].int())),
    ("slot_mapping length", "slot_mapping", r"key's num_tokens",
     lambda a: a.update(slot_mapping=a["slot_mapping"][:-1])),
    ("k_cache bfloat16", "k_cache", r"dtype BFloat16 is not supported",
     lambda a: a.update(k_cache=a["k_cache"].bfloat16(), v_cache=a["v_cache"].bfloat16())),
    ("v_cache strides", "v_cache", r"one set of cache strides",
     lambda a: a.update(v_cache=other_strides(a["v_cache"]))),
    ("key heads", "key", r"the cache's num_kv_heads",
     lambda a: a.update(key=a["key"][:, :1], value=a["value"][:, :1])),
    ("key head dim", "key", r"the cache's head_dim",
     lambda a: a.update(key=a["key"][..., :32], value=a["value"][..., :32])),
    ("errors int16", "errors", r"dtype Short is not supported", lambda a: a.update(errors=a["errors"].short())),
    ("k_scale float16 tensor", "k_scale", r"dtype Half is not supported",
     lambda a: a.update(k_scale=a["errors"].new_ones((), dtype=torch.half))),
]


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def test_schemas_declare_what_they_mutate():
    assert str(torch.ops.vxqa.decode_out.default._schema) == (
        "vxqa::decode_out(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, Tensor seq_lens, "
        "float softmax_scale, float k_scale, float v_scale, Tensor? k_scale_tensor, Tensor? v_scale_tensor, "
        "int max_context, Tensor(a!) out, Tensor(b!)? lse, Tensor(c!)? errors) -> ()")
    assert str(torch.ops.vxqa.append_kv.default._schema) == (
        "vxqa::append_kv(Tensor key, Tensor value, Tensor slot_mapping, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "float k_scale, float v_scale, Tensor? k_scale_tensor, Tensor? v_scale_tensor, Tensor(c!)? errors) -> ()")


OPS = {"decode": (decode_args, call_decode), "append_kv": (append_args, call_append)}
CASES = [("decode", *c) for c in DECODE_CASES] + [("append_kv", *c) for c in APPEND_CASES]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op,what,field,reason,spoil", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_each_op_names_the_bad_argument(device, op, what, field, reason, spoil):
    make_args, call = OPS[op]
    a = make_args(device)
    spoil(a)
    with pytest.raises(ValueError, match=rf"^{field}: .*{reason}"):
        call(a)


def test_cpu_tensors_are_refused_after_every_other_check():
    with pytest.raises(ValueError, match=r"^q: must be a CUDA tensor"):
        call_decode(decode_args("cpu"))
    with pytest.raises(ValueError, match=r"^key: must be a CUDA tensor"):
        call_append(append_args("cpu"))


def test_fake_tensors_give_out_shape_dtype_device_and_check_arguments():
    with FakeTensorMode():
        a = decode_args("cuda")
        out = call_decode({k: v for k, v in a.items() if k != "out"})
        assert out.shape == a["q"].shape and out.dtype == torch.half and out.device.type == "cuda"
        call_append(append_args("cuda"))
        a["block_table"] = a["block_table"][:1]
        with pytest.raises(ValueError, match=r"^block_table: "):
            call_decode(a)


def test_opcheck_on_meta_tensors():
    a = decode_args("meta")
    scale = torch.ones((), device="meta")
    torch.library.opcheck(torch.ops.vxqa.decode_out.default,
                          (a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"], 0.125, 1.0, 1.0,
                           scale, None, 0, a["out"], a["lse"], a["errors"]))
    b = append_args("meta")
    torch.library.opcheck(torch.ops.vxqa.append_kv.default,
                          (b["key"], b["value"], b["slot_mapping"], b["k_cache"], b["v_cache"], 1.0, 0.5, None,
                           scale, b["errors"]))


def test_torch_compile_traces_both_ops_with_dynamic_shapes():
    def layer(q, key, value, slots, k_cache, v_cache, block_table, seq_lens):
        vxqa_torch.append_kv(key, value, slots, k_cache, v_cache)
        return vxqa_torch.decode(q, k_cache, v_cache, block_table, seq_lens) * 2

    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True, dynamic=True)
    for batch in (2, 3):  # a second batch size reuses the dynamic graph
        a, b = decode_args("meta"), append_args("meta")
        q = torch.empty(batch, HKV * G, D, dtype=torch.half, device="meta")
        out = compiled(q, b["key"].half(), b["value"].half(), b["slot_mapping"], a["k_cache"], a["v_cache"],
                       torch.empty(batch, MAX_PAGES, dtype=torch.int32, device="meta"),
                       torch.empty(batch, dtype=torch.int32, device="meta"))
        assert out.shape == q.shape and out.dtype == torch.half
