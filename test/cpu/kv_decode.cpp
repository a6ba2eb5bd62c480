// KvDecode::has_non_finite and zero_non_finite on the host: for every element type, every
// code (all 256 FP8 codes, all 65,536 16-bit values) in every position of a word, beside
// finite neighbours, against the float64 reference's decode of that code (written from the
// formats' specs). The decode CTA bodies trust them with a NaN or infinite V that the rows
// of a tile do not all see: found, and set to 0 without touching its neighbours.
#include <vxqa/numeric/kv_decode.cuh>
#include <vxqa/testing/decode_reference.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

namespace {

template <vxqa::KvType kKv>
void check_every_code(vxqa::reference::KvFormat format) {
  using Decode = vxqa::KvDecode<kKv>;
  constexpr int kBits = 8 * vxqa::KvTraits<kKv>::kElemBytes;
  constexpr uint32_t kCodes = 1u << kBits;
  int non_finite = 0;
  for (uint32_t code = 0; code < kCodes; ++code) {
    double value = 0.0;
    if (kBits == 8) {
      const unsigned char byte = static_cast<unsigned char>(code);
      value = vxqa::reference::detail::load_element(&byte, 0, format);
    } else {
      const uint16_t bits = static_cast<uint16_t>(code);
      value = vxqa::reference::detail::load_element(&bits, 0, format);
    }
    const bool want = !std::isfinite(value);
    non_finite += want;
    for (int shift = 0; shift < 32; shift += kBits) {
      const uint32_t word = code << shift;  // the other elements are 0: finite
      if (Decode::has_non_finite(word) != want) {
        FAIL_CHECK(vxqa::kv_type_name(kKv) << " code 0x" << std::hex << code << " at bit " << std::dec << shift
                                           << ": has_non_finite " << !want << ", the reference decodes " << value);
        return;
      }
      // Beside neighbours of 1.0 (finite, not 0): only the code's own bits may go.
      const uint32_t one = kBits == 8 ? (kKv == vxqa::KvType::kE5M2 ? 0x3Cu : 0x38u)
                                      : (kKv == vxqa::KvType::kFp16 ? 0x3C00u : 0x3F80u);
      uint32_t neighbours = 0u;
      for (int other = 0; other < 32; other += kBits)
        if (other != shift) neighbours |= one << other;
      const uint32_t want_word = want ? neighbours : (neighbours | word);
      if (Decode::zero_non_finite(neighbours | word) != want_word) {
        FAIL_CHECK(vxqa::kv_type_name(kKv) << " code 0x" << std::hex << code << " at bit " << std::dec << shift
                                           << ": zero_non_finite gives 0x" << std::hex
                                           << Decode::zero_non_finite(neighbours | word) << ", not 0x" << want_word);
        return;
      }
    }
  }
  // The count the formats define: E5M2 and fp16 2 · (mantissas), E4M3 two NaNs, bf16 2 · 128.
  const int expected = kKv == vxqa::KvType::kE5M2 ? 8 : kKv == vxqa::KvType::kE4M3 ? 2
                     : kKv == vxqa::KvType::kFp16 ? 2048 : 256;
  CHECK(non_finite == expected);
}

}  // namespace

TEST_CASE("has_non_finite finds, and zero_non_finite zeroes, exactly the NaN and infinite codes of every cache type",
          "[kv_decode]") {
  check_every_code<vxqa::KvType::kE5M2>(vxqa::reference::KvFormat::kE5M2);
  check_every_code<vxqa::KvType::kE4M3>(vxqa::reference::KvFormat::kE4M3);
  check_every_code<vxqa::KvType::kFp16>(vxqa::reference::KvFormat::kFp16);
  check_every_code<vxqa::KvType::kBf16>(vxqa::reference::KvFormat::kBf16);
}
