// sm_90a's warpgroup MMA alone (arch/wgmma.cuh), against a CPU product: a 64 x 64 A times a
// 64 x N B (N 64 or 32; 8, 24 and 48 with A from registers: MmaRs) in four k16 steps, A from
// shared memory or from registers, B
// K-major (as a K tile is, for Q·Kᵀ) or MN-major (as a V tile is, for P·V), every operand placed by
// mma/wgmma_layout.cuh's layouts and fragment tables and every output element read back
// through them. Shared memory is filled with 0xFF (an fp16 NaN) first and the output
// poisoned, so a byte the layout does not fill, or an element no thread writes, shows.
// Skipped unless the GPU is sm_90 and the binary carries sm_90a code (build with
// CMAKE_CUDA_ARCHITECTURES 90a: scripts/gpu_all.sh does on an sm_90 machine).
#include "gpu/decode_harness.cuh"
#include "gpu/skip.h"

#include <vxqa/arch/wgmma.cuh>
#include <vxqa/mma/wgmma_layout.cuh>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using vxqa_test::DeviceBuffer;
using vxqa::reference::fp16_from_double;
using vxqa::reference::fp16_to_double;
namespace wg = vxqa::mma::wgmma;

constexpr int kM = 64, kK = 64;
using ALayout = wg::KMajorLayout<kM, kK>;

__global__ void has_wgmma_kernel(int* has) { *has = VXQA_HAS_WGMMA; }

// d[m * N + n] = Σ_k a[m * 64 + k] · b[k * N + n]. kRegsA: A from registers; kMnB: B
// MN-major. swap_b_offsets: the descriptor's leading and stride offsets of B exchanged (to
// tell, if the product is wrong, which reading of the two the hardware has).
template <int kN, bool kRegsA, bool kMnB>
__global__ void wgmma_kernel(const uint16_t* a, const uint16_t* b, float* d, bool swap_b_offsets) {
#if VXQA_HAS_WGMMA
  using BLayout = typename std::conditional<kMnB, wg::MnMajorLayout<kN, kK>, wg::KMajorLayout<kN, kK>>::type;
  __shared__ __align__(128) uint8_t a_tile[ALayout::kBytes];
  __shared__ __align__(128) uint8_t b_tile[BLayout::kBytes];
  const int t = threadIdx.x;
  for (int i = t; i < ALayout::kBytes; i += 128) a_tile[i] = 0xFF;
  for (int i = t; i < BLayout::kBytes; i += 128) b_tile[i] = 0xFF;
  __syncthreads();
  for (int i = t; i < kM * kK; i += 128)
    *reinterpret_cast<uint16_t*>(a_tile + ALayout::offset(i / kK, i % kK)) = a[i];
  for (int i = t; i < kK * kN; i += 128)
    *reinterpret_cast<uint16_t*>(b_tile + BLayout::offset(i % kN, i / kN)) = b[i];
  __syncthreads();
  vxqa::arch::wgmma::fence_shared_for_async();

  uint32_t ra[kK / 16][4];
  for (int step = 0; step < kK / 16; ++step)
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = a[wg::a_row(t, 2 * j) * kK + 16 * step + wg::a_col(t, 2 * j)];
      const uint32_t hi = a[wg::a_row(t, 2 * j + 1) * kK + 16 * step + wg::a_col(t, 2 * j + 1)];
      ra[step][j] = lo | (hi << 16);
    }
  const uint32_t a_base = static_cast<uint32_t>(__cvta_generic_to_shared(a_tile));
  const uint32_t b_base = static_cast<uint32_t>(__cvta_generic_to_shared(b_tile));
  const uint32_t b_lead = swap_b_offsets ? BLayout::kStrideBytes : BLayout::kLeadingBytes;
  const uint32_t b_stride = swap_b_offsets ? BLayout::kLeadingBytes : BLayout::kStrideBytes;
  float acc[kN / 2];
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.f;
  vxqa::arch::wgmma::fence_operands();
  for (int step = 0; step < kK / 16; ++step) {
    const uint64_t b_desc = wg::descriptor(b_base + BLayout::step_offset(0, step), b_lead, b_stride);
    const uint64_t a_desc =
        wg::descriptor(a_base + ALayout::step_offset(0, step), ALayout::kLeadingBytes, ALayout::kStrideBytes);
    if constexpr (kRegsA) {
      vxqa::arch::wgmma::MmaRs<kN, kMnB>::run(acc, ra[step], b_desc, step > 0);
    } else if constexpr (kN == 64) {
      vxqa::arch::wgmma::mma_m64n64k16_ss<kMnB>(acc, a_desc, b_desc, step > 0);
    } else {
      vxqa::arch::wgmma::mma_m64n32k16_ss<kMnB>(acc, a_desc, b_desc, step > 0);
    }
  }
  vxqa::arch::wgmma::commit();
  vxqa::arch::wgmma::wait<0>();
  vxqa::arch::wgmma::fence_registers(acc);
  for (int i = 0; i < kN / 2; ++i) d[wg::d_row(t, i) * kN + wg::d_col(t, i)] = acc[i];
#endif
}

