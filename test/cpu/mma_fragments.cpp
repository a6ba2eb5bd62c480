// One warp's mma.m8n8k4 (f16 in, f32 accumulate) emulated on the CPU from the fragment
// functions of vxqa/mma/fragments.cuh, and the QK and PV consumers replayed on it step by
// step, the way vxqa/mma/qk_consumer.cuh and pv_consumer.cuh run on the device:
//   (a) every quad pair's 8 lanes hold each element of A, B (.col and .row) and C once;
//   (b) the emulated warp MMA, fed and read through the PTX ISA table of design.md §3 (written
//       out again here, independently of the library), equals direct 8x8x4 products;
//   (c) the QK consumer over a K tile stored the way the publisher stores it gives S = Q·Kᵀ
//       for all 32 tokens, D = 64/128/256, E5M2 and fp16;
//   (d) the PV consumer gives O = P·V likewise.
// The tiles are stored by replaying SmemPublisher (RegisterPiece row/chunk + the layout
// functions) and their byte image is also compared with the swizzles written out here from
// the layout documentation, so a changed layout key fails (c)/(d) even when publisher and
// consumer change together. Every operand is exact in fp16 (small integers times powers of
// two) and every partial sum exact in fp32, so results are compared exactly in double.
#include <catch2/catch.hpp>

#include <vxqa/mma/fragments.cuh>
#include <vxqa/mma/pv_consumer.cuh>
#include <vxqa/mma/qk_consumer.cuh>
#include <vxqa/numeric/e5m2.cuh>
#include <vxqa/pipeline/register_staged_load.cuh>
#include <vxqa/pipeline/smem_layout.cuh>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using namespace vxqa;

// ---------------------------------------------------------------------------------------
// fp16 / E5M2 values that are exact, and their bits
// ---------------------------------------------------------------------------------------

double half_bits_to_double(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double v;
  if (exponent == 0) {
    v = std::ldexp(double(mantissa), -24);
  } else if (exponent == 31) {
    v = mantissa ? NAN : INFINITY;
  } else {
    v = std::ldexp(double(1024 + mantissa), exponent - 25);
  }
  return sign ? -v : v;
}

// Bits of a value that must be an fp16 normal (or zero) exactly.
uint16_t exact_half_bits(double v) {
  if (v == 0.0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  int e;
  const double f = std::frexp(std::fabs(v), &e);  // |v| = f * 2^e, f in [0.5, 1)
  const int exponent = e - 1;                      // |v| = (2f) * 2^exponent
  REQUIRE(exponent >= -14);
  REQUIRE(exponent <= 15);
  const double m = (2.0 * f - 1.0) * 1024.0;
  REQUIRE(m == std::floor(m));  // exact in 10 mantissa bits
  return uint16_t(sign | ((exponent + 15) << 10) | int(m));
}

// m * 2^e, |m| <= 7, e in -2..1: exact in fp16, products exact, sums of 256 exact in fp32.
double random_operand(std::mt19937& rng) {
  std::uniform_int_distribution<int> mantissa(-7, 7), exponent(-2, 1);
  return std::ldexp(double(mantissa(rng)), exponent(rng));
}

// A random E5M2 code of a finite value in [-7, 7] (exponent field 13..17, i.e. 2^-2..2^2) or ±0.
uint8_t random_e5m2(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 40), exponent(13, 17), mantissa(0, 3), sign(0, 1);
  if (pick(rng) == 0) return uint8_t(sign(rng) << 7);
  return uint8_t((sign(rng) << 7) | (exponent(rng) << 2) | mantissa(rng));
}

uint32_t load_u32(const std::vector<uint8_t>& bytes, int offset) {
  REQUIRE(offset >= 0);
  REQUIRE(offset + 4 <= int(bytes.size()));
  uint32_t w;
  std::memcpy(&w, bytes.data() + offset, 4);  // little-endian, as on the GPU
  return w;
}
void store_u16(std::vector<uint8_t>& bytes, int offset, uint16_t v) {
  REQUIRE(offset >= 0);
  REQUIRE(offset + 2 <= int(bytes.size()));
  std::memcpy(bytes.data() + offset, &v, 2);
}

