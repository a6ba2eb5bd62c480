// Host-side helpers the GPU piece tests share: seeded draws, a tile of token rows in the
// cache format with its decoded values, and the shared-memory poison.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>
#include <random>
#include <vector>
#include <vxqa/testing/random_problem.h>

namespace vxqa_test {

// Uniform in [lo, hi) from our own draws (std:: distributions differ between libraries).
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  double unit() { return double(g() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  uint64_t below(uint64_t n) { return g() % n; }
};

// Logical rows of a K or V tile: `tokens` x D elements in the cache format, as bytes.
struct HostTile {
  int head_dim, elem_bytes;
  std::vector<unsigned char> bytes;
  double at(int token, int d) const {
    const size_t i = (size_t(token) * head_dim + d) * elem_bytes;
    if (elem_bytes == 1) return vxqa::reference::e5m2_to_double(bytes[i]);
    return vxqa::reference::fp16_to_double(uint16_t(bytes[i] | (bytes[i + 1] << 8)));
  }
};

// Values uniform in [-range, range), rounded to the format (E5M2 saturating).
inline HostTile random_tile(int tokens, int head_dim, int elem_bytes, double range, Rng& rng) {
  HostTile t{head_dim, elem_bytes, std::vector<unsigned char>(size_t(tokens) * head_dim * elem_bytes)};
  for (size_t i = 0; i < size_t(tokens) * head_dim; ++i) {
    const double x = rng.uniform(-range, range);
    if (elem_bytes == 1) {
      t.bytes[i] = vxqa::reference::e5m2_from_double(x);
    } else {
      const uint16_t h = vxqa::reference::fp16_from_double(x);
      t.bytes[2 * i] = uint8_t(h & 0xFF);
      t.bytes[2 * i + 1] = uint8_t(h >> 8);
    }
  }
  return t;
}

// Fills `bytes` of shared memory with 0xFF (NaN in every format) from one warp (16-byte
// stores; bytes % 16 == 0).
__device__ inline void poison_smem(uint8_t* smem, int bytes) {
  for (int i = threadIdx.x * 16; i < bytes; i += 32 * 16)
    *reinterpret_cast<uint4*>(smem + i) = make_uint4(~0u, ~0u, ~0u, ~0u);
}

}  // namespace vxqa_test
