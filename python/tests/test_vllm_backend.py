"""docs/vllm.md's example, runnable: vxqa's ops driven exactly as a vLLM attention backend
drives its cache writer and decode kernel. vLLM's names are kept (AttentionMetadata's
slot_mapping, seq_lens, block_table; the layer's _k_scale / _v_scale tensors; kv_cache_dtype).

What a serving step looks like here, as in vLLM with full CUDA graphs for decode:
- the batch is padded to the captured size: padding rows have seq_len 0, slot -1, a block
  table row of zeros, and key/value rows of garbage (NaN here) that must not be read;
- one graph is captured once and replayed every step while the lengths grow;
- outside a graph (vLLM's eager or piecewise mode) key/value keep the padded row count while
  slot_mapping holds only the real tokens.
The cache is vLLM's uint8 fp8 one (E5M2 or E4M3, its string says), or a bf16 model's own bf16
cache under "auto" (sm_80 and newer).
Outputs are compared with the float64 reference (vxqa_torch/reference.py) within the tests'
bound, and the cache rows written with the CPU encoder, bit for bit. GPU only: skips on CPU.
And docs/vllm.md's "Attention variants": gpt-oss-style layers (a 128-token window on every
other layer, bf16 sinks on all) through two plans, vLLM's per-layer arguments passed as they
come (sliding_window None on global layers, logits_soft_cap None)."""
import math
from dataclasses import dataclass

import pytest
import torch

import vxqa_torch
from problems import assert_matches_reference, encode, expected_outputs, random_problem, skip_bf16_cache_below_sm80

PAD_SLOT_ID = -1  # vLLM's slot for a padding token


@dataclass
class DecodeMetadata:
    """The fields of vLLM's attention metadata that a decode step uses (a decode-only batch:
    one query token per request)."""
    slot_mapping: torch.Tensor  # int64 [num_tokens]: where this step's K/V rows go
    seq_lens: torch.Tensor  # int32 [num_reqs]: tokens in the cache *including* this step's
    block_table: torch.Tensor  # int32 [num_reqs, max_blocks_per_req]


class VxqaDecodeBackend:
    """What a vLLM AttentionImpl's decode path does with vxqa, in one place."""

    def __init__(self, num_heads, num_kv_heads, head_size, block_size, max_num_seqs, max_model_len, kv_cache_dtype,
                 cache_dtype, model_dtype, device):
        self.num_heads, self.num_kv_heads, self.head_size = num_heads, num_kv_heads, head_size
        self.kv_cache_dtype = kv_cache_dtype
        # Once, when the backend is built: vxqa's Config and split plan for this shape and
        # capacity, and its workspace. Every layer of the model shares it (one at a time).
        self.plan = vxqa_torch.DecodePlan(
            num_q_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_size, page_size=block_size,
            max_batch=max_num_seqs, max_context=max_model_len, q_dtype=model_dtype, kv_cache_dtype=kv_cache_dtype,
            cache_dtype=cache_dtype, device=device)

    def forward(self, layer, query, key, value, kv_cache, metadata, output, errors):
        """query [num_tokens, num_heads * head_size], key/value [num_tokens, num_kv_heads * head_size]
        (num_tokens may be padded past the real ones); kv_cache [2, num_blocks, block_size,
        num_kv_heads, head_size] (vLLM's FlashAttention layout); output like query."""
        key_cache, value_cache = kv_cache.unbind(0)
        # vLLM's reshape_and_cache_flash: slot_mapping may be shorter than key/value.
        vxqa_torch.append_kv(key.view(-1, self.num_kv_heads, self.head_size),
                             value.view(-1, self.num_kv_heads, self.head_size), metadata.slot_mapping, key_cache,
                             value_cache, kv_cache_dtype=self.kv_cache_dtype, k_scale=layer._k_scale,
                             v_scale=layer._v_scale, errors=errors)
        num_reqs = metadata.seq_lens.shape[0]
        q = query.view(-1, self.num_heads, self.head_size)[:num_reqs]
        out = output.view(-1, self.num_heads, self.head_size)[:num_reqs]
        self.plan.run(q, key_cache, value_cache, metadata.block_table, metadata.seq_lens, k_scale=layer._k_scale,
                      v_scale=layer._v_scale, out=out, errors=errors)
        return output


@dataclass
class Layer:
    _k_scale: torch.Tensor  # float32, 0-dim, on the device: vLLM's per-layer scales
    _v_scale: torch.Tensor


