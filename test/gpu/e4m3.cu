// E4M3 converter on the GPU: the device's bit-move decode (prmt.b32 with sign replication,
// where the host emulates it) of every pair of codes, and of every code through the x4
// form, equals the host's, which test/cpu/e4m3.cpp proves against the OCP spec; its values
// equal cuda_fp8.h's device decode (NaN codes: NaN both); and the device encode of every
// fp16 and of mixed fp32 inputs equals cuda_fp8.h's __NV_SATFINITE E4M3 conversion and the
// host encode, bit for bit. KvDecode, what the decode CTAs call, gives each code's value
// (times its factor()) on the path the device compiles (the hardware cvt on sm_89+) and
// under E4m3Decode::kSoftware.
#include <vxqa/numeric/e4m3.cuh>
#include <vxqa/numeric/kv_decode.cuh>

#include "gpu_check.cuh"

#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using vxqa_test::DeviceBuffer;

// Pair p: codes p & 0xFF (.x) and p >> 8 (.y); quad q: the four codes of q · 0x01010101 + ...
__global__ void decode_pairs(uint32_t* pair_bits, uint32_t* quad_lo, uint32_t* quad_hi, uint32_t* cuda_half) {
  const uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;  // 0 .. 65535
  pair_bits[p] = vxqa::e4m3x2_to_half2_bits_scaled(uint16_t(p));
  const uint2 quad = vxqa::e4m3x4_to_half2x2_bits_scaled(p | ((p ^ 0xA55Au) << 16));
  quad_lo[p] = quad.x;
  quad_hi[p] = quad.y;
  if (p < 256) cuda_half[p] = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(p), __NV_E4M3).x;
}

// Word w = p | (p ^ 0x3C5A) << 16 through KvDecode's two paths, each as value / factor() bits,
// and the factors.
__global__ void kv_decode_words(uint2* native, uint2* software, float* factors) {
  using Native = vxqa::KvDecode<vxqa::KvType::kE4M3>;
  using Software = vxqa::KvDecode<vxqa::KvType::kE4M3, vxqa::E4m3Decode::kSoftware>;
  const uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;  // 0 .. 65535
  const uint32_t word = p | ((p ^ 0x3C5Au) << 16);
  native[p] = Native::four(word);
  software[p] = Software::four(word);
  if (p == 0) {
    factors[0] = Native::factor();
    factors[1] = Software::factor();
    factors[2] = vxqa::KvDecode<vxqa::KvType::kE5M2>::factor();
  }
}

__global__ void encode_floats(const uint32_t* in, size_t n, uint8_t* vxqa_code, uint8_t* cuda_code) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = __uint_as_float(in[i]);
    vxqa_code[i] = vxqa::float_to_e4m3(x);
    cuda_code[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  }
}

float half_value(uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

}  // namespace

