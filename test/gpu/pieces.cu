// Each piece of the decode kernel alone on the GPU, driven by a small test kernel, against a
// CPU model: the QK and PV consumers (mma.m8n8k4 through the shared-memory layouts), the
// online-softmax step, the register-staged load with the shared-memory publisher, and the
// combine path (many chunks vs one) through the public API.
//
// The geometries are the decode Configs' own (DecodeConfig<D, Kv>::Geometry and its piece
// size), for D in {64, 128, 256} and E5M2 / fp16 caches. Shared memory is filled with 0xFF
// (NaN as fp16, E5M2 and fp32) before the tiles are written, and every output buffer is
// poisoned (0xFF, or 0x5A for the byte-exact staging check), so a read of a byte the layout
// does not fill, or an output element no lane writes, shows up.
#include "gpu/decode_harness.cuh"
#include "gpu/host_tile.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using vxqa_test::DeviceBuffer;
using vxqa_test::HostTile;
using vxqa_test::poison_smem;
using vxqa_test::Rng;
using vxqa::reference::fp16_from_double;
using vxqa::reference::fp16_to_double;

template <int D, vxqa::KvType Kv>
using Cfg = vxqa::DecodeConfig<D, Kv>;

// =========================================================================================
// QK consumer: S = Q Kᵀ of one warp tile (8 heads x 32 tokens).
// =========================================================================================
template <class Geometry>
__global__ void qk_kernel(const uint16_t* q, const uint8_t* k, float* s_out) {
  using Qk = vxqa::mma::QkConsumer<Geometry>;
  using QLayout = typename Qk::QLayout;
  using KLayout = typename Qk::KLayout;
  constexpr int D = Geometry::kHeadDimV;
  __shared__ __align__(16) uint8_t q_tile[QLayout::kBytes];
  __shared__ __align__(16) uint8_t k_tile[Geometry::kTileBytes];
  const int lane = threadIdx.x;
  poison_smem(q_tile, QLayout::kBytes);
  poison_smem(k_tile, Geometry::kTileBytes);
  __syncwarp();
  for (int i = lane; i < 8 * D; i += 32)
    *reinterpret_cast<uint16_t*>(q_tile + QLayout::offset(i / D, i % D)) = q[i];
  for (int i = lane; i < 32 * Geometry::kChunksPerRow; i += 32) {
    const int token = i / Geometry::kChunksPerRow, chunk = i % Geometry::kChunksPerRow;
    *reinterpret_cast<uint4*>(k_tile + KLayout::chunk_offset(token, chunk)) =
        *reinterpret_cast<const uint4*>(k + token * Geometry::kRowBytes + 16 * chunk);
  }
  __syncwarp();
  float s[8];
  Qk::run(q_tile, k_tile, s);
  for (int i = 0; i < 8; ++i) s_out[vxqa::mma::c_row(lane, i) * 32 + Qk::c_token(lane, i)] = s[i];
}

