// The SM80 path's pieces alone on the GPU, each against a CPU product: the mma.m16n8k16
// atom through its fragment tables (mma/fragments_m16n8k16.cuh), the QK consumer (Sᵀ = K·Qᵀ
// of a 16-token tile through its K layout, Q in registers) and the PV consumer (Oᵀ += Vᵀ·Pᵀ
// through its V layout, P as the B fragment), for D in {64, 128, 256} and E5M2 / fp16.
// Shared memory is filled with 0xFF (NaN in every format) before a tile is written and every
// output is poisoned, so a byte the layout does not fill, or an element no lane writes, shows.
// Skipped on GPUs older than sm_80 (vxqa_test::skip: the run exits 77 when nothing else ran,
// which ctest reports as Skipped, not as a pass). In a build without sm_80+ code the kernels
// compile to nothing and the poisoned outputs fail the checks.
#include "gpu/decode_harness.cuh"
#include "gpu/host_tile.h"
#include "gpu/skip.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

using vxqa_test::DeviceBuffer;
using vxqa_test::HostTile;
using vxqa_test::poison_smem;
using vxqa_test::Rng;
using vxqa::reference::fp16_from_double;
using vxqa::reference::fp16_to_double;
namespace frag = vxqa::mma::m16n8k16;

template <int D, vxqa::KvType Kv>
using Geometry = typename vxqa::DecodeConfig<D, Kv>::Sm80Geometry;

// The device's compute capability major (the SM80 pieces need 8 or more).
int device_major() {
  int device = 0, major = 0;
  VXQA_CUDA_CHECK(cudaGetDevice(&device));
  VXQA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

bool device_has_sm80() { return device_major() >= 8; }

std::string why_skipped() {
  return "the SM80 pieces need sm_80 or newer (this GPU is sm_" + std::to_string(device_major()) + "x)";
}

#if VXQA_HAS_MMA_M16N8K16  // (only the kernels' sm_80+ code uses it)
__device__ uint32_t pack_halves(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }
#endif

// =========================================================================================
// The atom: D = A·B + C, every lane's elements placed by the fragment tables.
// =========================================================================================
__global__ void atom_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
#if VXQA_HAS_MMA_M16N8K16
  const int lane = threadIdx.x;
  uint32_t ra[4], rb[2];
  float rc[4], rd[4];
  for (int j = 0; j < 4; ++j)
    ra[j] = pack_halves(a[frag::a_row(lane, 2 * j) * 16 + frag::a_col(lane, 2 * j)],
                        a[frag::a_row(lane, 2 * j + 1) * 16 + frag::a_col(lane, 2 * j + 1)]);
  for (int j = 0; j < 2; ++j)  // B is 16 x 8, stored k-major here: b[k * 8 + n]
    rb[j] = pack_halves(b[frag::b_row(lane, 2 * j) * 8 + frag::b_col(lane, 2 * j)],
                        b[frag::b_row(lane, 2 * j + 1) * 8 + frag::b_col(lane, 2 * j + 1)]);
  for (int e = 0; e < 4; ++e) rc[e] = c[frag::c_row(lane, e) * 8 + frag::c_col(lane, e)];
  vxqa::arch::mma_m16n8k16_row_col(rd, ra, rb, rc);
  for (int e = 0; e < 4; ++e) d[frag::c_row(lane, e) * 8 + frag::c_col(lane, e)] = rd[e];
#endif
}

// =========================================================================================
// QK: Sᵀ[token][head] of a 16-token tile.
// =========================================================================================
template <class G>
__global__ void sm80_qk_kernel(const uint16_t* q, const uint8_t* k, float* s_out) {
#if VXQA_HAS_MMA_M16N8K16
  using Qk = vxqa::mma::Sm80QkConsumer<G>;
  using Layout = typename Qk::Layout;
  __shared__ __align__(16) uint8_t k_tile[Layout::kBytes];
  const int lane = threadIdx.x;
  poison_smem(k_tile, Layout::kBytes);
  __syncwarp();
  for (int i = lane; i < G::kTokens * G::kChunksPerRow; i += 32) {
    const int row = i / G::kChunksPerRow, chunk = i % G::kChunksPerRow;
    *reinterpret_cast<uint4*>(k_tile + Layout::chunk_offset(row, chunk)) =
        *reinterpret_cast<const uint4*>(k + row * G::kRowBytes + 16 * chunk);
  }
  __syncwarp();
  const auto qf = Qk::template load_q<vxqa::ActType::kFp16>(q + frag::group(lane) * G::kHeadDimV);
  float s[4];
  Qk::run(k_tile, qf, s);
  for (int e = 0; e < 4; ++e) s_out[frag::c_row(lane, e) * 8 + frag::c_col(lane, e)] = s[e];
#endif
}