// Element `i` (0..3) of a two-word .f16x2 fragment: element 0 is the low half of word 0.
uint16_t fragment_half(const uint32_t (&w)[2], int i) {
  return uint16_t(w[i >> 1] >> (16 * (i & 1)));
}
void set_fragment_half(uint32_t (&w)[2], int i, uint16_t h) {
  const int shift = 16 * (i & 1);
  w[i >> 1] = (w[i >> 1] & ~(0xFFFFu << shift)) | (uint32_t(h) << shift);
}

// ---------------------------------------------------------------------------------------
// The warp MMA, emulated from the library's fragment functions
// ---------------------------------------------------------------------------------------

enum class BMajor { kCol, kRow };

struct WarpFragments {
  uint32_t a[32][2];
  uint32_t b[32][2];
};

// d = A·B + c for each quad pair, A and B gathered from the lanes' fragments and C/D
// scattered to them through vxqa::mma's functions. A slot filled twice or never fails.
// The f32 accumulation is exact for the operands used here; the check proves it.
void warp_mma(const WarpFragments& f, BMajor major, const float (&c)[32][8], float (&d)[32][8]) {
  float out[32][8];
  for (int q = 0; q < 4; ++q) {
    double A[8][4], B[4][8], C[8][8];
    int a_seen[8][4] = {}, b_seen[4][8] = {}, c_seen[8][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      if (mma::quad_pair(lane) != q) continue;
      for (int i = 0; i < 4; ++i) {
        const int ar = mma::a_row(lane), ac = mma::a_col(lane, i);
        REQUIRE((ar >= 0 && ar < 8 && ac >= 0 && ac < 4));
        A[ar][ac] = half_bits_to_double(fragment_half(f.a[lane], i));
        ++a_seen[ar][ac];
        const int br = major == BMajor::kCol ? mma::b_col_major_row(lane, i) : mma::b_row_major_row(lane);
        const int bc = major == BMajor::kCol ? mma::b_col_major_col(lane) : mma::b_row_major_col(lane, i);
        REQUIRE((br >= 0 && br < 4 && bc >= 0 && bc < 8));
        B[br][bc] = half_bits_to_double(fragment_half(f.b[lane], i));
        ++b_seen[br][bc];
      }
      for (int i = 0; i < 8; ++i) {
        const int cr = mma::c_row(lane, i), cc = mma::c_col(lane, i);
        REQUIRE((cr >= 0 && cr < 8 && cc >= 0 && cc < 8));
        C[cr][cc] = c[lane][i];
        ++c_seen[cr][cc];
      }
    }
    for (int r = 0; r < 8; ++r)
      for (int k = 0; k < 4; ++k) REQUIRE((a_seen[r][k] == 1 && b_seen[k][r] == 1));
    for (int r = 0; r < 8; ++r)
      for (int n = 0; n < 8; ++n) REQUIRE(c_seen[r][n] == 1);
    for (int lane = 0; lane < 32; ++lane) {
      if (mma::quad_pair(lane) != q) continue;
      for (int i = 0; i < 8; ++i) {
        const int r = mma::c_row(lane, i), n = mma::c_col(lane, i);
        double acc = C[r][n];
        for (int k = 0; k < 4; ++k) acc += A[r][k] * B[k][n];
        REQUIRE(double(float(acc)) == acc);  // the f32 accumulator is exact here
        out[lane][i] = float(acc);
      }
    }
  }
  std::memcpy(d, out, sizeof(out));
}

// The PTX ISA fragment table (design.md §3), written out independently of the library.
namespace ptx {
int hi(int lane) { return lane >= 16 ? 4 : 0; }
int quad_pair(int lane) { return (lane % 16) / 4; }
int a_row(int lane) { return lane % 4 + hi(lane); }
int b_col_row(int /*lane*/, int i) { return i; }
int b_col_col(int lane) { return lane % 4 + hi(lane); }
int b_row_row(int lane) { return lane % 4; }
int b_row_col(int lane, int i) { return i + hi(lane); }
int c_row(int lane, int i) { return (lane & 1) + (i & 2) + hi(lane); }
int c_col(int lane, int i) { return (i & 4) + (lane & 2) + (i & 1); }
}  // namespace ptx

