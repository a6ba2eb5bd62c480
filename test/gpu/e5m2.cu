// E5M2 converter on the GPU: vxqa's device forms against cuda_fp8.h's device conversions
// (E5M2, __NV_SATFINITE and __NV_NOSAT) on all 256 codes, all 65,536 halves and 16M mixed
// floats, bit for bit; the vector forms against the scalar ones; and the device results
// against the host's, bit for bit too (on sm_89+ the device's kFinite encode is the hardware
// cvt, the host's the software path).
#include <vxqa/numeric/e5m2.cuh>
#include "e5m2_test_support.h"

#include "gpu_check.cuh"

#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace {

using vxqa::Saturation;
using vxqa_test::DeviceBuffer;

using vxqa_test::hex;
using vxqa_test::mode_name;
using vxqa_test::mixed_float_inputs;
using vxqa_test::require_all_equal;
constexpr const auto& kModes = vxqa_test::kSaturationModes;
constexpr int kBlocks = 1024;
constexpr int kThreads = 256;


bool is_nan_code(uint32_t code) { return (code & 0x7C) == 0x7C && (code & 0x03) != 0; }

bool is_nan_half(uint32_t bits) { return (bits & 0x7C00) == 0x7C00 && (bits & 0x03FF) != 0; }

__host__ __device__ __nv_saturation_t cuda_mode(Saturation mode) {
  return mode == Saturation::kFinite ? __NV_SATFINITE : __NV_NOSAT;
}



// --- kernels ---------------------------------------------------------------------------------

__global__ void decode_codes(uint32_t* vxqa_half, uint32_t* vxqa_float, uint32_t* cuda_half,
                             uint32_t* cuda_float, uint32_t* vxqa_scaled, float scale) {
  const uint8_t code = uint8_t(threadIdx.x);
  const __half_raw cuda = __nv_cvt_fp8_to_halfraw(code, __NV_E5M2);
  vxqa_half[code] = __half_raw(vxqa::e5m2_to_half(code)).x;
  vxqa_float[code] = __float_as_uint(vxqa::e5m2_to_float(code));
  cuda_half[code] = cuda.x;
  cuda_float[code] = __float_as_uint(__half2float(__half(cuda)));
  vxqa_scaled[code] = __float_as_uint(vxqa::e5m2_to_float(code, scale));
}

// Element i: scalar forms; pair j = (2j, 2j+1): x2 forms; quad q = (4q..4q+3): x4 form.
__global__ void encode_floats(const uint32_t* in, size_t n, Saturation mode, float scale,
                              uint8_t* vxqa_1, uint8_t* cuda_1, uint8_t* vxqa_scaled,
                              uint16_t* vxqa_2, uint16_t* cuda_2, uint32_t* vxqa_4) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t i = first; i < n; i += stride) {
    const float x = __uint_as_float(in[i]);
    vxqa_1[i] = vxqa::float_to_e5m2(x, mode);
    cuda_1[i] = __nv_cvt_float_to_fp8(x, cuda_mode(mode), __NV_E5M2);
    vxqa_scaled[i] = vxqa::float_to_e5m2(x, scale, mode);
  }
  for (size_t j = first; j < n / 2; j += stride) {
    const float2 v = make_float2(__uint_as_float(in[2 * j]), __uint_as_float(in[2 * j + 1]));
    vxqa_2[j] = vxqa::float2_to_e5m2x2(v, mode);
    cuda_2[j] = __nv_cvt_float2_to_fp8x2(v, cuda_mode(mode), __NV_E5M2);
  }
  for (size_t q = first; q < n / 4; q += stride) {
    const float4 v = make_float4(__uint_as_float(in[4 * q]), __uint_as_float(in[4 * q + 1]),
                                 __uint_as_float(in[4 * q + 2]), __uint_as_float(in[4 * q + 3]));
    vxqa_4[q] = vxqa::float4_to_e5m2x4(v, mode);
  }
}