TEST_CASE("e4m3 gpu: the device decode of every pair equals the host's and cuda_fp8.h's values",
          "[e4m3]") {
  DeviceBuffer<uint32_t> pairs(65536), quad_lo(65536), quad_hi(65536), cuda_half(256);
  for (auto* b : {&pairs, &quad_lo, &quad_hi, &cuda_half}) b->poison();
  decode_pairs<<<256, 256>>>(pairs.get(), quad_lo.get(), quad_hi.get(), cuda_half.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const auto got = pairs.download(), lo = quad_lo.download(), hi = quad_hi.download(), cuda = cuda_half.download();
  for (uint32_t p = 0; p < 65536; ++p) {
    const uint32_t word = p | ((p ^ 0xA55Au) << 16);
    const uint2 host_quad = vxqa::e4m3x4_to_half2x2_bits_scaled(word);
    if (got[p] != vxqa::e4m3x2_to_half2_bits_scaled(uint16_t(p)) || lo[p] != host_quad.x || hi[p] != host_quad.y) {
      INFO("pair " << p << " device " << got[p] << " quad " << lo[p] << " " << hi[p]);
      REQUIRE(got[p] == vxqa::e4m3x2_to_half2_bits_scaled(uint16_t(p)));
      REQUIRE(lo[p] == host_quad.x);
      REQUIRE(hi[p] == host_quad.y);
    }
  }
  for (uint32_t c = 0; c < 256; ++c) {
    const float ours = half_value(uint16_t(got[c] & 0xFFFFu)) * vxqa::kE4m3HalfScale;
    const float theirs = half_value(uint16_t(cuda[c]));
    INFO("code " << c);
    if ((c & 0x7F) == 0x7F) {
      REQUIRE(ours != ours);
      REQUIRE(theirs != theirs);
    } else {
      REQUIRE(ours == theirs);
    }
  }
}

TEST_CASE("e4m3 gpu: KvDecode's native and software paths give every code's value", "[e4m3]") {
  DeviceBuffer<uint2> native(65536), software(65536);
  DeviceBuffer<float> factors(3);
  for (auto* b : {&native, &software}) b->poison();
  factors.poison();
  kv_decode_words<<<256, 256>>>(native.get(), software.get(), factors.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const auto nat = native.download(), soft = software.download();
  const auto f = factors.download();
  int device = 0;
  cudaDeviceProp prop{};
  VXQA_CUDA_CHECK(cudaGetDevice(&device));
  VXQA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const bool hardware = prop.major * 10 + prop.minor >= 89;  // the test binary is built for the device
  INFO("device sm_" << prop.major << prop.minor);
  REQUIRE(f[0] == (hardware ? 1.f : vxqa::kE4m3HalfScale));
  REQUIRE(f[1] == vxqa::kE4m3HalfScale);
  REQUIRE(f[2] == 1.f);
  for (uint32_t p = 0; p < 65536; ++p) {
    const uint32_t word = p | ((p ^ 0x3C5Au) << 16);
    const uint32_t n[4] = {nat[p].x & 0xFFFFu, nat[p].x >> 16, nat[p].y & 0xFFFFu, nat[p].y >> 16};
    const uint32_t s[4] = {soft[p].x & 0xFFFFu, soft[p].x >> 16, soft[p].y & 0xFFFFu, soft[p].y >> 16};
    for (int i = 0; i < 4; ++i) {
      const uint8_t code = uint8_t(word >> (8 * i));
      const float want = vxqa::e4m3_to_float(code);
      const float got_native = half_value(uint16_t(n[i])) * f[0], got_software = half_value(uint16_t(s[i])) * f[1];
      const bool ok = want != want ? got_native != got_native && got_software != got_software
                                   : got_native == want && got_software == want;
      if (!ok) {
        INFO("word " << word << " byte " << i << " code " << int(code) << ": native " << got_native << " software "
                     << got_software << ", want " << want);
        REQUIRE(ok);
      }
    }
  }
}

TEST_CASE("e4m3 gpu: every fp16 and 1M mixed fp32 inputs encode as cuda_fp8.h and the host do", "[e4m3]") {
  std::vector<uint32_t> in;
  for (uint32_t h = 0; h < 65536; ++h) in.push_back([&] {
    const float x = half_value(uint16_t(h));
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return bits;
  }());
  std::mt19937 rng(4545);
  std::uniform_int_distribution<uint32_t> any_bits, near_range(0x39800000u /* 2^-12 */, 0x44800000u /* 2^10 */);
  for (int i = 0; i < (1 << 19); ++i) {
    in.push_back(any_bits(rng));
    in.push_back(near_range(rng) | (any_bits(rng) & 0x80000000u));
  }
  DeviceBuffer<uint32_t> d_in(in.size());
  DeviceBuffer<uint8_t> vxqa_code(in.size()), cuda_code(in.size());
  d_in.upload(in);
  vxqa_code.poison();
  cuda_code.poison();
  encode_floats<<<1024, 256>>>(d_in.get(), in.size(), vxqa_code.get(), cuda_code.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const auto ours = vxqa_code.download(), theirs = cuda_code.download();
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    float x;
    std::memcpy(&x, &in[i], sizeof(x));
    if (ours[i] != theirs[i] || ours[i] != vxqa::float_to_e4m3(x)) {
      if (mismatches++ == 0) first = i;
    }
  }
  INFO(mismatches << " mismatches of " << in.size() << "; first: input bits " << in[first] << " device "
                  << int(ours[first]) << " cuda_fp8.h " << int(theirs[first]));
  REQUIRE(mismatches == 0);
}