// ---------------------------------------------------------------------------------------
// Tiles in shared memory: stored as SmemPublisher stores them, and the documented swizzles
// ---------------------------------------------------------------------------------------

// kPieceTokens as DecodeConfig derives it (8 KB of registers a warp per piece).
template <class G>
constexpr int piece_tokens() {
  return G::kTileBytes <= 8192 ? G::kTokens : 8192 / G::kRowBytes;
}

// rows[t] = the cache row of token t as it is in global memory (kRowBytes). Returns the tile
// as SmemPublisher::store_k / store_v leave it after all pieces of a tile.
template <class G, bool kIsV>
std::vector<uint8_t> publish_tile(const std::vector<std::vector<uint8_t>>& rows) {
  using Piece = pipeline::RegisterPiece<G, piece_tokens<G>()>;
  using K = pipeline::KTileLayout<G>;
  using V = pipeline::VTileLayout<G>;
  std::vector<uint8_t> tile(G::kTileBytes, 0);
  std::vector<int> written(G::kTileBytes, 0);
  auto put = [&](int dst, const uint8_t* src, int n) {
    REQUIRE(dst >= 0);
    REQUIRE(dst + n <= G::kTileBytes);
    for (int b = 0; b < n; ++b) {
      tile[dst + b] = src[b];
      ++written[dst + b];
    }
  };
  for (int first_row = 0; first_row < G::kTokens; first_row += piece_tokens<G>()) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < Piece::kLoadsPerLane; ++i) {
        const int row = Piece::row_of(first_row, i, lane), chunk = Piece::chunk_of(i, lane);
        const uint8_t* src = rows[row].data() + 16 * chunk;  // the lane's 16-byte load
        if (!kIsV) {
          put(K::chunk_offset(row, chunk), src, 16);
        } else if (V::kGranule == 16) {
          put(V::granule_offset(row, 16 * chunk), src, 16);
        } else {
          put(V::granule_offset(row, 16 * chunk), src, 8);
          put(V::granule_offset(row, 16 * chunk + 8), src + 8, 8);
        }
      }
    }
  }
  for (int b = 0; b < G::kTileBytes; ++b) REQUIRE(written[b] == 1);
  return tile;
}

// The K swizzle as documented: 16-byte chunk c of row t sits at chunk c ^ key(t), key from
// the token's column in its n-block (t & 7) and the n-block's parity; 64-byte rows (4 chunks)
// use bit 1 of the column and the parity.
template <class G>
std::vector<uint8_t> documented_k_tile(const std::vector<std::vector<uint8_t>>& rows) {
  std::vector<uint8_t> tile(G::kTileBytes, 0);
  for (int t = 0; t < G::kTokens; ++t) {
    const int col = t & 7, parity = (t >> 3) & 1;
    const int key = G::kChunksPerRow >= 8 ? (col & 3) | (parity << 2) : ((col >> 1) & 1) | (parity << 1);
    for (int c = 0; c < G::kChunksPerRow; ++c)
      std::memcpy(&tile[t * G::kRowBytes + 16 * (c ^ key)], &rows[t][16 * c], 16);
  }
  return tile;
}

// The V swizzle as documented: granules of 16 bytes (8 for 8-byte spans) XORed with a key
// from r = t & 3: span 8 -> r bit 1; 16 -> r bit 0, r bit 1 moved to bit 2; 32 -> r;
// 64 -> r and granule bit 3 at bit 2.
template <class G>
std::vector<uint8_t> documented_v_tile(const std::vector<std::vector<uint8_t>>& rows) {
  const int span = G::kSpanBytes, granule = span >= 16 ? 16 : 8;
  std::vector<uint8_t> tile(G::kTileBytes, 0);
  for (int t = 0; t < G::kTokens; ++t) {
    const int r = t & 3;
    for (int g = 0; g < G::kRowBytes / granule; ++g) {
      int key;
      if (span == 8) key = (r >> 1) & 1;
      else if (span == 16) key = (r & 1) | ((r & 2) << 1);
      else if (span == 32) key = r;
      else key = r | (((g >> 3) & 1) << 2);
      std::memcpy(&tile[t * G::kRowBytes + granule * (g ^ key)], &rows[t][granule * g], granule);
    }
  }
  return tile;
}