// Every fp16 bit pattern h in [0, 65536): element h scalar, pair j = (2j, 2j+1), quad q.
__global__ void encode_halves(Saturation mode, uint8_t* vxqa_1, uint8_t* vxqa_1_bits,
                              uint8_t* cuda_1, uint16_t* vxqa_2, uint16_t* cuda_2,
                              uint32_t* vxqa_4) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536) return;
  const __half_raw raw{uint16_t(i)};
  vxqa_1[i] = vxqa::half_to_e5m2(__half(raw), mode);
  vxqa_1_bits[i] = vxqa::half_bits_to_e5m2(uint16_t(i), mode);
  cuda_1[i] = __nv_cvt_halfraw_to_fp8(raw, cuda_mode(mode), __NV_E5M2);
  if (i < 65536 / 2) {
    const __half2_raw pair{uint16_t(2 * i), uint16_t(2 * i + 1)};
    vxqa_2[i] = vxqa::half2_to_e5m2x2(__half2(pair), mode);
    cuda_2[i] = __nv_cvt_halfraw2_to_fp8x2(pair, cuda_mode(mode), __NV_E5M2);
  }
  if (i < 65536 / 4) {
    const __half2_raw lo{uint16_t(4 * i), uint16_t(4 * i + 1)};
    const __half2_raw hi{uint16_t(4 * i + 2), uint16_t(4 * i + 3)};
    vxqa_4[i] = vxqa::half2x2_to_e5m2x4(__half2(lo), __half2(hi), mode);
  }
}

// Per trial: 18 words — x16 (8), x8 (4), x4 (2 as __half2, 2 as bits), x2 (as __half2, bits).
constexpr int kDecodeWords = 18;

__device__ uint32_t bits_of(__half2 h) {
  const __half2_raw raw = h;
  return uint32_t(raw.x) | (uint32_t(raw.y) << 16);
}

__global__ void decode_vectors(const uint4* in, int trials, uint32_t* out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= trials) return;
  const uint4 codes = in[t];
  uint32_t* o = out + size_t(t) * kDecodeWords;
  __half2 x16[8];
  vxqa::e5m2x16_to_half2x8(codes, x16);
  for (int k = 0; k < 8; ++k) o[k] = bits_of(x16[k]);
  __half2 x8[4];
  vxqa::e5m2x8_to_half2x4(make_uint2(codes.x, codes.y), x8);
  for (int k = 0; k < 4; ++k) o[8 + k] = bits_of(x8[k]);
  __half2 lo, hi;
  vxqa::e5m2x4_to_half2x2(codes.x, lo, hi);
  o[12] = bits_of(lo);
  o[13] = bits_of(hi);
  const uint2 words = vxqa::e5m2x4_to_half2x2_bits(codes.x);
  o[14] = words.x;
  o[15] = words.y;
  o[16] = bits_of(vxqa::e5m2x2_to_half2(uint16_t(codes.x)));
  o[17] = vxqa::e5m2x2_to_half2_bits(uint16_t(codes.x));
}

}  // namespace

TEST_CASE("e5m2 gpu: decode of every code matches cuda_fp8.h", "[e5m2]") {
  const float scale = 0.0123f;
  DeviceBuffer<uint32_t> vxqa_half(256), vxqa_float(256), cuda_half(256), cuda_float(256),
      vxqa_scaled(256);
  for (auto* b : {&vxqa_half, &vxqa_float, &cuda_half, &cuda_float, &vxqa_scaled}) b->poison();
  decode_codes<<<1, 256>>>(vxqa_half.get(), vxqa_float.get(), cuda_half.get(), cuda_float.get(),
                           vxqa_scaled.get(), scale);
  VXQA_CUDA_CHECK_LAUNCH();
  const auto vh = vxqa_half.download(), vf = vxqa_float.download();
  const auto ch = cuda_half.download(), cf = cuda_float.download(), vs = vxqa_scaled.download();
  for (uint32_t c = 0; c < 256; ++c) {
    INFO("code " << hex(c, 2) << ": vxqa half " << hex(vh[c], 4) << ", cuda half " << hex(ch[c], 4)
                 << ", vxqa float " << hex(vf[c], 8) << ", cuda float " << hex(cf[c], 8));
    REQUIRE(vh[c] == c << 8);  // the top byte of an fp16, NaN payloads included
    const float host_float = vxqa::e5m2_to_float(uint8_t(c));
    uint32_t host_bits, host_scaled_bits;
    const float host_scaled = vxqa::e5m2_to_float(uint8_t(c), scale);
    std::memcpy(&host_bits, &host_float, sizeof(host_bits));
    std::memcpy(&host_scaled_bits, &host_scaled, sizeof(host_scaled_bits));
    if (is_nan_code(c)) {  // cuda_fp8.h returns a canonical NaN; vxqa keeps c << 8
      REQUIRE(is_nan_half(ch[c]));
      REQUIRE((vf[c] & 0x7FFFFFFFu) > 0x7F800000u);
      REQUIRE((vs[c] & 0x7FFFFFFFu) > 0x7F800000u);
    } else {
      REQUIRE(vh[c] == ch[c]);
      REQUIRE(vf[c] == cf[c]);
      REQUIRE(vf[c] == host_bits);
      REQUIRE(vs[c] == host_scaled_bits);
    }
  }
}

