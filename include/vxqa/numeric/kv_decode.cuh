// vxqa/numeric/kv_decode.cuh — a cache element type's codes to the fp16 the MMAs take, and
// the factor the decoded values are short of.
//
// Both CTA bodies decode through KvDecode, so the element type (and, for E4M3, the path)
// picks the converter at compile time:
//   E5M2  one PRMT a pair of codes, exact (numeric/e5m2.cuh);
//   E4M3  the hardware cvt a pair on sm_89 and newer (exact values), else the bit-move of
//         numeric/e4m3.cuh: four instructions a pair, each value short of 2^8;
//   fp16, bf16  nothing to decode (bf16 goes to the bf16 MMA of the SM80 body).
// The 2^8 joins the scales where they are applied once (the scores' scale, the outputs'),
// never a code: factor() says what it is on the arch being compiled, so the host never
// needs to know which path the device runs.
#pragma once
#include <vxqa/arch/cvt_e4m3.cuh>
#include <vxqa/common.cuh>
#include <vxqa/numeric/e4m3.cuh>
#include <vxqa/numeric/e5m2.cuh>
#include <vxqa/numeric/kv_type.cuh>

namespace vxqa {

// How an E4M3 cache is decoded: kAuto takes the hardware cvt where the kernel is compiled for
// sm_89 and newer and the bit-move elsewhere; kSoftware the bit-move everywhere (what an
// A100 or a V100 runs, so that a newer GPU can test and time it).
enum class E4m3Decode { kAuto, kSoftware };

template <KvType kKv, E4m3Decode kE4m3 = E4m3Decode::kAuto>
struct KvDecode {
  static_assert(kKv == KvType::kE5M2 || kKv == KvType::kE4M3 || kKv == KvType::kFp16 || kKv == KvType::kBf16,
                "KvDecode: a cache element type is E5M2, E4M3, fp16 or bf16");
  static constexpr bool kConverts = kv_type_is_fp8(kKv);  // fp16 and bf16 are read as they are

  // Whether any element of a 4-byte word of the cache, as stored (four FP8 codes or two
  // 16-bit values), is NaN or infinite.
  VXQA_HD static constexpr bool has_non_finite(uint32_t word) {
    constexpr int kBits = 8 * KvTraits<kKv>::kElemBytes;
    constexpr uint32_t kMask = KvTraits<kKv>::kNonFiniteBits;
    bool found = false;
    for (int shift = 0; shift < 32; shift += kBits) found = found || ((word >> shift) & kMask) == kMask;
    return found;
  }

  // The word with every NaN or infinite element set to 0.
  VXQA_HD static constexpr uint32_t zero_non_finite(uint32_t word) {
    constexpr int kBits = 8 * KvTraits<kKv>::kElemBytes;
    constexpr uint32_t kMask = KvTraits<kKv>::kNonFiniteBits;
    constexpr uint32_t kElem = kBits == 32 ? 0xFFFFFFFFu : (1u << kBits) - 1u;
    for (int shift = 0; shift < 32; shift += kBits)
      if (((word >> shift) & kMask) == kMask) word &= ~(kElem << shift);
    return word;
  }

#if VXQA_IS_CUDA_COMPILER
  static constexpr bool kHardware = kKv == KvType::kE4M3 && kE4m3 == E4m3Decode::kAuto && VXQA_HAS_CVT_E4M3;

  // Four codes as the bits of two half2: bytes 0,1 -> .x, bytes 2,3 -> .y (each value
  // divided by factor()).
  VXQA_DEVICE static uint2 four(uint32_t codes) {
    static_assert(kConverts, "KvDecode: a 16-bit cache has nothing to decode");
    if constexpr (kKv == KvType::kE5M2) {
      return e5m2x4_to_half2x2_bits(codes);
    } else if constexpr (kHardware) {
#if VXQA_HAS_CVT_E4M3
      return make_uint2(arch::cvt_rn_f16x2_e4m3x2(uint16_t(codes & 0xFFFFu)),
                        arch::cvt_rn_f16x2_e4m3x2(uint16_t(codes >> 16)));
#endif
    } else {
      return e4m3x4_to_half2x2_bits_scaled(codes);
    }
  }

  // What a decoded value is to be multiplied by: kE4m3HalfScale after the bit-move, else 1
  // (a constant: multiplying by it folds away).
  VXQA_DEVICE static constexpr float factor() {
    return kKv == KvType::kE4M3 && !kHardware ? kE4m3HalfScale : 1.f;
  }
#endif
};

}  // namespace vxqa