// A cache row of D random exact elements: the bytes as stored and the values.
template <int kElemBytes>
void random_row(std::mt19937& rng, int dims, std::vector<uint8_t>& bytes, std::vector<double>& values) {
  bytes.assign(dims * kElemBytes, 0);
  values.assign(dims, 0.0);
  for (int d = 0; d < dims; ++d) {
    if (kElemBytes == 1) {
      const uint8_t code = random_e5m2(rng);
      bytes[d] = code;
      values[d] = half_bits_to_double(e5m2_to_half_bits(code));
    } else {
      const double v = random_operand(rng);
      const uint16_t h = exact_half_bits(v);
      std::memcpy(&bytes[2 * d], &h, 2);
      values[d] = v;
    }
  }
}

// The two B words of one MMA from a lane's 4 consecutive dims: one E5M2 word through the
// library's PRMT decode, or two fp16 words as they are.
template <bool kE5m2>
void b_words(const uint32_t* words, int step, uint32_t (&b)[2]) {
  if (kE5m2) {
    const uint2 h = e5m2x4_to_half2x2_bits(words[step]);
    b[0] = h.x, b[1] = h.y;
  } else {
    b[0] = words[2 * step], b[1] = words[2 * step + 1];
  }
}

// ---------------------------------------------------------------------------------------
// (c) QK
// ---------------------------------------------------------------------------------------

template <int D, int E>
void check_qk(uint32_t seed) {
  using G = pipeline::WarpTileGeometry<D, E>;
  using Qk = mma::QkConsumer<G>;
  using KL = typename Qk::KLayout;
  using QL = typename Qk::QLayout;
  INFO("QK, head dim " << D << ", " << E << "-byte elements, seed " << seed);
  std::mt19937 rng(seed);

  // Q: 8 heads (fp16) in the Q tile; K: 32 token rows, stored as the publisher stores them.
  double q[8][D];
  std::vector<uint8_t> q_tile(QL::kBytes, 0);
  for (int h = 0; h < 8; ++h)
    for (int d = 0; d < D; ++d) {
      q[h][d] = random_operand(rng);
      store_u16(q_tile, QL::offset(h, d), exact_half_bits(q[h][d]));
    }
  std::vector<std::vector<uint8_t>> rows(G::kTokens);
  std::vector<std::vector<double>> k(G::kTokens);
  for (int t = 0; t < G::kTokens; ++t) random_row<E>(rng, D, rows[t], k[t]);
  const std::vector<uint8_t> k_tile = publish_tile<G, false>(rows);
  REQUIRE(k_tile == documented_k_tile<G>(rows));

  // QkConsumer::run, lane by lane, one warp MMA per 4 dims.
  float s[32][8] = {};
  uint32_t kw[32][4], qw[32][G::kDimsPerChunk / 2];
  for (int chunk = 0; chunk < G::kChunksPerRow; ++chunk) {
    const int dim0 = chunk * G::kDimsPerChunk;
    for (int lane = 0; lane < 32; ++lane) {
      const int k_offset = KL::chunk_offset(Qk::b_token(lane), chunk);
      for (int w = 0; w < 4; ++w) kw[lane][w] = load_u32(k_tile, k_offset + 4 * w);
      const int q_row = QL::offset(mma::a_row(lane), 0);
      for (int w = 0; w < G::kDimsPerChunk / 2; ++w) qw[lane][w] = load_u32(q_tile, q_row + 2 * dim0 + 4 * w);
    }
    for (int step = 0; step < G::kDimsPerChunk / 4; ++step) {
      WarpFragments f;
      for (int lane = 0; lane < 32; ++lane) {
        b_words<Qk::kE5m2>(kw[lane], step, f.b[lane]);
        f.a[lane][0] = qw[lane][2 * step], f.a[lane][1] = qw[lane][2 * step + 1];
      }
      warp_mma(f, BMajor::kCol, s, s);
    }
  }

  // Every (head, token) of the 8 x 32 block once, equal to Q·Kᵀ.
  int seen[8][32] = {};
  int mismatches = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 8; ++i) {
      const int head = mma::c_row(lane, i), token = Qk::c_token(lane, i);
      REQUIRE((head >= 0 && head < 8 && token >= 0 && token < 32));
      ++seen[head][token];
      double expect = 0;
      for (int d = 0; d < D; ++d) expect += q[head][d] * k[token][d];
      if (double(s[lane][i]) != expect) {
        if (++mismatches <= 4) FAIL_CHECK("lane " << lane << " i " << i << ": S[" << head << "][" << token
                                                   << "] = " << s[lane][i] << ", Q·K = " << expect);
      }
    }
  for (int h = 0; h < 8; ++h)
    for (int t = 0; t < 32; ++t) REQUIRE(seen[h][t] == 1);
  REQUIRE(mismatches == 0);
}