// =========================================================================================
// PV: Oᵀ[dim][head] += Vᵀ·Pᵀ of a 16-token tile, P given as the B fragment.
// =========================================================================================
template <class G>
__global__ void sm80_pv_kernel(const uint8_t* v, const uint16_t* p, const float* o_in, float* o_out) {
#if VXQA_HAS_MMA_M16N8K16
  using Pv = vxqa::mma::Sm80PvConsumer<G>;
  using Layout = typename Pv::Layout;
  __shared__ __align__(16) uint8_t v_tile[Layout::kBytes];
  const int lane = threadIdx.x;
  poison_smem(v_tile, Layout::kBytes);
  __syncwarp();
  for (int i = lane; i < G::kTokens * G::kChunksPerRow; i += 32) {
    const int row = i / G::kChunksPerRow, chunk = i % G::kChunksPerRow;
    *reinterpret_cast<uint4*>(v_tile + Layout::offset(row, 16 * chunk)) =
        *reinterpret_cast<const uint4*>(v + row * G::kRowBytes + 16 * chunk);
  }
  __syncwarp();
  uint32_t pf[2];  // p[token * 8 + head]
  for (int j = 0; j < 2; ++j)
    pf[j] = pack_halves(p[frag::b_row(lane, 2 * j) * 8 + frag::b_col(lane, 2 * j)],
                        p[frag::b_row(lane, 2 * j + 1) * 8 + frag::b_col(lane, 2 * j + 1)]);
  float o[Pv::kMTiles][4];
  for (int m = 0; m < Pv::kMTiles; ++m)
    for (int e = 0; e < 4; ++e) o[m][e] = o_in[Pv::dim_of(lane, m, e) * 8 + Pv::head_of(lane, e)];
  Pv::run(v_tile, pf, o);
  for (int m = 0; m < Pv::kMTiles; ++m)
    for (int e = 0; e < 4; ++e) o_out[Pv::dim_of(lane, m, e) * 8 + Pv::head_of(lane, e)] = o[m][e];
#endif
}