int device_major() {
  int device = 0, major = 0;
  VXQA_CUDA_CHECK(cudaGetDevice(&device));
  VXQA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

// Whether the binary runs sm_90a code here: an sm_90 GPU and a build for 90a.
bool runs_wgmma() {
  if (device_major() != 9) return false;
  DeviceBuffer<int> has(1);
  has_wgmma_kernel<<<1, 1>>>(has.get());
  VXQA_CUDA_CHECK_LAUNCH();
  return has.download()[0] == 1;
}

struct Operands {
  int n;
  std::vector<uint16_t> a, b;  // a[m][k], b[k][n]
  std::vector<double> d, bound;  // the exact product and a bound on fp32 accumulation's error
};

Operands random_operands(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  Operands o;
  o.n = n;
  o.a.resize(kM * kK);
  o.b.resize(kK * n);
  for (uint16_t& x : o.a) x = fp16_from_double(uniform(rng));
  for (uint16_t& x : o.b) x = fp16_from_double(uniform(rng));
  o.d.assign(kM * n, 0.0);
  o.bound.assign(kM * n, 0.0);
  for (int m = 0; m < kM; ++m)
    for (int col = 0; col < n; ++col) {
      double sum = 0, magnitude = 0;
      for (int k = 0; k < kK; ++k) {
        const double p = fp16_to_double(o.a[m * kK + k]) * fp16_to_double(o.b[k * n + col]);
        sum += p;
        magnitude += std::fabs(p);
      }
      o.d[m * n + col] = sum;
      // Each product is exact in fp32; k additions round at most 2^-23 of the running sum
      // each (the tensor core may truncate: twice that).
      o.bound[m * n + col] = kK * std::ldexp(magnitude, -22);
    }
  return o;
}

// Elements of the product outside their bound (a NaN is outside).
template <int kN, bool kRegsA, bool kMnB>
int wrong_elements(const Operands& o, bool swap_b_offsets) {
  REQUIRE(o.n == kN);
  DeviceBuffer<uint16_t> da(o.a.size()), db(o.b.size());
  DeviceBuffer<float> dd(kM * kN);
  da.upload(o.a);
  db.upload(o.b);
  dd.poison();
  wgmma_kernel<kN, kRegsA, kMnB><<<1, 128>>>(da.get(), db.get(), dd.get(), swap_b_offsets);
  VXQA_CUDA_CHECK_LAUNCH();
  const std::vector<float> d = dd.download();
  int wrong = 0;
  for (int i = 0; i < kM * kN; ++i)
    if (!(std::fabs(double(d[i]) - o.d[i]) <= o.bound[i])) ++wrong;
  return wrong;
}

template <int kN, bool kRegsA, bool kMnB>
void check_product(uint64_t seed) {
  INFO("wgmma m64n" << kN << "k16 x4, A " << (kRegsA ? "in registers" : "in shared memory") << ", B "
                    << (kMnB ? "MN-major" : "K-major") << ", seed " << seed);
  const Operands o = random_operands(kN, seed);
  const int wrong = wrong_elements<kN, kRegsA, kMnB>(o, false);
  if (wrong != 0) {  // which reading of the descriptor's two offsets the hardware has
    const int swapped = wrong_elements<kN, kRegsA, kMnB>(o, true);
    WARN("with B's leading and stride offsets exchanged: " << swapped << " of " << kM * kN << " wrong");
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("wgmma: m64n64k16 and m64n32k16 through the layouts and fragment tables, A from shared memory or "
          "registers, B K-major or MN-major",
          "[wgmma]") {
  if (!runs_wgmma())
    return vxqa_test::skip("the warpgroup MMA needs an sm_90 GPU and a build for sm_90a (CMAKE_CUDA_ARCHITECTURES 90a)");
  for (uint64_t seed : {1u, 2u, 3u}) {
    check_product<64, false, false>(seed);
    check_product<64, true, false>(seed);
    check_product<64, false, true>(seed);
    check_product<64, true, true>(seed);
    check_product<32, false, false>(seed);
    check_product<32, false, true>(seed);
  }
}

TEST_CASE("wgmma: MmaRs, A from registers, N 8 to 48 (the rows of a tokens-on-M tile), B K- or MN-major",
          "[wgmma]") {
  if (!runs_wgmma())
    return vxqa_test::skip("the warpgroup MMA needs an sm_90 GPU and a build for sm_90a (CMAKE_CUDA_ARCHITECTURES 90a)");
  for (uint64_t seed : {4u, 5u}) {
    check_product<8, true, false>(seed);
    check_product<8, true, true>(seed);
    check_product<24, true, false>(seed);
    check_product<24, true, true>(seed);
    check_product<48, true, false>(seed);
    check_product<48, true, true>(seed);
  }
}

TEST_CASE("wgmma: a wrong layout fails the check (A's rows 0 and 1 exchanged)", "[wgmma]") {
  if (!runs_wgmma())
    return vxqa_test::skip("the warpgroup MMA needs an sm_90 GPU and a build for sm_90a (CMAKE_CUDA_ARCHITECTURES 90a)");
  Operands o = random_operands(64, 7);
  for (int k = 0; k < kK; ++k) std::swap(o.a[k], o.a[kK + k]);  // the reference keeps the old rows
  CHECK(wrong_elements<64, false, false>(o, false) == 2 * 64);
}