// ---------------------------------------------------------------------------------------
// (d) PV
// ---------------------------------------------------------------------------------------

template <int D, int E>
void check_pv(uint32_t seed) {
  using G = pipeline::WarpTileGeometry<D, E>;
  using Pv = mma::PvConsumer<G>;
  using VL = typename Pv::VLayout;
  using PL = pipeline::ProbTileLayout;
  constexpr int kNBlocks = Pv::kNBlocks;
  INFO("PV, head dim " << D << ", " << E << "-byte elements, seed " << seed);
  std::mt19937 rng(seed);

  double p[8][32];
  std::vector<uint8_t> p_tile(PL::kBytes, 0);
  for (int h = 0; h < 8; ++h)
    for (int t = 0; t < 32; ++t) {
      p[h][t] = random_operand(rng);
      store_u16(p_tile, PL::offset(h, t), exact_half_bits(p[h][t]));
    }
  std::vector<std::vector<uint8_t>> rows(G::kTokens);
  std::vector<std::vector<double>> v(G::kTokens);
  for (int t = 0; t < G::kTokens; ++t) random_row<E>(rng, D, rows[t], v[t]);
  const std::vector<uint8_t> v_tile = publish_tile<G, true>(rows);
  REQUIRE(v_tile == documented_v_tile<G>(rows));

  // PvConsumer::run, lane by lane: per k-step of 4 tokens, one warp MMA per n-block.
  std::vector<std::array<std::array<float, 8>, 32>> o(kNBlocks);
  for (auto& block : o)
    for (auto& lane_acc : block) lane_acc.fill(0.f);
  for (int step = 0; step < 8; ++step) {
    WarpFragments f[kNBlocks];
    for (int lane = 0; lane < 32; ++lane) {
      const int token = 4 * step + mma::b_row_major_row(lane);
      const int span_byte = Pv::span(lane) * G::kSpanBytes;
      const int p_row = PL::offset(mma::a_row(lane), 0);
      uint32_t a[2] = {load_u32(p_tile, p_row + 8 * step), load_u32(p_tile, p_row + 8 * step + 4)};
      uint32_t vw[G::kSpanBytes / 4];
      if (VL::kGranule == 16) {
        for (int g = 0; g < G::kSpanBytes / 16; ++g) {
          const int offset = VL::granule_offset(token, span_byte + 16 * g);
          for (int w = 0; w < 4; ++w) vw[4 * g + w] = load_u32(v_tile, offset + 4 * w);
        }
      } else {
        const int offset = VL::granule_offset(token, span_byte);
        vw[0] = load_u32(v_tile, offset), vw[1] = load_u32(v_tile, offset + 4);
      }
      for (int n = 0; n < kNBlocks; ++n) {
        f[n].a[lane][0] = a[0], f[n].a[lane][1] = a[1];
        b_words<Pv::kE5m2>(vw, n, f[n].b[lane]);
      }
    }
    for (int n = 0; n < kNBlocks; ++n) {
      float acc[32][8];
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 8; ++i) acc[lane][i] = o[n][lane][i];
      warp_mma(f[n], BMajor::kRow, acc, acc);
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 8; ++i) o[n][lane][i] = acc[lane][i];
    }
  }

  // Every (head, dim) of the 8 x D output once, equal to P·V.
  std::vector<int> seen(8 * D, 0);
  int mismatches = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int n = 0; n < kNBlocks; ++n)
      for (int i = 0; i < 8; ++i) {
        const int head = mma::c_row(lane, i), dim = Pv::c_dim(lane, n, i);
        REQUIRE((head >= 0 && head < 8 && dim >= 0 && dim < D));
        ++seen[head * D + dim];
        double expect = 0;
        for (int t = 0; t < 32; ++t) expect += p[head][t] * v[t][dim];
        if (double(o[n][lane][i]) != expect) {
          if (++mismatches <= 4)
            FAIL_CHECK("lane " << lane << " n-block " << n << " i " << i << ": O[" << head << "][" << dim
                               << "] = " << o[n][lane][i] << ", P·V = " << expect);
        }
      }
  for (int x = 0; x < 8 * D; ++x) REQUIRE(seen[x] == 1);
  REQUIRE(mismatches == 0);
}

}  // namespace