TEST_CASE("e5m2 gpu: every fp16 encodes as cuda_fp8.h does", "[e5m2]") {
  DeviceBuffer<uint8_t> vxqa_1(65536), vxqa_1_bits(65536), cuda_1(65536);
  DeviceBuffer<uint16_t> vxqa_2(32768), cuda_2(32768);
  DeviceBuffer<uint32_t> vxqa_4(16384);
  for (Saturation mode : kModes) {
    INFO("mode " << mode_name(mode));
    vxqa_1.poison();
    vxqa_1_bits.poison();
    cuda_1.poison();
    vxqa_2.poison();
    cuda_2.poison();
    vxqa_4.poison();
    encode_halves<<<65536 / kThreads, kThreads>>>(mode, vxqa_1.get(), vxqa_1_bits.get(),
                                                   cuda_1.get(), vxqa_2.get(), cuda_2.get(),
                                                   vxqa_4.get());
    VXQA_CUDA_CHECK_LAUNCH();
    const auto v1 = vxqa_1.download(), v1b = vxqa_1_bits.download(), c1 = cuda_1.download();
    const auto v2 = vxqa_2.download(), c2 = cuda_2.download();
    const auto v4 = vxqa_4.download();
    auto fp16 = [](size_t h) { return "fp16 " + hex(uint32_t(h), 4); };
    auto pair = [](size_t j) { return "fp16 pair " + hex(uint32_t(2 * j), 4); };
    require_all_equal(65536, [&](size_t h) { return v1[h]; }, [&](size_t h) { return c1[h]; },
                      fp16);
    require_all_equal(65536, [&](size_t h) { return v1b[h]; }, [&](size_t h) { return v1[h]; },
                      fp16);
    require_all_equal(32768, [&](size_t j) { return v2[j]; }, [&](size_t j) { return c2[j]; },
                      pair);
    require_all_equal(
        32768, [&](size_t j) { return v2[j]; },
        [&](size_t j) { return uint32_t(v1[2 * j]) | (uint32_t(v1[2 * j + 1]) << 8); }, pair);
    require_all_equal(
        16384, [&](size_t q) { return v4[q]; },
        [&](size_t q) {
          return uint32_t(v1[4 * q]) | (uint32_t(v1[4 * q + 1]) << 8) |
                 (uint32_t(v1[4 * q + 2]) << 16) | (uint32_t(v1[4 * q + 3]) << 24);
        },
        [](size_t q) { return "fp16 quad " + hex(uint32_t(4 * q), 4); });
    // Device (the hardware cvt on sm_89+ for kFinite) against the host's software path.
    require_all_equal(
        65536, [&](size_t h) { return v1[h]; },
        [&](size_t h) { return vxqa::half_bits_to_e5m2(uint16_t(h), mode); }, fp16);
  }
}