template <int D, vxqa::KvType Kv>
void check_qk(uint64_t seed) {
  using Geometry = typename Cfg<D, Kv>::Geometry;
  constexpr int eb = Geometry::kElemBytes;
  INFO("QkConsumer D " << D << (eb == 1 ? " E5M2" : " fp16") << " seed " << seed);
  Rng rng(seed);
  std::vector<uint16_t> q(8 * D);
  for (uint16_t& x : q) x = fp16_from_double(rng.uniform(-2, 2));
  const HostTile k = vxqa_test::random_tile(32, D, eb, 4.0, rng);

  DeviceBuffer<uint16_t> dq(q.size());
  DeviceBuffer<uint8_t> dk(k.bytes.size());
  DeviceBuffer<float> ds(8 * 32);
  dq.upload(q);
  dk.upload(k.bytes);
  ds.poison();
  qk_kernel<Geometry><<<1, 32>>>(dq.get(), dk.get(), ds.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const std::vector<float> s = ds.download();

  // Q and K are exact in fp16 (E5M2 decodes exactly to fp16), each product of two fp16 is
  // exact in fp32 (22 significant bits), so the only error is the fp32 accumulation of D
  // products: at most D * 2^-24 * sum|q||k| in the worst case (1.5e-5 at D = 256), about
  // sqrt(D) * 2^-24 * sum|q||k| (~1e-6) for random signs. 1e-5 * sum|q||k| sits between;
  // a wrong dim, token or head moves S by O(|q||k|) ~ sum|q||k| / sqrt(D), far above it.
  for (int h = 0; h < 8; ++h) {
    for (int t = 0; t < 32; ++t) {
      double want = 0, magnitude = 0;
      for (int d = 0; d < D; ++d) {
        const double prod = fp16_to_double(q[h * D + d]) * k.at(t, d);
        want += prod;
        magnitude += std::fabs(prod);
      }
      const double got = s[h * 32 + t];
      INFO("head " << h << " token " << t << ": got " << got << " want " << want);
      REQUIRE(std::isfinite(got));
      REQUIRE(std::fabs(got - want) <= 1e-5 * magnitude);
    }
  }
}

// =========================================================================================
// PV consumer: O += P V of one warp tile.
// =========================================================================================
template <class Geometry>
__global__ void pv_kernel(const uint16_t* p, const uint8_t* v, const float* o_in, float* o_out) {
  using Pv = vxqa::mma::PvConsumer<Geometry>;
  using VLayout = typename Pv::VLayout;
  using PLayout = vxqa::pipeline::ProbTileLayout;
  constexpr int D = Geometry::kHeadDimV;
  constexpr int kGranule = VLayout::kGranule;
  constexpr int kGranulesPerRow = Geometry::kRowBytes / kGranule;
  __shared__ __align__(16) uint8_t p_tile[PLayout::kBytes];
  __shared__ __align__(16) uint8_t v_tile[Geometry::kTileBytes];
  const int lane = threadIdx.x;
  poison_smem(p_tile, PLayout::kBytes);
  poison_smem(v_tile, Geometry::kTileBytes);
  __syncwarp();
  for (int i = lane; i < 8 * 32; i += 32)
    *reinterpret_cast<uint16_t*>(p_tile + PLayout::offset(i / 32, i % 32)) = p[i];
  for (int i = lane; i < 32 * kGranulesPerRow; i += 32) {
    const int token = i / kGranulesPerRow, byte = (i % kGranulesPerRow) * kGranule;
    const uint8_t* src = v + token * Geometry::kRowBytes + byte;
    uint8_t* dst = v_tile + VLayout::granule_offset(token, byte);
    if (kGranule == 16) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
    }
  }
  __syncwarp();
  float o[Pv::kNBlocks][8];
  for (int n = 0; n < Pv::kNBlocks; ++n)
    for (int i = 0; i < 8; ++i) o[n][i] = o_in[vxqa::mma::c_row(lane, i) * D + Pv::c_dim(lane, n, i)];
  Pv::run(p_tile, v_tile, o);
  for (int n = 0; n < Pv::kNBlocks; ++n)
    for (int i = 0; i < 8; ++i) o_out[vxqa::mma::c_row(lane, i) * D + Pv::c_dim(lane, n, i)] = o[n][i];
}

