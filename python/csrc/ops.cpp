// The vxqa operator library: schemas (mutated arguments marked `(a!)`, so torch.compile
// functionalises them and graph capture sees the writes) and the Python module that loads
// it. The kernels are registered in decode_op.cpp and append_kv_op.cpp.
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(vxqa, m) {
  m.def(
      "decode_out(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, Tensor seq_lens, "
      "float softmax_scale, float k_scale, float v_scale, Tensor? k_scale_tensor, Tensor? v_scale_tensor, "
      "int max_context, Tensor(a!) out, Tensor(b!)? lse, Tensor(c!)? errors) -> ()");
  m.def(
      "append_kv(Tensor key, Tensor value, Tensor slot_mapping, Tensor(a!) k_cache, Tensor(b!) v_cache, "
      "float k_scale, float v_scale, Tensor? k_scale_tensor, Tensor? v_scale_tensor, Tensor(c!)? errors) -> ()");
}

// `import vxqa_torch._C` runs the registrations above; the module itself is empty.
extern "C" PyObject* PyInit__C() {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "vxqa's torch ops (torch.ops.vxqa)", -1, nullptr};
  return PyModule_Create(&module);
}
