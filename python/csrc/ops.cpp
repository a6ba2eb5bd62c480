// The vxqa operator library: schemas (mutated arguments marked `(a!)`, so torch.compile
// functionalises them and graph capture sees the writes) and the Python module that loads
// it. The kernels are registered in decode_op.cpp and append_kv_op.cpp, the fake kernels in
// vxqa_torch/_fake.py.
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(vxqa, m) {
  // kv_cache_dtype: vLLM's string ("auto": the cache's dtype says; "fp8_e5m2"; "fp8" / "fp8_e4m3": E4M3).
  // softmax_scale None: 1 / sqrt(head_dim), worked out in C++ so that a compiled graph keeps
  // head_dim symbolic.
  // The attention variant, keyword-only and off by default (vxqa::DecodeParams' fields):
  // sliding_window 0 (the whole context) or W > 0 (the last W keys), logit_softcap 0 (off) or
  // cap > 0 (cap * tanh(s / cap)), sinks None or fp32 [num_q_heads] (natural-log logits).
  // plan_decode's variant (vxqa::VariantFlag bits: 1 window, 2 soft-cap, 4 sinks) says which
  // of them decode_planned's runs may use, max_window (> 0, with bit 1) the largest window.
  // Multi-token queries, keyword-only too: q_indptr None (row b of q is sequence b's one
  // token) or int32 [batch + 1] (sequence b's tokens are rows q_indptr[b] .. q_indptr[b + 1] - 1
  // of q, out and lse: vLLM's query_start_loc), max_q_len the most tokens of a sequence (0: the
  // default, min(q.size(0), 16), or the plan's max_q_len for decode_planned where that is less);
  // plan_decode's max_q_len is the plan's (1..16).
  m.def(
      "decode_out(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, Tensor seq_lens, "
      "str kv_cache_dtype, float? softmax_scale, float k_scale, float v_scale, Tensor? k_scale_tensor, "
      "Tensor? v_scale_tensor, int max_context, Tensor(a!) out, Tensor(b!)? lse, Tensor(c!)? errors, *, "
      "int sliding_window=0, float logit_softcap=0., Tensor? sinks=None, Tensor? q_indptr=None, "
      "int max_q_len=0) -> ()");
  m.def(
      "plan_decode(int num_kv_heads, int group_size, int head_dim, int page_size, int max_batch, int max_context, "
      "ScalarType q_dtype, str kv_cache_dtype, ScalarType cache_dtype, Device device, *, int variant=0, "
      "int max_window=0, int max_q_len=1) -> int[]");
  m.def(
      "decode_planned(int[] plan, Tensor(a!) workspace, Tensor q, Tensor k_cache, Tensor v_cache, "
      "Tensor block_table, Tensor seq_lens, str kv_cache_dtype, float? softmax_scale, float k_scale, float v_scale, "
      "Tensor? k_scale_tensor, Tensor? v_scale_tensor, Tensor(b!) out, Tensor(c!)? lse, Tensor(d!)? errors, *, "
      "int sliding_window=0, float logit_softcap=0., Tensor? sinks=None, Tensor? q_indptr=None, "
      "int max_q_len=0) -> ()");
  m.def("describe_plan(int[] plan) -> str");
  m.def(
      "append_kv(Tensor key, Tensor value, Tensor slot_mapping, Tensor(a!) k_cache, Tensor(b!) v_cache, "
      "str kv_cache_dtype, float k_scale, float v_scale, Tensor? k_scale_tensor, Tensor? v_scale_tensor, "
      "Tensor(c!)? errors) -> ()");
}

// `import vxqa_torch._C` runs the registrations above; the module itself is empty.
extern "C" PyObject* PyInit__C() {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "vxqa's torch ops (torch.ops.vxqa)", -1, nullptr};
  return PyModule_Create(&module);
}