// ---------------------------------------------------------------------------------------

TEST_CASE("fragment functions: quad pairs, and each quad pair covers A, B and C once", "[mma_fragments]") {
  int lanes_of[4] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int q = mma::quad_pair(lane);
    REQUIRE(q == ptx::quad_pair(lane));  // lanes 4q..4q+3 and 16+4q..16+4q+3
    REQUIRE(mma::lane_hi(lane) == ptx::hi(lane));
    ++lanes_of[q];
  }
  for (int q = 0; q < 4; ++q) REQUIRE(lanes_of[q] == 8);

  for (int q = 0; q < 4; ++q) {
    INFO("quad pair " << q);
    int a[8][4] = {}, b_col[4][8] = {}, b_row[4][8] = {}, c[8][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      if (mma::quad_pair(lane) != q) continue;
      for (int i = 0; i < 4; ++i) {
        const int ar = mma::a_row(lane), ac = mma::a_col(lane, i);
        const int cr = mma::b_col_major_row(lane, i), cc = mma::b_col_major_col(lane);
        const int rr = mma::b_row_major_row(lane), rc = mma::b_row_major_col(lane, i);
        REQUIRE((ar >= 0 && ar < 8 && ac >= 0 && ac < 4));
        REQUIRE((cr >= 0 && cr < 4 && cc >= 0 && cc < 8));
        REQUIRE((rr >= 0 && rr < 4 && rc >= 0 && rc < 8));
        ++a[ar][ac], ++b_col[cr][cc], ++b_row[rr][rc];
      }
      for (int i = 0; i < 8; ++i) {
        const int r = mma::c_row(lane, i), n = mma::c_col(lane, i);
        REQUIRE((r >= 0 && r < 8 && n >= 0 && n < 8));
        ++c[r][n];
      }
    }
    for (int r = 0; r < 8; ++r)
      for (int k = 0; k < 4; ++k) {
        CHECK(a[r][k] == 1);
        CHECK(b_col[k][r] == 1);
        CHECK(b_row[k][r] == 1);
      }
    for (int r = 0; r < 8; ++r)
      for (int n = 0; n < 8; ++n) CHECK(c[r][n] == 1);
  }
}

TEST_CASE("fragment functions say what the PTX ISA table says", "[mma_fragments]") {
  for (int lane = 0; lane < 32; ++lane) {
    INFO("lane " << lane);
    REQUIRE(mma::a_row(lane) == ptx::a_row(lane));
    REQUIRE(mma::b_col_major_col(lane) == ptx::b_col_col(lane));
    REQUIRE(mma::b_row_major_row(lane) == ptx::b_row_row(lane));
    for (int i = 0; i < 4; ++i) {
      REQUIRE(mma::a_col(lane, i) == i);
      REQUIRE(mma::b_col_major_row(lane, i) == ptx::b_col_row(lane, i));
      REQUIRE(mma::b_row_major_col(lane, i) == ptx::b_row_col(lane, i));
    }
    for (int i = 0; i < 8; ++i) {
      REQUIRE(mma::c_row(lane, i) == ptx::c_row(lane, i));
      REQUIRE(mma::c_col(lane, i) == ptx::c_col(lane, i));
    }
  }
}