template <int D, vxqa::KvType Kv>
void check_pv(uint64_t seed) {
  using Geometry = typename Cfg<D, Kv>::Geometry;
  constexpr int eb = Geometry::kElemBytes;
  INFO("PvConsumer D " << D << (eb == 1 ? " E5M2" : " fp16") << " seed " << seed);
  Rng rng(seed);
  std::vector<uint16_t> p(8 * 32);
  for (uint16_t& x : p) x = fp16_from_double(rng.unit());  // probabilities in [0, 1]
  const HostTile v = vxqa_test::random_tile(32, D, eb, 4.0, rng);
  std::vector<float> o_in(8 * D);
  for (float& x : o_in) x = float(rng.uniform(-1, 1));

  DeviceBuffer<uint16_t> dp(p.size());
  DeviceBuffer<uint8_t> dv(v.bytes.size());
  DeviceBuffer<float> doi(o_in.size()), doo(o_in.size());
  dp.upload(p);
  dv.upload(v.bytes);
  doi.upload(o_in);
  doo.poison();
  pv_kernel<Geometry><<<1, 32>>>(dp.get(), dv.get(), doi.get(), doo.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const std::vector<float> o = doo.download();

  // P and V are exact fp16, their products exact in fp32; 33 terms (o and 32 products) are
  // summed in fp32: at most 33 * 2^-24 ~ 2e-6 of (|o| + sum|p||v|). 1e-5 of it leaves room
  // for a differently ordered accumulator; a wrong token or dim moves O by O(|p||v|).
  for (int h = 0; h < 8; ++h) {
    for (int d = 0; d < D; ++d) {
      double want = o_in[h * D + d], magnitude = std::fabs(want);
      for (int t = 0; t < 32; ++t) {
        const double prod = fp16_to_double(p[h * 32 + t]) * v.at(t, d);
        want += prod;
        magnitude += std::fabs(prod);
      }
      const double got = o[h * D + d];
      INFO("head " << h << " dim " << d << ": got " << got << " want " << want);
      REQUIRE(std::isfinite(got));
      REQUIRE(std::fabs(got - want) <= 1e-5 * magnitude);
    }
  }
}

// =========================================================================================
// Online softmax: three successive S tiles of one warp.
// =========================================================================================
constexpr int kSteps = 3;

__global__ void softmax_kernel(const float* s, uint16_t* p_out, float* alpha_out, float* m_out,
                               float* l_out) {
  using SLayout = vxqa::pipeline::ScoreTileLayout;
  using PLayout = vxqa::pipeline::ProbTileLayout;
  __shared__ __align__(16) uint8_t s_tile[SLayout::kBytes];
  __shared__ __align__(16) uint8_t p_tile[PLayout::kBytes];
  __shared__ __align__(16) float alpha[8];
  const int lane = threadIdx.x;
  vxqa::softmax::RowState row = vxqa::softmax::empty_row();
  for (int step = 0; step < kSteps; ++step) {
    poison_smem(s_tile, SLayout::kBytes);
    poison_smem(p_tile, PLayout::kBytes);
    if (lane < 8) alpha[lane] = nanf("");
    __syncwarp();
    for (int i = lane; i < 8 * 32; i += 32)
      *reinterpret_cast<float*>(s_tile + SLayout::offset(i / 32, i % 32)) = s[step * 256 + i];
    __syncwarp();
    row = vxqa::softmax::online_softmax_step(row, s_tile, p_tile, alpha);
    __syncwarp();
    for (int i = lane; i < 8 * 32; i += 32)
      p_out[step * 256 + i] = *reinterpret_cast<const uint16_t*>(p_tile + PLayout::offset(i / 32, i % 32));
    if (lane < 8) alpha_out[step * 8 + lane] = alpha[lane];
    m_out[step * 32 + lane] = row.m;
    l_out[step * 32 + lane] = row.l;
    __syncwarp();
  }
}

// One fp16 ulp at |x| (the subnormal spacing 2^-24 below 2^-14).
double fp16_ulp(double x) {
  x = std::fabs(x);
  if (x < 0x1.0p-14) return 0x1.0p-24;
  return std::ldexp(1.0, std::ilogb(x) - 10);
}

void check_online_softmax(uint64_t seed) {
  const float ninf = -std::numeric_limits<float>::infinity();
  Rng rng(seed);
  // S[step][row][token], base-2 logits.
  //  rows 0-4: random in [-8, 8), a quarter masked (-inf); step 1 lifts rows 0-2 by 6 (the
  //            max rises: alpha < 1), step 2 lowers rows 0-4 by 12 (the max stays);
  //  row 4:    step 0 has a single unmasked score;
  //  row 5:    step 1 is all -inf for a row that has seen scores (P = 0, alpha = 1);
  //  row 6:    step 0 all -inf, then scores (the first finite max: alpha = 0);
  //  row 7:    -inf throughout (m = -inf, l = 0, P = 0, alpha = 1 at every step).
  std::vector<float> s(kSteps * 256);
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < 8; ++r) {
      for (int t = 0; t < 32; ++t) {
        float v = float(rng.uniform(-8, 8));
        if (rng.below(4) == 0) v = ninf;
        if (step == 1 && r <= 2) v += 6;
        if (step == 2 && r <= 4) v -= 12;
        if (r == 4 && step == 0) v = t == 13 ? 3.25f : ninf;
        if (r == 5 && step == 1) v = ninf;
        if (r == 6 && step == 0) v = ninf;
        if (r == 7) v = ninf;
        s[(step * 8 + r) * 32 + t] = v;
      }
    }
  }

  DeviceBuffer<float> ds(s.size()), dalpha(kSteps * 8), dm(kSteps * 32), dl(kSteps * 32);
  DeviceBuffer<uint16_t> dp(kSteps * 256);
  ds.upload(s);
  dalpha.poison();
  dm.poison();
  dl.poison();
  dp.poison();
  softmax_kernel<<<1, 32>>>(ds.get(), dp.get(), dalpha.get(), dm.get(), dl.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const std::vector<uint16_t> p = dp.download();
  const std::vector<float> alpha = dalpha.download(), m = dm.download(), l = dl.download();

  // The model, row by row. m is a max of the inputs: exact. Where the library branches
  // (a row with no score yet) the results are exact too: P = 0, alpha = 1, l = 0; and
  // exp2f(-inf) = 0 exactly gives P = 0 for masked scores and alpha = 0 for a row's first
  // finite max. Elsewhere exp2f has at most 2 ulp of fp32 error (CUDA programming guide)
  // and s - m is rounded in fp32 (|s - m| < 32 here: 2^-19 absolute, 1.3e-6 relative in
  // exp2), so P, rounded to fp16, is within one fp16 ulp of the double model rounded to
  // fp16, and alpha within 4e-6 relative. l is checked against the GPU's own P and alpha
  // (it must sum the rounded P that P·V uses): fp32 sum of 32 terms plus one multiply,
  // at most ~34 * 2^-24 = 2e-6 relative; bound 1e-5.
  std::vector<float> m_model(8, ninf);
  std::vector<double> l_prev(8, 0.0);
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < 8; ++r) {
      INFO("step " << step << " row " << r);
      const float* row_s = &s[(step * 8 + r) * 32];
      float tile_max = ninf;
      for (int t = 0; t < 32; ++t) tile_max = std::max(tile_max, row_s[t]);
      const float m_old = m_model[r];
      const float m_new = std::max(m_old, tile_max);
      m_model[r] = m_new;
      // Every lane of the row holds the same state.
      for (int part = 0; part < 4; ++part) {
        const int lane = r + 8 * part;
        INFO("lane " << lane);
        REQUIRE(m[step * 32 + lane] == m_new);
        REQUIRE(std::memcmp(&l[step * 32 + lane], &l[step * 32 + r], sizeof(float)) == 0);
      }
      const double a = alpha[step * 8 + r];
      double p_sum = 0;
      if (m_new == ninf) {
        REQUIRE(a == 1.0);
        for (int t = 0; t < 32; ++t) REQUIRE(p[(step * 8 + r) * 32 + t] == 0);
        REQUIRE(l[step * 32 + r] == 0.0f);
      } else {
        if (m_old == ninf) {
          REQUIRE(a == 0.0);
        } else {
          const double want = std::exp2(double(m_old) - double(m_new));
          INFO("alpha got " << a << " want " << want);
          REQUIRE(std::fabs(a - want) <= 4e-6 * want);
        }
        for (int t = 0; t < 32; ++t) {
          const uint16_t bits = p[(step * 8 + r) * 32 + t];
          const double got = fp16_to_double(bits);
          INFO("token " << t << " s " << row_s[t] << " p bits " << bits);
          REQUIRE(std::isfinite(got));
          if (row_s[t] == ninf) {
            REQUIRE(bits == 0);
          } else {
            const double want = fp16_to_double(fp16_from_double(std::exp2(double(row_s[t]) - double(m_new))));
            INFO("p got " << got << " want " << want);
            REQUIRE(std::fabs(got - want) <= fp16_ulp(want));
          }
          p_sum += got;
        }
        const double want_l = l_prev[r] * a + p_sum;
        const double got_l = l[step * 32 + r];
        INFO("l got " << got_l << " want " << want_l);
        REQUIRE(want_l > 0.0);
        REQUIRE(std::fabs(got_l - want_l) <= 1e-5 * want_l);
      }
      l_prev[r] = l[step * 32 + r];
    }
  }
}

