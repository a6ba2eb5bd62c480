// vxqa/numeric/kv_type.cuh — the KV cache's element type, and what follows from it.
//
// The element type, not its size, picks a tile's converter: the tile geometries and the
// consumers are templated on it (two formats of one byte, E5M2 and E4M3, convert
// differently), and only the paged addressing works in bytes.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {

// The cache's element format. kUnset is what a parameter struct holds until the caller says
// which format its cache has: the bytes alone do not tell E5M2 from E4M3 (vLLM's "fp8"), so
// the format is never assumed. kE4M3 is OCP's float8_e4m3fn (numeric/e4m3.cuh); kBf16 is
// read by the SM80 body only (the bf16 MMA is sm_80+), with bf16 q.
enum class KvType { kUnset, kE5M2, kFp16, kE4M3, kBf16 };

// "e5m2", "e4m3", "fp16", "bf16", or "unset".
VXQA_HD const char* kv_type_name(KvType t) {
  return t == KvType::kE5M2   ? "e5m2"
         : t == KvType::kE4M3 ? "e4m3"
         : t == KvType::kFp16 ? "fp16"
         : t == KvType::kBf16 ? "bf16"
                              : "unset";
}

// An FP8 format: one byte a code, decoded to fp16 before the MMAs.
VXQA_HD constexpr bool kv_type_is_fp8(KvType t) { return t == KvType::kE5M2 || t == KvType::kE4M3; }

// kNonFiniteBits: the bits of an element that are all set in exactly its NaN and infinite
// codes.
template <KvType kKv>
struct KvTraits;
template <>
struct KvTraits<KvType::kE5M2> {
  static constexpr int kElemBytes = 1;
  static constexpr const char* kName = "e5m2";
  static constexpr uint32_t kNonFiniteBits = 0x7Cu;  // exponent all ones: ±inf and NaN
};
template <>
struct KvTraits<KvType::kE4M3> {
  static constexpr int kElemBytes = 1;
  static constexpr const char* kName = "e4m3";
  static constexpr uint32_t kNonFiniteBits = 0x7Fu;  // S.1111.111: NaN (no infinities)
};
template <>
struct KvTraits<KvType::kFp16> {
  static constexpr int kElemBytes = 2;
  static constexpr const char* kName = "fp16";
  static constexpr uint32_t kNonFiniteBits = 0x7C00u;  // exponent all ones: ±inf and NaN
};
template <>
struct KvTraits<KvType::kBf16> {
  static constexpr int kElemBytes = 2;
  static constexpr const char* kName = "bf16";
  static constexpr uint32_t kNonFiniteBits = 0x7F80u;  // exponent all ones: ±inf and NaN
};

}  // namespace vxqa