class Engine:
    """A model's decode loop around one attention layer: requests, their blocks, and the
    metadata a scheduler would build each step (padded to the graph's batch)."""

    def __init__(self, device, *, kv_cache_dtype="fp8_e5m2", cache_dtype=torch.uint8, hnd=False, seed=0):
        self.g = torch.Generator().manual_seed(seed)
        self.device = device
        self.num_heads, self.num_kv_heads, self.head_size, self.block_size = 8, 2, 128, 16
        self.max_num_seqs, self.max_blocks = 8, 12  # a request holds up to 192 tokens
        self.num_blocks = self.max_num_seqs * self.max_blocks + 3
        self.cache_dtype, self.kv_cache_dtype = cache_dtype, kv_cache_dtype
        # vLLM's "auto": the cache has the model's dtype; an fp8 cache here serves an fp16 model.
        self.model_dtype = torch.bfloat16 if cache_dtype == torch.bfloat16 else torch.float16
        shape = (self.num_blocks, self.block_size, self.num_kv_heads, self.head_size)
        if hnd:  # FlashInfer's HND: [blocks, 2, heads, block_size, head_size] in memory, viewed as NHD
            kv = torch.zeros(self.num_blocks, 2, self.num_kv_heads, self.block_size, self.head_size,
                             dtype=cache_dtype, device=device)
            self.kv_cache = kv.permute(1, 0, 3, 2, 4)
        else:  # FlashAttention's [2, blocks, block_size, heads, head_size]
            self.kv_cache = torch.zeros((2,) + shape, dtype=cache_dtype, device=device)
        self.layer = Layer(torch.tensor(0.5, device=device), torch.tensor(2.0, device=device))
        self.backend = VxqaDecodeBackend(self.num_heads, self.num_kv_heads, self.head_size, self.block_size,
                                         self.max_num_seqs, self.max_blocks * self.block_size, kv_cache_dtype,
                                         cache_dtype, self.model_dtype, device)
        # Each request's blocks: a random permutation, as an allocator leaves them.
        self.blocks = torch.randperm(self.num_blocks, generator=self.g)[: self.max_num_seqs * self.max_blocks]
        self.blocks = self.blocks.view(self.max_num_seqs, self.max_blocks).int()
        self.written = {}  # slot -> (K row, V row) appended there

    def slot(self, req, position):
        return int(self.blocks[req, position // self.block_size]) * self.block_size + position % self.block_size

    def step_inputs(self, lengths, padded_batch, padded_tokens=None):
        """This step's query/key/value and metadata for requests with `lengths` tokens after it
        (the new token is number length - 1), padded to `padded_batch` rows of metadata and
        `padded_tokens` rows of query/key/value."""
        num_reqs, padded_tokens = len(lengths), padded_tokens or padded_batch
        width = self.num_heads * self.head_size, self.num_kv_heads * self.head_size
        query = torch.randn(padded_tokens, width[0], generator=self.g).to(self.model_dtype)
        key = torch.randn(padded_tokens, width[1], generator=self.g).to(self.model_dtype)
        value = torch.randn(padded_tokens, width[1], generator=self.g).to(self.model_dtype)
        key[num_reqs:] = value[num_reqs:] = math.nan  # padding: must never reach the cache
        slots = [self.slot(r, n - 1) for r, n in enumerate(lengths)] + [PAD_SLOT_ID] * (padded_batch - num_reqs)
        table = torch.zeros(padded_batch, self.max_blocks, dtype=torch.int32)
        table[:num_reqs] = self.blocks[:num_reqs]
        seq_lens = torch.tensor(list(lengths) + [0] * (padded_batch - num_reqs), dtype=torch.int32)
        for r, n in enumerate(lengths):
            self.written[self.slot(r, n - 1)] = (key[r], value[r])
        return query, key, value, DecodeMetadata(torch.tensor(slots, dtype=torch.long), seq_lens, table)

    def check(self, query, output, metadata, errors):
        """out against the float64 reference; the cache against the CPU encoder."""
        torch.cuda.synchronize()
        assert errors.item() == 0
        key_cache, value_cache = (c.cpu() for c in self.kv_cache.unbind(0))
        num_reqs = len(metadata.seq_lens)
        q = query.view(-1, self.num_heads, self.head_size)[:num_reqs]
        out = output.cpu().view(-1, self.num_heads, self.head_size)[:num_reqs]
        want = expected_outputs(q, key_cache, value_cache, metadata.block_table, metadata.seq_lens, None,
                                self.layer._k_scale.item(), self.layer._v_scale.item(),
                                kv_cache_dtype=self.kv_cache_dtype)
        # vLLM asks for no LSE: only out is compared.
        assert_matches_reference(out, None, want, metadata.seq_lens)
        slots = sorted(self.written)
        for cache, which, scale in ((key_cache, 0, 0.5), (value_cache, 1, 2.0)):
            rows = cache.reshape(-1, self.num_kv_heads, self.head_size).view(torch.uint8)
            want = torch.stack([encode(self.written[s][which].view(self.num_kv_heads, -1).cpu(), scale,
                                       self.cache_dtype, self.kv_cache_dtype) for s in slots])
            assert torch.equal(rows[slots], want.view(torch.uint8)), f"cache {which}: a written row differs"
            untouched = torch.ones(rows.shape[0], dtype=torch.bool)
            untouched[slots] = False
            assert rows[untouched].count_nonzero().item() == 0, f"cache {which}: a row no slot names was written"


@pytest.mark.parametrize("hnd", [False, True], ids=["NHD", "HND view"])
# vLLM's uint8 cache, E5M2 or E4M3 (its "fp8"); a bf16 model's cache under "auto"
@pytest.mark.parametrize("kv_cache_dtype,cache_dtype", [("fp8_e5m2", torch.uint8), ("fp8", torch.uint8),
                                                        ("auto", torch.bfloat16)], ids=["fp8_e5m2", "fp8", "auto bf16"])
def test_vllm_decode_steps_in_a_captured_graph(cuda, hnd, kv_cache_dtype, cache_dtype):
    skip_bf16_cache_below_sm80(cache_dtype, cuda)
    engine = Engine(cuda, hnd=hnd, kv_cache_dtype=kv_cache_dtype, cache_dtype=cache_dtype)
    d = lambda t: t.to(cuda)  # noqa: E731
    errors = torch.zeros(1, dtype=torch.int32, device=cuda)

    # Prompts already in the cache (a prefill's writes: append_kv with one slot per token).
    prompts = [37, 1, 100, 16, 150]
    for r, n in enumerate(prompts):
        k = torch.randn(n, engine.num_kv_heads, engine.head_size, generator=engine.g).to(engine.model_dtype)
        v = torch.randn(n, engine.num_kv_heads, engine.head_size, generator=engine.g).to(engine.model_dtype)
        slots = torch.tensor([engine.slot(r, i) for i in range(n)])
        vxqa_torch.append_kv(d(k), d(v), d(slots), *engine.kv_cache.unbind(0), kv_cache_dtype=kv_cache_dtype,
                             k_scale=engine.layer._k_scale, v_scale=engine.layer._v_scale, errors=errors)
        for i, s in enumerate(slots.tolist()):
            engine.written[s] = (k[i].flatten(), v[i].flatten())

    # An eager step (vLLM's eager / piecewise mode): key/value padded to 8 rows, slot_mapping
    # holding the 5 real tokens only.
    lengths = [n + 1 for n in prompts]
    query, key, value, meta = engine.step_inputs(lengths, padded_batch=5, padded_tokens=8)
    output = torch.full_like(d(query), math.nan)
    engine.backend.forward(engine.layer, d(query), d(key), d(value), engine.kv_cache,
                           DecodeMetadata(d(meta.slot_mapping), d(meta.seq_lens), d(meta.block_table)), output, errors)
    engine.check(query, output, meta, errors)

    # Full CUDA graph of the padded batch of 8, captured once: its inputs are static buffers
    # the loop refills, as vLLM's model runner does.
    static_q = torch.zeros(8, engine.num_heads * engine.head_size, dtype=engine.model_dtype, device=cuda)
    static_k = torch.zeros(8, engine.num_kv_heads * engine.head_size, dtype=engine.model_dtype, device=cuda)
    static_v = torch.zeros_like(static_k)
    static_meta = DecodeMetadata(torch.full((8,), PAD_SLOT_ID, dtype=torch.long, device=cuda),
                                 torch.zeros(8, dtype=torch.int32, device=cuda),
                                 torch.zeros(8, engine.max_blocks, dtype=torch.int32, device=cuda))
    static_out = torch.zeros_like(static_q)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        engine.backend.forward(engine.layer, static_q, static_k, static_v, engine.kv_cache, static_meta, static_out,
                               errors)
    for step in range(6):  # the 5 requests grow by one token a step; 3 padding rows
        lengths = [n + 1 for n in lengths]
        query, key, value, meta = engine.step_inputs(lengths, padded_batch=8)
        for static, new in ((static_q, query), (static_k, key), (static_v, value),
                            (static_meta.slot_mapping, meta.slot_mapping), (static_meta.seq_lens, meta.seq_lens),
                            (static_meta.block_table, meta.block_table)):
            static.copy_(new)
        static_out.fill_(math.nan)
        graph.replay()
        engine.check(query, static_out.cpu(), meta, errors)
        # padding rows: length 0, so out 0 (vLLM ignores them)
        assert static_out.view(8, engine.num_heads, -1)[5:].eq(0).all(), f"step {step}"


def test_vllm_uint8_cache_needs_its_format_stated():
    """vLLM allocates fp8 caches as uint8: "auto" cannot tell E5M2 from E4M3 and refuses;
    "fp8" (vLLM's default, E4M3), "fp8_e4m3" and "fp8_e5m2" state the format, so the plan gets
    as far as the device (refused before the device is asked anything, so this runs on CPU)."""
    with pytest.raises(ValueError, match=r"^cache_dtype: a uint8 cache holds fp8 codes of an unstated format"):
        Engine(torch.device("cpu"), kv_cache_dtype="auto")
    for stated in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        with pytest.raises(ValueError, match=r"^device: must be a CUDA device, got cpu"):
            Engine(torch.device("cpu"), kv_cache_dtype=stated)


def test_vllm_auto_takes_a_bf16_models_cache():
    """vLLM's "auto" for a bf16 model: a bfloat16 cache, and bf16 query, get as far as the
    device (on CPU here); the fp8 strings refuse that cache (it holds no fp8 codes)."""
    with pytest.raises(ValueError, match=r"^device: must be a CUDA device, got cpu"):
        Engine(torch.device("cpu"), kv_cache_dtype="auto", cache_dtype=torch.bfloat16)
    for fp8 in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        with pytest.raises(ValueError, match=rf"^cache_dtype: dtype BFloat16 does not hold kv_cache_dtype \"{fp8}\""):
            Engine(torch.device("cpu"), kv_cache_dtype=fp8, cache_dtype=torch.bfloat16)


@dataclass
class ImplArgs:
    """What vLLM's AttentionImpl.__init__ receives for a layer's variant."""
    sliding_window: object  # Optional[int]
    logits_soft_cap: object  # Optional[float]
    sinks: torch.Tensor  # [num_heads], the model's dtype (gpt-oss: bf16)


def test_vllm_gpt_oss_layers_window_and_sinks(cuda):
    """docs/vllm.md's snippet: a local plan (sliding_window=128, sinks=True) and a global plan
    (sinks=True), the sinks converted to fp32 once, each layer run on its plan with vLLM's
    arguments as they come; the local plan refuses a global layer's None window, the global
    plan a window."""
    layers = [random_problem(900 + i, batch=4, kv_heads=2, group=4, head_dim=64, page_size=16, max_len=400,
                             device=cuda, lengths=[400, 0, 129, 77]) for i in range(4)]
    g = torch.Generator().manual_seed(901)
    impls = [ImplArgs(128 if i % 2 == 0 else None, None, (4 + torch.randn(8, generator=g)).bfloat16().to(cuda))
             for i in range(4)]
    p = layers[0]
    shape = dict(num_q_heads=8, num_kv_heads=2, head_dim=64, page_size=16, max_batch=4, max_context=400,
                 q_dtype=torch.float16, kv_cache_dtype="fp8_e5m2", cache_dtype=torch.uint8, device=cuda)
    local_plan = vxqa_torch.DecodePlan(**shape, sliding_window=128, sinks=True)
    global_plan = vxqa_torch.DecodePlan(**shape, sinks=True)
    sinks = [impl.sinks.float().contiguous() for impl in impls]  # once, at load
    for layer, impl, layer_sinks in zip(layers, impls, sinks):
        plan = local_plan if impl.sliding_window else global_plan
        out = plan.run(layer.q, layer.k_cache, layer.v_cache, layer.block_table, layer.seq_lens, k_scale=layer.k_scale,
                       v_scale=layer.v_scale, sliding_window=impl.sliding_window, logit_softcap=impl.logits_soft_cap,
                       sinks=layer_sinks)
        torch.cuda.synchronize()
        want = layer.reference(sliding_window=impl.sliding_window or 0, sinks=layer_sinks)
        assert_matches_reference(out, None, want, layer.seq_lens)
    with pytest.raises(ValueError, match=r"^sliding_window: 0 is outside 1\.\.128"):
        local_plan.run(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, sliding_window=None, sinks=sinks[0])
    with pytest.raises(ValueError, match=r"^sliding_window: 128 given to a plan made without a window"):
        global_plan.run(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, sliding_window=128, sinks=sinks[0])
    with pytest.raises(ValueError, match=r"^sinks: dtype BFloat16 is not supported \(Float\)"):
        global_plan.run(p.q, p.k_cache, p.v_cache, p.block_table, p.seq_lens, sinks=impls[1].sinks)