TEST_CASE("emulated warp mma.m8n8k4 equals direct products, row.col and row.row", "[mma_fragments]") {
  std::mt19937 rng(20240611);
  for (const BMajor major : {BMajor::kCol, BMajor::kRow}) {
    for (int trial = 0; trial < 20; ++trial) {
      INFO((major == BMajor::kCol ? "row.col" : "row.row") << ", trial " << trial);
      // An independent 8x8x4 problem per quad pair, loaded into the fragments as the PTX
      // table (not the library) says, and read back from D the same way.
      double A[4][8][4], B[4][4][8], C[4][8][8];
      WarpFragments f;
      float c[32][8], d[32][8];
      for (int q = 0; q < 4; ++q) {
        for (int r = 0; r < 8; ++r)
          for (int k = 0; k < 4; ++k) A[q][r][k] = random_operand(rng);
        for (int k = 0; k < 4; ++k)
          for (int n = 0; n < 8; ++n) B[q][k][n] = random_operand(rng);
        for (int r = 0; r < 8; ++r)
          for (int n = 0; n < 8; ++n) C[q][r][n] = random_operand(rng);
      }
      for (int lane = 0; lane < 32; ++lane) {
        const int q = ptx::quad_pair(lane);
        for (int i = 0; i < 4; ++i) {
          set_fragment_half(f.a[lane], i, exact_half_bits(A[q][ptx::a_row(lane)][i]));
          const double b = major == BMajor::kCol ? B[q][ptx::b_col_row(lane, i)][ptx::b_col_col(lane)]
                                                 : B[q][ptx::b_row_row(lane)][ptx::b_row_col(lane, i)];
          set_fragment_half(f.b[lane], i, exact_half_bits(b));
        }
        for (int i = 0; i < 8; ++i) c[lane][i] = float(C[q][ptx::c_row(lane, i)][ptx::c_col(lane, i)]);
      }
      warp_mma(f, major, c, d);
      for (int lane = 0; lane < 32; ++lane) {
        const int q = ptx::quad_pair(lane);
        for (int i = 0; i < 8; ++i) {
          const int r = ptx::c_row(lane, i), n = ptx::c_col(lane, i);
          double expect = C[q][r][n];
          for (int k = 0; k < 4; ++k) expect += A[q][r][k] * B[q][k][n];
          INFO("lane " << lane << " i " << i);
          REQUIRE(double(d[lane][i]) == expect);
        }
      }
    }
  }
}

TEST_CASE("the emulated mma sees a wrong fragment", "[mma_fragments]") {
  // Guard against an emulator that cannot fail: B loaded as row-major but run as .col gives a
  // different product for some random input.
  std::mt19937 rng(7);
  WarpFragments f;
  float zero[32][8] = {}, col[32][8], row[32][8];
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      set_fragment_half(f.a[lane], i, exact_half_bits(random_operand(rng)));
      set_fragment_half(f.b[lane], i, exact_half_bits(random_operand(rng)));
    }
  warp_mma(f, BMajor::kCol, zero, col);
  warp_mma(f, BMajor::kRow, zero, row);
  bool differ = false;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 8; ++i) differ = differ || col[lane][i] != row[lane][i];
  CHECK(differ);
}

TEST_CASE("QK consumer replayed on the emulated mma gives S = Q·Kᵀ, E5M2", "[mma_fragments]") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    check_qk<64, 1>(seed);
    check_qk<128, 1>(seed);
    check_qk<256, 1>(seed);
  }
}

TEST_CASE("QK consumer replayed on the emulated mma gives S = Q·Kᵀ, fp16", "[mma_fragments]") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    check_qk<64, 2>(seed);
    check_qk<128, 2>(seed);
    check_qk<256, 2>(seed);
  }
}

TEST_CASE("PV consumer replayed on the emulated mma gives O = P·V, E5M2", "[mma_fragments]") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    check_pv<64, 1>(seed);
    check_pv<128, 1>(seed);
    check_pv<256, 1>(seed);
  }
}

TEST_CASE("PV consumer replayed on the emulated mma gives O = P·V, fp16", "[mma_fragments]") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    check_pv<64, 2>(seed);
    check_pv<128, 2>(seed);
    check_pv<256, 2>(seed);
  }
}