TEST_CASE("e5m2 gpu: 16M mixed fp32 inputs encode as cuda_fp8.h does", "[e5m2]") {
  const size_t n = size_t(1) << 24;
  const float scale = 0.37f;
  const std::vector<uint32_t> inputs = mixed_float_inputs(n, 20240601u);
  DeviceBuffer<uint32_t> in(n);
  in.upload(inputs);
  DeviceBuffer<uint8_t> vxqa_1(n), cuda_1(n), vxqa_scaled(n);
  DeviceBuffer<uint16_t> vxqa_2(n / 2), cuda_2(n / 2);
  DeviceBuffer<uint32_t> vxqa_4(n / 4);
  for (Saturation mode : kModes) {
    INFO("mode " << mode_name(mode));
    vxqa_1.poison();
    cuda_1.poison();
    vxqa_scaled.poison();
    vxqa_2.poison();
    cuda_2.poison();
    vxqa_4.poison();
    encode_floats<<<kBlocks, kThreads>>>(in.get(), n, mode, scale, vxqa_1.get(), cuda_1.get(),
                                         vxqa_scaled.get(), vxqa_2.get(), cuda_2.get(),
                                         vxqa_4.get());
    VXQA_CUDA_CHECK_LAUNCH();
    const auto v1 = vxqa_1.download(), c1 = cuda_1.download(), vs = vxqa_scaled.download();
    const auto v2 = vxqa_2.download(), c2 = cuda_2.download();
    const auto v4 = vxqa_4.download();
    auto fp32 = [&](size_t i) { return "fp32 " + hex(inputs[i], 8); };
    auto pair = [&](size_t j) {
      return "fp32 pair " + hex(inputs[2 * j], 8) + " " + hex(inputs[2 * j + 1], 8);
    };
    auto as_float = [&](size_t i) {
      float x;
      std::memcpy(&x, &inputs[i], sizeof(x));
      return x;
    };
    require_all_equal(n, [&](size_t i) { return v1[i]; }, [&](size_t i) { return c1[i]; }, fp32);
    require_all_equal(n / 2, [&](size_t j) { return v2[j]; }, [&](size_t j) { return c2[j]; },
                      pair);
    require_all_equal(
        n / 2, [&](size_t j) { return v2[j]; },
        [&](size_t j) { return uint32_t(v1[2 * j]) | (uint32_t(v1[2 * j + 1]) << 8); }, pair);
    require_all_equal(
        n / 4, [&](size_t q) { return v4[q]; },
        [&](size_t q) {
          return uint32_t(v1[4 * q]) | (uint32_t(v1[4 * q + 1]) << 8) |
                 (uint32_t(v1[4 * q + 2]) << 16) | (uint32_t(v1[4 * q + 3]) << 24);
        },
        [&](size_t q) { return "fp32 quad at " + hex(inputs[4 * q], 8); });
    // Device (the hardware cvt on sm_89+ for kFinite) against the host's software path.
    require_all_equal(n, [&](size_t i) { return v1[i]; },
                      [&](size_t i) { return vxqa::float_to_e5m2(as_float(i), mode); }, fp32);
    require_all_equal(
        n, [&](size_t i) { return vs[i]; },
        [&](size_t i) { return vxqa::float_to_e5m2(as_float(i) / scale, mode); }, fp32);
  }
}

TEST_CASE("e5m2 gpu: vector decodes equal the scalar decode", "[e5m2]") {
  const int trials = 1 << 16;
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::vector<uint4> codes(trials);
  for (uint4& c : codes) c = make_uint4(any_bits(rng), any_bits(rng), any_bits(rng), any_bits(rng));
  DeviceBuffer<uint4> in(trials);
  in.upload(codes);
  DeviceBuffer<uint32_t> out(size_t(trials) * kDecodeWords);
  out.poison();
  decode_vectors<<<(trials + kThreads - 1) / kThreads, kThreads>>>(in.get(), trials, out.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const auto got = out.download();
  // half2 number k of a trial holds codes 2k (.x) and 2k+1 (.y), byte order within words.
  auto half2_of = [&](int t, int k) {
    const uint32_t words[4] = {codes[t].x, codes[t].y, codes[t].z, codes[t].w};
    auto code = [&](int i) { return uint8_t(words[i / 4] >> (8 * (i % 4))); };
    return uint32_t(vxqa::e5m2_to_half_bits(code(2 * k))) |
           (uint32_t(vxqa::e5m2_to_half_bits(code(2 * k + 1))) << 16);
  };
  const int want_index[kDecodeWords] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 0, 1, 0, 1, 0, 0};
  require_all_equal(
      size_t(trials) * kDecodeWords, [&](size_t i) { return got[i]; },
      [&](size_t i) { return half2_of(int(i / kDecodeWords), want_index[i % kDecodeWords]); },
      [&](size_t i) {
        const uint4 c = codes[i / kDecodeWords];
        return "output word " + std::to_string(i % kDecodeWords) + " of codes " + hex(c.x, 8) +
               " " + hex(c.y, 8) + " " + hex(c.z, 8) + " " + hex(c.w, 8);
      });
}