// =========================================================================================
// RegisterPiece::load + SmemPublisher::store_k / store_v.
// =========================================================================================
template <class Geometry, class LoadGeometry, int kPieceTokens>
__global__ void staging_kernel(const uint8_t* base, const int64_t* row_offsets, int valid_rows,
                               uint8_t* k_out, uint8_t* v_out) {
  using Piece = vxqa::pipeline::RegisterPiece<LoadGeometry, kPieceTokens>;
  using Publisher = vxqa::pipeline::SmemPublisher<Geometry, LoadGeometry>;
  __shared__ typename Publisher::TempStorage k_storage, v_storage;
  const int lane = threadIdx.x;
  poison_smem(k_storage.bytes, Geometry::kTileBytes);
  poison_smem(v_storage.bytes, Geometry::kTileBytes);
  __syncwarp();
  Publisher k_pub(k_storage), v_pub(v_storage);
  const int64_t my_row = row_offsets[lane];
  for (int first = 0; first < Geometry::kTokens; first += kPieceTokens) {
    Piece piece;
    piece.load(base, my_row, first, valid_rows);
    k_pub.store_k(piece, first);
    v_pub.store_v(piece, first);
  }
  k_pub.publish();
  for (int i = lane * 16; i < Geometry::kTileBytes; i += 32 * 16) {
    *reinterpret_cast<uint4*>(k_out + i) = *reinterpret_cast<const uint4*>(k_storage.bytes + i);
    *reinterpret_cast<uint4*>(v_out + i) = *reinterpret_cast<const uint4*>(v_storage.bytes + i);
  }
}

