// tensor_checks.h — the torch-side checks of the ops' arguments. Each raises with the
// argument's name first, "name: why", as vxqa's Status::message() does: ValueError for a
// bad argument (TORCH_CHECK_VALUE), RuntimeError for a CUDA failure.
#pragma once
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vxqa/api/params.cuh>
#include <vxqa/kernel/config.cuh>

namespace vxqa_torch {

// The messages hold no streamed number: every integer goes in through std::to_string, and a
// shape as dims(). On the H200 image (its /opt/gcc g++) an integer streamed into c10::str's
// ostringstream crashed the process inside this library's own copy of
// ostream::_M_insert<long> (docs/torch.md); strings and const char* stream fine there.
inline std::string num(int64_t v) { return std::to_string(v); }

// A floating-point value as printf's %g writes it ("50", "-1", "nan", "inf", "1e+39"), as
// Python's f"{x:g}" does in the fake kernels.
inline std::string flt(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// A shape or strides as "[2, 6, 64]".
inline std::string dims(c10::IntArrayRef v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

inline void check_status(const vxqa::Status& s) {
  if (s.code() == vxqa::StatusCode::kCudaError) TORCH_CHECK(false, s.message());
  TORCH_CHECK_VALUE(s.ok(), s.message());
}

inline void check_dim(const at::Tensor& t, const char* name, int64_t dim, const char* shape) {
  TORCH_CHECK_VALUE(t.dim() == dim, name, ": must be ", shape, " (", num(dim), " dims), got shape ", dims(t.sizes()));
}

inline void check_dtype(const at::Tensor& t, const char* name, std::initializer_list<at::ScalarType> allowed) {
  for (at::ScalarType s : allowed)
    if (t.scalar_type() == s) return;
  std::string names;
  for (at::ScalarType s : allowed) names += std::string(names.empty() ? "" : " or ") + c10::toString(s);
  TORCH_CHECK_VALUE(false, name, ": dtype ", t.scalar_type(), " is not supported (", names, ")");
}

inline void check_size(const at::Tensor& t, const char* name, int64_t d, int64_t want, const char* what) {
  TORCH_CHECK_VALUE(t.size(d) == want, name, ": size(", num(d), ") is ", num(t.size(d)), ", must be ", num(want), " (", what,
                    "); shape ", dims(t.sizes()));
}

// The last dimension contiguous (vxqa reads rows with 16-byte loads); other strides free.
inline void check_rows_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.size(-1) <= 1 || t.stride(-1) == 1, name, ": the last dimension must be contiguous (stride 1), "
                    "got strides ", dims(t.strides()));
}

inline void check_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.is_contiguous(), name, ": must be contiguous, got strides ", dims(t.strides()));
}

inline int to_int(int64_t v, const char* name) {
  TORCH_CHECK_VALUE(v <= std::numeric_limits<int>::max(), name, ": ", num(v), " does not fit in an int");
  return static_cast<int>(v);
}

// A one-word int32 error tensor, into which the op ORs its error bits.
inline void check_errors(const std::optional<at::Tensor>& errors) {
  if (!errors) return;
  check_dtype(*errors, "errors", {at::kInt});
  TORCH_CHECK_VALUE(errors->numel() == 1, "errors: must hold one int32 word, got shape ", dims(errors->sizes()));
}

// A per-tensor scale given as a device tensor: one fp32 element (0-dim or [1]).
inline void check_scale_tensor(const std::optional<at::Tensor>& t, const char* name) {
  if (!t) return;
  check_dtype(*t, name, {at::kFloat});
  TORCH_CHECK_VALUE(t->numel() == 1, name, ": must hold one float32 element, got shape ", dims(t->sizes()));
}