template <int D, vxqa::KvType Kv>
void check_qk(uint64_t seed) {
  using G = Geometry<D, Kv>;
  INFO("Sm80QkConsumer D " << D << (G::kKvV == vxqa::KvType::kE5M2 ? " E5M2" : " fp16") << " seed " << seed);
  Rng rng(seed);
  std::vector<uint16_t> q(8 * D);
  for (uint16_t& x : q) x = fp16_from_double(rng.uniform(-2, 2));
  const HostTile k = vxqa_test::random_tile(16, D, G::kElemBytes, 4.0, rng);
  DeviceBuffer<uint16_t> dq(q.size());
  DeviceBuffer<uint8_t> dk(k.bytes.size());
  DeviceBuffer<float> ds(16 * 8);
  dq.upload(q);
  dk.upload(k.bytes);
  ds.poison();
  sm80_qk_kernel<G><<<1, 32>>>(dq.get(), dk.get(), ds.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const std::vector<float> s = ds.download();
  // Products of fp16 values are exact in fp32; the error is the fp32 accumulation (see the
  // SM70 QkConsumer test in pieces.cu for the bound), far below a wrong dim, token or head.
  for (int t = 0; t < 16; ++t)
    for (int h = 0; h < 8; ++h) {
      double want = 0, magnitude = 0;
      for (int d = 0; d < D; ++d) {
        const double prod = fp16_to_double(q[h * D + d]) * k.at(t, d);
        want += prod;
        magnitude += std::fabs(prod);
      }
      const double got = s[t * 8 + h];
      INFO("token " << t << " head " << h << ": got " << got << " want " << want);
      REQUIRE(std::isfinite(got));
      REQUIRE(std::fabs(got - want) <= 1e-5 * magnitude);
    }
}

template <int D, vxqa::KvType Kv>
void check_pv(uint64_t seed) {
  using G = Geometry<D, Kv>;
  INFO("Sm80PvConsumer D " << D << (G::kKvV == vxqa::KvType::kE5M2 ? " E5M2" : " fp16") << " seed " << seed);
  Rng rng(seed);
  const HostTile v = vxqa_test::random_tile(16, D, G::kElemBytes, 4.0, rng);
  std::vector<uint16_t> p(16 * 8);
  for (uint16_t& x : p) x = fp16_from_double(rng.uniform(0, 1));
  std::vector<float> o_in(size_t(D) * 8);
  for (float& x : o_in) x = float(rng.uniform(-8, 8));
  DeviceBuffer<uint8_t> dv(v.bytes.size());
  DeviceBuffer<uint16_t> dp(p.size());
  DeviceBuffer<float> di(o_in.size()), dout(o_in.size());
  dv.upload(v.bytes);
  dp.upload(p);
  di.upload(o_in);
  dout.poison();
  sm80_pv_kernel<G><<<1, 32>>>(dv.get(), dp.get(), di.get(), dout.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const std::vector<float> o = dout.download();
  for (int d = 0; d < D; ++d)
    for (int h = 0; h < 8; ++h) {
      double want = o_in[d * 8 + h], magnitude = std::fabs(want);
      for (int t = 0; t < 16; ++t) {
        const double prod = fp16_to_double(p[t * 8 + h]) * v.at(t, d);
        want += prod;
        magnitude += std::fabs(prod);
      }
      const double got = o[d * 8 + h];
      INFO("dim " << d << " head " << h << ": got " << got << " want " << want);
      REQUIRE(std::isfinite(got));
      REQUIRE(std::fabs(got - want) <= 1e-5 * magnitude);
    }
}

}  // namespace

TEST_CASE("mma.m16n8k16: D = A B + C through the fragment tables, against a CPU product", "[pieces_sm80]") {
  if (!device_has_sm80()) return vxqa_test::skip(why_skipped());
  for (uint64_t seed : {300u, 301u, 302u}) {
    Rng rng(seed);
    std::vector<uint16_t> a(16 * 16), b(16 * 8);
    std::vector<float> c(16 * 8);
    for (uint16_t& x : a) x = fp16_from_double(rng.uniform(-4, 4));
    for (uint16_t& x : b) x = fp16_from_double(rng.uniform(-4, 4));
    for (float& x : c) x = float(rng.uniform(-64, 64));
    DeviceBuffer<uint16_t> da(a.size()), db(b.size());
    DeviceBuffer<float> dc(c.size()), dd(c.size());
    da.upload(a);
    db.upload(b);
    dc.upload(c);
    dd.poison();
    atom_kernel<<<1, 32>>>(da.get(), db.get(), dc.get(), dd.get());
    VXQA_CUDA_CHECK_LAUNCH();
    const std::vector<float> d = dd.download();
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        double want = c[i * 8 + j], magnitude = std::fabs(want);
        for (int k = 0; k < 16; ++k) {
          const double prod = fp16_to_double(a[i * 16 + k]) * fp16_to_double(b[k * 8 + j]);
          want += prod;
          magnitude += std::fabs(prod);
        }
        INFO("seed " << seed << " D[" << i << "][" << j << "]: got " << d[i * 8 + j] << " want " << want);
        REQUIRE(std::fabs(d[i * 8 + j] - want) <= 1e-5 * magnitude);
      }
  }
}

TEST_CASE("Sm80QkConsumer: S^T = K Q^T of a 16-token tile through its K layout", "[pieces_sm80]") {
  if (!device_has_sm80()) return vxqa_test::skip(why_skipped());
  check_qk<64, vxqa::KvType::kE5M2>(310);
  check_qk<128, vxqa::KvType::kE5M2>(311);
  check_qk<256, vxqa::KvType::kE5M2>(312);
  check_qk<64, vxqa::KvType::kFp16>(313);
  check_qk<128, vxqa::KvType::kFp16>(314);
  check_qk<256, vxqa::KvType::kFp16>(315);
}

TEST_CASE("Sm80PvConsumer: O^T + V^T P^T of a 16-token tile through its V layout", "[pieces_sm80]") {
  if (!device_has_sm80()) return vxqa_test::skip(why_skipped());
  check_pv<64, vxqa::KvType::kE5M2>(320);
  check_pv<128, vxqa::KvType::kE5M2>(321);
  check_pv<256, vxqa::KvType::kE5M2>(322);
  check_pv<64, vxqa::KvType::kFp16>(323);
  check_pv<128, vxqa::KvType::kFp16>(324);
  check_pv<256, vxqa::KvType::kFp16>(325);
}