// Config's ConvertAt decides whether the publisher widens E5M2 to fp16 (kPublish): then
// each cache byte c must land as the fp16 c << 8, i.e. tile bytes (0, c).
template <class Config>
void check_staging(uint64_t seed) {
  constexpr int D = Config::kHeadDim;
  using Geometry = typename Config::Geometry;
  using LoadGeometry = typename Config::LoadGeometry;
  constexpr bool kWidens = Geometry::kKvV != LoadGeometry::kKvV;
  using KLayout = vxqa::pipeline::KTileLayout<Geometry>;
  using VLayout = vxqa::pipeline::VTileLayout<Geometry>;
  constexpr int kRowBytes = Geometry::kRowBytes, kTileBytes = Geometry::kTileBytes;
  INFO("RegisterPiece<" << Config::kPieceTokens << " tokens> + SmemPublisher, D " << D
                        << (Config::kElemBytes == 1 ? " E5M2" : " fp16") << (kWidens ? " widened to fp16" : "")
                        << " seed " << seed);

  // The layouts are bijections of the tile (else a poisoned byte could hide from the checks).
  std::vector<int> k_hits(kTileBytes, 0), v_hits(kTileBytes, 0);
  for (int t = 0; t < 32; ++t) {
    for (int c = 0; c < Geometry::kChunksPerRow; ++c)
      for (int b = 0; b < 16; ++b) ++k_hits[KLayout::chunk_offset(t, c) + b];
    for (int g = 0; g < kRowBytes; g += VLayout::kGranule)
      for (int b = 0; b < VLayout::kGranule; ++b) ++v_hits[VLayout::granule_offset(t, g) + b];
  }
  for (int i = 0; i < kTileBytes; ++i) {
    INFO("tile byte " << i);
    REQUIRE(k_hits[i] == 1);
    REQUIRE(v_hits[i] == 1);
  }

  // A "cache" of random bytes (NaN codes and all: the pieces move bytes, they convert
  // nothing); each tile row at a random 16-byte aligned offset, rows may overlap (shared
  // pages). Rows at or past valid_rows point at random bytes too: they must not be read.
  Rng rng(seed);
  constexpr int kLoadRowBytes = LoadGeometry::kRowBytes;
  const size_t cache_bytes = size_t(48) * kLoadRowBytes;
  std::vector<uint8_t> cache(cache_bytes);
  for (uint8_t& x : cache) x = uint8_t(rng.g());
  DeviceBuffer<uint8_t> dcache(cache_bytes), dk(kTileBytes), dv(kTileBytes);
  DeviceBuffer<int64_t> doffsets(32);
  dcache.upload(cache);
  for (int valid : {32, 0, 1, Config::kPieceTokens - 1, Config::kPieceTokens, Config::kPieceTokens + 1, 31}) {
    if (valid > 32) continue;
    INFO("valid rows " << valid);
    std::vector<int64_t> offsets(32);
    for (int64_t& o : offsets) o = 16 * int64_t(rng.below((cache_bytes - kLoadRowBytes) / 16 + 1));
    doffsets.upload(offsets);
    dk.poison(0x5A);
    dv.poison(0x5A);
    staging_kernel<Geometry, LoadGeometry, Config::kPieceTokens><<<1, 32>>>(dcache.get(), doffsets.get(), valid, dk.get(), dv.get());
    VXQA_CUDA_CHECK_LAUNCH();
    const std::vector<uint8_t> k = dk.download(), v = dv.download();
    for (int t = 0; t < 32; ++t) {
      for (int b = 0; b < kRowBytes; ++b) {
        const uint8_t loaded = kWidens ? (b % 2 ? cache[offsets[t] + b / 2] : 0) : cache[offsets[t] + b];
        const uint8_t want = t < valid ? loaded : 0;
        const int k_at = KLayout::chunk_offset(t, b / 16) + b % 16;
        const int v_at = VLayout::granule_offset(t, b / VLayout::kGranule * VLayout::kGranule) + b % VLayout::kGranule;
        INFO("token " << t << " byte " << b << ": want " << int(want) << ", K tile " << int(k[k_at])
                      << ", V tile " << int(v[v_at]));
        REQUIRE(k[k_at] == want);
        REQUIRE(v[v_at] == want);
      }
    }
  }
}