// The cache's element format from vLLM's kv_cache_dtype string and the cache tensor's dtype
// (`name` is the tensor, "k_cache"). Never guessed: a byte cache may hold E5M2 or E4M3 codes,
// so "auto" refuses uint8 and the caller names the format ("fp8_e5m2", or "fp8" / "fp8_e4m3":
// vLLM's "fp8" is E4M3). A float8 dtype says its own format, which the string must not contradict.
// Under "auto" float16 and bfloat16 are their own formats (vLLM's "auto": the model's dtype).
inline vxqa::KvType cache_format(const std::string& kv_cache_dtype, at::ScalarType dtype, const char* name) {
  const bool e5m2 = kv_cache_dtype == "fp8_e5m2";
  const bool e4m3 = kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3";
  TORCH_CHECK_VALUE(kv_cache_dtype == "auto" || e5m2 || e4m3, "kv_cache_dtype: \"", kv_cache_dtype,
                    "\" is not one of \"auto\" (the cache's dtype says), \"fp8_e5m2\", \"fp8\" or "
                    "\"fp8_e4m3\" (E4M3)");
  if (e5m2 || e4m3) {
    const at::ScalarType own = e5m2 ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn;
    const at::ScalarType other = e5m2 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
    TORCH_CHECK_VALUE(dtype != other, name, ": dtype ", dtype, " holds ", e5m2 ? "E4M3" : "E5M2",
                      " codes, but kv_cache_dtype \"", kv_cache_dtype, "\" means ", e5m2 ? "E5M2" : "E4M3",
                      " (for this cache pass kv_cache_dtype ",
                      e5m2 ? "\"auto\", \"fp8\" or \"fp8_e4m3\"" : "\"auto\" or \"fp8_e5m2\"", ")");
    TORCH_CHECK_VALUE(dtype == at::kByte || dtype == own, name, ": dtype ", dtype, " does not hold kv_cache_dtype \"",
                      kv_cache_dtype, "\" (Byte or ", own, ")");
    return e5m2 ? vxqa::KvType::kE5M2 : vxqa::KvType::kE4M3;
  }
  TORCH_CHECK_VALUE(dtype != at::kByte, name, ": a uint8 cache holds fp8 codes of an unstated format (E5M2 or E4M3; "
                    "vLLM's \"fp8\" means E4M3), which kv_cache_dtype \"auto\" cannot tell: pass "
                    "kv_cache_dtype=\"fp8_e5m2\" (E5M2) or \"fp8\" / \"fp8_e4m3\" (E4M3), or the cache as a "
                    "torch.float8_e5m2 or torch.float8_e4m3fn view");
  TORCH_CHECK_VALUE(dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat8_e5m2 ||
                        dtype == at::kFloat8_e4m3fn,
                    name, ": dtype ", dtype, " is not supported (Half, BFloat16, Float8_e5m2 or Float8_e4m3fn, or "
                    "Byte with kv_cache_dtype \"fp8_e5m2\", \"fp8\" or \"fp8_e4m3\")");
  return dtype == at::kHalf          ? vxqa::KvType::kFp16
         : dtype == at::kBFloat16    ? vxqa::KvType::kBf16
         : dtype == at::kFloat8_e5m2 ? vxqa::KvType::kE5M2
                                     : vxqa::KvType::kE4M3;
}

// q's dtype against the cache's format (`q_name`: "q", or plan_decode's "q_dtype"): a bf16
// cache runs on the bf16 MMA, which takes q as it is, so fp16 q is refused, never converted.
inline void check_q_for_cache(at::ScalarType q, vxqa::KvType cache_type, const char* q_name, const char* cache_name) {
  TORCH_CHECK_VALUE(cache_type != vxqa::KvType::kBf16 || q == at::kBFloat16, q_name, ": dtype ", q,
                    " with a bf16 cache (", cache_name, " BFloat16): a bf16 cache takes BFloat16 q and out only");
}

// The paged cache, K and V alike: [num_pages, page_size, num_kv_heads, head_dim] (vLLM NHD),
// of the format kv_cache_dtype names, the last dimension contiguous.
inline vxqa::KvType check_cache_pair(const at::Tensor& k, const at::Tensor& v, const std::string& kv_cache_dtype) {
  check_dim(k, "k_cache", 4, "[num_pages, page_size, num_kv_heads, head_dim]");
  const vxqa::KvType format = cache_format(kv_cache_dtype, k.scalar_type(), "k_cache");
  check_rows_contiguous(k, "k_cache");
  TORCH_CHECK_VALUE(v.scalar_type() == k.scalar_type(), "v_cache: dtype ", v.scalar_type(), " differs from k_cache's ",
                    k.scalar_type());
  TORCH_CHECK_VALUE(v.sizes() == k.sizes(), "v_cache: shape ", dims(v.sizes()), " differs from k_cache's ", dims(k.sizes()));
  // A dimension of one row (one page, one token a page, one KV head) never uses its stride,
  // and framework views carry any there.
  for (int64_t d = 0; d < k.dim(); ++d)
    TORCH_CHECK_VALUE(k.size(d) <= 1 || v.stride(d) == k.stride(d), "v_cache: strides ", dims(v.strides()),
                      " differ from k_cache's ", dims(k.strides()), " (vxqa takes one set of cache strides)");
  return format;
}

// A tensor argument and its name; a null tensor is an optional one not given.
struct NamedTensor {
  const at::Tensor* tensor;
  const char* name;
};
inline const at::Tensor* given(const std::optional<at::Tensor>& t) { return t ? &*t : nullptr; }

// Every tensor argument on the first one's CUDA device (checked last: the shape checks above
// run on CPU and meta tensors too, so they can be tested without a GPU). Returns the device.
inline at::Device check_devices(std::initializer_list<NamedTensor> args) {
  const at::Device device = args.begin()->tensor->device();
  for (const NamedTensor& a : args) {
    if (!a.tensor) continue;
    TORCH_CHECK_VALUE(a.tensor->device().is_cuda(), a.name, ": must be a CUDA tensor, got device ",
                      a.tensor->device().str());
    TORCH_CHECK_VALUE(a.tensor->device() == device, a.name, ": is on ", a.tensor->device().str(), ", ",
                      args.begin()->name, " on ", device.str());
  }
  return device;
}

}  // namespace vxqa_torch