// =========================================================================================
// The combine path: a plan of many chunks against a plan of one, on the same problem.
// =========================================================================================
using CombineConfig = vxqa::DecodeConfig<64, vxqa::KvType::kE5M2>;

void check_chunked_vs_single(vxqa_test::RandomProblemOptions o, uint64_t seed) {
  using namespace vxqa_test;
  using Config = CombineConfig;
  const RandomProblem p = vxqa::reference::make_random_problem(o, seed);
  const DeviceProblem d(p);
  int max_context = 1;
  for (int len : p.seq_lens) max_context = std::max(max_context, len);
  const int one_chunk = (max_context + Config::kCtaTokens - 1) / Config::kCtaTokens * Config::kCtaTokens;
  const vxqa::DecodePlan many = plan_for<Config>(p, max_context, Config::kCtaTokens);
  const vxqa::DecodePlan single = plan_for<Config>(p, max_context, one_chunk);
  INFO("G " << p.group << " Hkv " << p.kv_heads << " page " << p.page_size << " chunks " << many.num_chunks
            << " seed " << seed);
  REQUIRE(single.num_chunks == 1);
  REQUIRE(many.num_chunks > 1);
  const DecodeResult split = run_decode<Config>(p, d, many);
  const DecodeResult whole = run_decode<Config>(p, d, single);
  check_against_reference(p, split);
  check_against_reference(p, whole);

  // Each is within the harness bounds of the reference; of each other, by the same bounds
  // (kAbs * max|V| + kRel * |value|; lse 2e-3): the two differ only by where P is rounded
  // (against each chunk's max or the whole row's), the fp32 merge and the final fp16
  // rounding, which those bounds already cover for one of them against the exact answer.
  const double vmax = std::max(vxqa::reference::finite_v_abs_max(p), 1e-30);
  const double kAbs = 2e-3, kRel = 1.0 / 1024, kLse = 2e-3;
  const int hq = p.query_heads();
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < hq; ++h) {
      for (int dd = 0; dd < p.head_dim; ++dd) {
        const size_t i = (size_t(b) * hq + h) * p.head_dim + dd;
        const double x = half_bits_to_double(split.out[i]), y = half_bits_to_double(whole.out[i]);
        INFO("seq " << b << " head " << h << " dim " << dd << ": split " << x << " single " << y);
        REQUIRE(std::fabs(x - y) <= kAbs * vmax + kRel * std::max(std::fabs(x), std::fabs(y)));
      }
      const size_t i = size_t(b) * hq + h;
      INFO("lse seq " << b << " head " << h << ": split " << split.lse[i] << " single " << whole.lse[i]);
      if (p.seq_lens[b] == 0) {
        REQUIRE(std::memcmp(&split.lse[i], &whole.lse[i], sizeof(float)) == 0);
      } else {
        REQUIRE(std::fabs(split.lse[i] - whole.lse[i]) <= kLse);
      }
    }
  }
}

}  // namespace

TEST_CASE("QkConsumer: S = Q K^T of a warp tile through the Q and K layouts", "[pieces]") {
  check_qk<64, vxqa::KvType::kE5M2>(100);
  check_qk<128, vxqa::KvType::kE5M2>(101);
  check_qk<256, vxqa::KvType::kE5M2>(102);
  check_qk<64, vxqa::KvType::kFp16>(103);
  check_qk<128, vxqa::KvType::kFp16>(104);
  check_qk<256, vxqa::KvType::kFp16>(105);
}

TEST_CASE("PvConsumer: O + P V of a warp tile through the P and V layouts", "[pieces]") {
  check_pv<64, vxqa::KvType::kE5M2>(200);
  check_pv<128, vxqa::KvType::kE5M2>(201);
  check_pv<256, vxqa::KvType::kE5M2>(202);
  check_pv<64, vxqa::KvType::kFp16>(203);
  check_pv<128, vxqa::KvType::kFp16>(204);
  check_pv<256, vxqa::KvType::kFp16>(205);
}

TEST_CASE("online_softmax_step over three tiles with masked scores and an empty row", "[pieces]") {
  check_online_softmax(300);
  check_online_softmax(301);
}

TEST_CASE("RegisterPiece::load + SmemPublisher::store_k/store_v: bytes land where the layouts say",
          "[pieces]") {
  check_staging<Cfg<64, vxqa::KvType::kE5M2>>(400);
  check_staging<Cfg<128, vxqa::KvType::kE5M2>>(401);
  check_staging<Cfg<256, vxqa::KvType::kE5M2>>(402);
  check_staging<Cfg<64, vxqa::KvType::kFp16>>(403);
  check_staging<Cfg<128, vxqa::KvType::kFp16>>(404);
  check_staging<Cfg<256, vxqa::KvType::kFp16>>(405);
}

TEST_CASE("SmemPublisher with ConvertAt::kPublish widens E5M2 to fp16 where the layouts say",
          "[pieces]") {
  using vxqa::ConvertAt;
  check_staging<vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, vxqa::opt::Convert<ConvertAt::kPublish>>>(410);
  check_staging<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Convert<ConvertAt::kPublish>>>(411);
  check_staging<vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::Warps<2>, vxqa::opt::Convert<ConvertAt::kPublish>>>(412);
}

TEST_CASE("combine: many chunks against one chunk on the same problem", "[pieces]") {
  {  // > 128 chunks for the long sequence: the combine's threads take several chunks each
    vxqa_test::RandomProblemOptions o = vxqa_test::aligned_options<CombineConfig>();
    o.group = 8;
    o.kv_heads = 2;
    o.page_size = 64;
    o.seq_lens = {17000, 5000, 129, 0, 1};
    o.batch = 5;
    o.k_scale = 0.5f;
    o.v_scale = 2.0f;
    check_chunked_vs_single(o, 500);
  }
  {  // two M tiles, page 800, ragged
    vxqa_test::RandomProblemOptions o = vxqa_test::aligned_options<CombineConfig>();
    o.group = 12;
    o.kv_heads = 1;
    o.page_size = 800;
    o.batch = 4;
    o.min_seq_len = 1;
    o.max_seq_len = 4000;
    check_chunked_vs_single(o, 501);
  }
}
