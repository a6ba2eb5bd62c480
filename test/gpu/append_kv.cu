// append_kv: this step's K and V into the paged cache. Against the CPU encoder, bit for bit
// (E5M2, E4M3, fp16 and bf16 caches, fp16 and bf16 inputs, scales as values and as device
// pointers, values that saturate, round to zero or are subnormal, inf and NaN, for E4M3 and
// bf16 exact ties, for bf16 overflow to inf, and a bf16 input into a bf16 cache under scale
// 1 kept bit for bit), every byte it must not write left as it was (negative slots, bad slots,
// padding); every negative slot skipped silently, slots past the pool flagged
// (kAppendErrorBadSlot); device scales that are 0, negative, NaN or inf flagged
// (kErrorBadKScale / kErrorBadVScale) with their rows written as NaN codes; and end to end:
// a random problem's cache written by append_kv, then decoded, equals the float64 reference
// over that cache.
#include "gpu/decode_harness.cuh"
#include "gpu/host_tile.h"

#include <vxqa/numeric/e4m3.cuh>

#include <cuda_bf16.h>
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace {

using vxqa_test::DeviceBuffer;
using vxqa_test::Rng;

constexpr unsigned char kCachePoison = 0x5A;

uint16_t act_bits(double x, vxqa::ActType t) {
  return t == vxqa::ActType::kFp16 ? vxqa::reference::fp16_from_double(x) : vxqa::reference::bf16_from_double(x);
}

float act_to_float(uint16_t bits, vxqa::ActType t) {
  if (t == vxqa::ActType::kFp16) return float(vxqa::reference::fp16_to_double(bits));
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A value drawn to exercise the encoder: mostly ordinary, some that saturate, some that
// round to zero or are subnormal in E5M2, and a few inf / NaN / -0.
double draw_value(Rng& rng) {
  const uint64_t kind = rng.below(40);
  if (kind == 0) return INFINITY;
  if (kind == 1) return -INFINITY;
  if (kind == 2) return NAN;
  if (kind == 3) return -0.0;
  if (kind < 7) return rng.uniform(-2e5, 2e5);
  if (kind < 10) return rng.uniform(-3e-5, 3e-5);
  return rng.uniform(-8, 8);
}

struct Pool {
  int num_pages = 7, page_size = 5, kv_heads = 2, head_dim = 64;
  int64_t head_stride, token_stride, page_stride;  // elements, padded so that gaps exist
  explicit Pool(int eb) {
    head_stride = head_dim + 16 / eb;
    token_stride = kv_heads * head_stride + 16 / eb;
    page_stride = page_size * token_stride + 32 / eb;
  }
  int64_t elements() const { return num_pages * page_stride; }
  int64_t index(int64_t slot, int h, int d) const {
    return (slot / page_size) * page_stride + (slot % page_size) * token_stride + h * head_stride + d;
  }
};

struct Case {
  vxqa::KvType cache;
  vxqa::ActType input;
  float k_scale, v_scale;  // with scale_pointers, a bad one (not finite or not > 0) is flagged
  bool scale_pointers;
};

// What append_kv takes as a scale (vxqa::scale_is_valid, written out here).
bool good_scale(float s) { return s > 0.f && std::isfinite(s); }

// Kinds 0..3 of the draws below: ±inf, NaN and -0.
double special_value(uint64_t kind) {
  const double specials[] = {INFINITY, -INFINITY, NAN, -0.0};
  return specials[kind];
}

// draw_value for an E4M3 cache, drawn as the x / scale to encode and returned times `scale`
// (so that a tie stays one under a power-of-two scale): past ±448, subnormal (below 2^-6)
// or under half the smallest (2^-10), exact midpoints of neighbouring finite codes (ties to
// even), and a few inf / NaN / -0.
double draw_e4m3_value(Rng& rng, float scale) {
  const uint64_t kind = rng.below(40);
  if (kind < 4) return special_value(kind);
  const double s = good_scale(scale) ? scale : 1.0;  // a bad device scale: rows are NaN anyway
  if (kind < 7) return s * rng.uniform(-2000, 2000);
  if (kind < 10) return s * rng.uniform(-0.02, 0.02);
  if (kind < 16) {
    const uint8_t code = uint8_t(rng.below(0x7E));  // and code + 1: up to 448 (0x7E)
    const double tie = (double(vxqa::e4m3_to_float(code)) + vxqa::e4m3_to_float(uint8_t(code + 1))) / 2;
    return s * (rng.below(2) ? -tie : tie);
  }
  return s * rng.uniform(-8, 8);
}

// draw_value for a bf16 cache, drawn as the x / scale to encode and returned times `scale`
// where that keeps it a tie: inputs near bf16's largest finite (past it under a scale < 1:
// inf), fp32 subnormals (bf16's too: rounded under a scale > 1), exact midpoints of
// neighbouring bf16 codes that fp16 holds (a tie after an fp16 input's exact division by a
// power of two), and a few inf / NaN / -0.
double draw_bf16_value(Rng& rng, float scale) {
  const uint64_t kind = rng.below(40);
  if (kind < 4) return special_value(kind);
  const double s = good_scale(scale) ? scale : 1.0;  // a bad device scale: rows are NaN anyway
  if (kind < 7) return rng.uniform(-3.3e38, 3.3e38);
  if (kind < 10) return s * rng.uniform(-1.2e-38, 1.2e-38);
  if (kind < 16) {
    const uint16_t code = uint16_t(0x3880u + rng.below(0x4600u - 0x3880u));  // 2^-14 .. 8192: fp16's
    const double tie = (vxqa::reference::bf16_to_double(code) + vxqa::reference::bf16_to_double(code + 1)) / 2;
    return s * (rng.below(2) ? -tie : tie);
  }
  return s * rng.uniform(-8, 8);
}

// An E5M2 NaN code (either sign, any mantissa): what x / NaN encodes to.
bool is_e5m2_nan(unsigned char b) { return (b & 0x7Cu) == 0x7Cu && (b & 0x03u) != 0; }

void check_against_cpu_encoder(const Case& c, uint64_t seed) {
  const int eb = vxqa::kv_type_is_fp8(c.cache) ? 1 : 2;
  const bool e4m3 = c.cache == vxqa::KvType::kE4M3, bf16 = c.cache == vxqa::KvType::kBf16;
  INFO("cache " << vxqa::kv_type_name(c.cache) << " input " << (c.input == vxqa::ActType::kFp16 ? "fp16" : "bf16")
                << " scales " << c.k_scale << "/" << c.v_scale << (c.scale_pointers ? " (device)" : "")
                << " seed " << seed);
  Rng rng(seed);
  const Pool pool(eb);
  const int num_slots = pool.num_pages * pool.page_size, tokens = 23;
  // Distinct slots for the tokens, 4 of them negative (skipped, no error: before fc1accf a
  // slot below -1 set kAppendErrorBadSlot, which the error word's check below refuses).
  std::vector<int64_t> all(num_slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng.g);
  std::vector<int64_t> slots(all.begin(), all.begin() + tokens);
  const int64_t negative[] = {-1, -2, -7, INT64_MIN};
  for (int i = 0; i < 4; ++i) slots[rng.below(tokens)] = negative[rng.below(4)];

  // Inputs with padded strides: [token][head] rows of D, 8 elements of gap.
  const int64_t in_head_stride = pool.head_dim + 8, in_token_stride = pool.kv_heads * in_head_stride + 8;
  std::vector<uint16_t> key(tokens * in_token_stride), value(key.size());
  auto draw = [&](float scale) {
    return e4m3 ? draw_e4m3_value(rng, scale) : bf16 ? draw_bf16_value(rng, scale) : draw_value(rng);
  };
  for (auto& x : key) x = act_bits(draw(c.k_scale), c.input);
  for (auto& x : value) x = act_bits(draw(c.v_scale), c.input);

  DeviceBuffer<uint16_t> dkey(key.size()), dvalue(value.size());
  DeviceBuffer<int64_t> dslots(slots.size());
  DeviceBuffer<unsigned char> kc(pool.elements() * eb), vc(pool.elements() * eb);
  DeviceBuffer<float> scales(2);
  DeviceBuffer<uint32_t> errors(1);
  dkey.upload(key);
  dvalue.upload(value);
  dslots.upload(slots);
  kc.poison(kCachePoison);
  vc.poison(kCachePoison);
  scales.upload({c.k_scale, c.v_scale});
  errors.poison(0);

  vxqa::AppendKvParams p;
  p.key = dkey.get();
  p.value = dvalue.get();
  p.key_token_stride = p.value_token_stride = in_token_stride;
  p.key_head_stride = p.value_head_stride = in_head_stride;
  p.input_type = c.input;
  p.slot_mapping = dslots.get();
  p.num_tokens = tokens;
  p.num_kv_heads = pool.kv_heads;
  p.head_dim = pool.head_dim;
  p.k_cache = kc.get();
  p.v_cache = vc.get();
  p.cache_type = c.cache;
  p.page_stride = pool.page_stride;
  p.token_stride = pool.token_stride;
  p.head_stride = pool.head_stride;
  p.page_size = pool.page_size;
  p.num_pages = pool.num_pages;
  if (c.scale_pointers) {
    p.k_scale = p.v_scale = -1.f;  // ignored: the pointers win
    p.k_scale_ptr = scales.get();
    p.v_scale_ptr = scales.get() + 1;
  } else {
    p.k_scale = c.k_scale;
    p.v_scale = c.v_scale;
  }
  p.errors = errors.get();
  const vxqa::Status s = vxqa::append_kv(p, 0);
  INFO(s.message());
  REQUIRE(s.ok());
  VXQA_CUDA_CHECK_LAUNCH();
  const auto k_out = kc.download(), v_out = vc.download();
  // Host scales are good (validate_append_kv refuses others); device ones may not be.
  const bool k_bad = c.scale_pointers && !good_scale(c.k_scale), v_bad = c.scale_pointers && !good_scale(c.v_scale);
  const uint32_t want_errors =
      (k_bad ? uint32_t(vxqa::kErrorBadKScale) : 0u) | (v_bad ? uint32_t(vxqa::kErrorBadVScale) : 0u);
  REQUIRE(errors.download()[0] == want_errors);

  // Expected bytes: poison everywhere, the encoded rows at the tokens' slots.
  // An fp16 or bf16 NaN may come back with any payload (the GPU's is 0x7FFF): such elements
  // are compared as "a NaN" (nan_at marks their first byte). A bf16 input into a bf16 cache
  // under scale 1 must come back as its own bits, not the encoder's. Under a bad scale every
  // element of the rows it scales must be a NaN code, of any sign and payload (nan_at, E5M2
  // too); E4M3 has one NaN code that its encoder gives, 0x7F, required exactly (bad scales too).
  std::vector<unsigned char> k_want(k_out.size(), kCachePoison), v_want(v_out.size(), kCachePoison);
  std::vector<char> k_nan(k_out.size(), 0), v_nan(v_out.size(), 0);
  auto encode = [&](uint16_t bits, float scale, unsigned char* dst, char* nan_at) {
    if (e4m3) {
      dst[0] = vxqa::float_to_e4m3(good_scale(scale) ? act_to_float(bits, c.input) / scale : NAN);
      return;
    }
    if (!good_scale(scale)) {
      nan_at[0] = 1;
      return;
    }
    const float x = act_to_float(bits, c.input) / scale;
    if (eb == 1) {
      dst[0] = vxqa::float_to_e5m2(x, vxqa::Saturation::kFinite);
    } else {
      const bool identity = bf16 && c.input == vxqa::ActType::kBf16 && scale == 1.f;
      const uint16_t h = identity ? bits
                         : bf16   ? vxqa::reference::bf16_from_double(double(x))
                                  : vxqa::reference::fp16_from_double(double(x));
      dst[0] = uint8_t(h & 0xFF);
      dst[1] = uint8_t(h >> 8);
      nan_at[0] = std::isnan(x);
    }
  };
  auto same = [&](const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                  const std::vector<char>& nan_at, size_t i) {
    if (eb == 1 && nan_at[i]) return is_e5m2_nan(got[i]);
    if (eb == 2 && (nan_at[i] || (i > 0 && nan_at[i - 1]))) {
      const size_t e = nan_at[i] ? i : i - 1;
      const uint16_t h = uint16_t(got[e] | (got[e + 1] << 8));
      const uint16_t exponent = bf16 ? 0x7F80 : 0x7C00;
      return (h & exponent) == exponent && (h & ~exponent & 0x7FFF) != 0;
    }
    return got[i] == want[i];
  };
  for (int t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    for (int h = 0; h < pool.kv_heads; ++h)
      for (int d = 0; d < pool.head_dim; ++d) {
        const int64_t src = t * in_token_stride + h * in_head_stride + d, dst = pool.index(slots[t], h, d) * eb;
        encode(key[src], c.k_scale, &k_want[dst], &k_nan[dst]);
        encode(value[src], c.v_scale, &v_want[dst], &v_nan[dst]);
      }
  }
  for (size_t i = 0; i < k_want.size(); ++i) {
    INFO("K byte " << i << ": got " << int(k_out[i]) << " want " << int(k_want[i]));
    REQUIRE(same(k_out, k_want, k_nan, i));
  }
  for (size_t i = 0; i < v_want.size(); ++i) {
    INFO("V byte " << i << ": got " << int(v_out[i]) << " want " << int(v_want[i]));
    REQUIRE(same(v_out, v_want, v_nan, i));
  }
}

}  // namespace

TEST_CASE("append_kv writes what the CPU encoder gives, bit for bit, and nothing else", "[append_kv]") {
  using vxqa::ActType;
  using vxqa::KvType;
  const Case cases[] = {
      {KvType::kE5M2, ActType::kFp16, 1.f, 1.f, false},   {KvType::kE5M2, ActType::kFp16, 0.37f, 2.5f, false},
      {KvType::kE5M2, ActType::kBf16, 1.f, 1.f, false},   {KvType::kE5M2, ActType::kBf16, 3.f, 0.125f, true},
      {KvType::kE5M2, ActType::kFp16, 0.75f, 1.5f, true}, {KvType::kFp16, ActType::kFp16, 1.f, 1.f, false},
      {KvType::kFp16, ActType::kBf16, 1.f, 1.f, false},   {KvType::kFp16, ActType::kFp16, 0.5f, 4.f, true},
      {KvType::kE4M3, ActType::kFp16, 1.f, 1.f, false},   {KvType::kE4M3, ActType::kFp16, 0.37f, 2.5f, false},
      {KvType::kE4M3, ActType::kBf16, 1.f, 1.f, false},   {KvType::kE4M3, ActType::kBf16, 2.f, 0.125f, true},
      {KvType::kE4M3, ActType::kFp16, 0.75f, 0.5f, true},
      // bf16: kept bit for bit, ties (an fp16 input under 1 and powers of two), overflow
      // (scales < 1), rounding of subnormals (scales > 1).
      {KvType::kBf16, ActType::kBf16, 1.f, 1.f, false},   {KvType::kBf16, ActType::kBf16, 1.f, 1.f, true},
      {KvType::kBf16, ActType::kFp16, 1.f, 1.f, false},   {KvType::kBf16, ActType::kFp16, 0.37f, 2.5f, false},
      {KvType::kBf16, ActType::kBf16, 0.37f, 0.125f, false}, {KvType::kBf16, ActType::kBf16, 3.f, 0.5f, true},
      {KvType::kBf16, ActType::kFp16, 0.25f, 4.f, true},
  };
  uint64_t seed = 900;
  for (const Case& c : cases) check_against_cpu_encoder(c, seed++);
}

// Device scales holding 0, -1, NaN or +inf: the rows they scale are written as NaN codes,
// never a finite number, and their bits are set; the rows of the good scale are still the
// CPU encoder's, bit for bit. How the old behaviour fails: before fc1accf the device value
// was used as it was (x / 0 = inf, saturated to 57344 in E5M2; x / -1 finite; x / inf = 0)
// and no bit was set.
TEST_CASE("append_kv: a bad device scale writes NaN codes and sets its bit, the other rows exact", "[append_kv]") {
  using vxqa::ActType;
  using vxqa::KvType;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {KvType::kE5M2, ActType::kFp16, 0.f, 1.5f, true},   {KvType::kE5M2, ActType::kBf16, 0.75f, -1.f, true},
      {KvType::kE5M2, ActType::kFp16, nan, inf, true},    {KvType::kE5M2, ActType::kFp16, inf, 2.f, true},
      {KvType::kE5M2, ActType::kBf16, -1.f, nan, true},   {KvType::kFp16, ActType::kFp16, inf, 0.5f, true},
      {KvType::kFp16, ActType::kBf16, 2.f, nan, true},    {KvType::kFp16, ActType::kFp16, -1.f, 0.f, true},
      {KvType::kFp16, ActType::kFp16, 0.f, inf, true},    {KvType::kFp16, ActType::kBf16, nan, 1.f, true},
      {KvType::kE4M3, ActType::kFp16, 0.f, 0.5f, true},   {KvType::kE4M3, ActType::kBf16, nan, inf, true},
      {KvType::kE4M3, ActType::kFp16, 2.f, -1.f, true},   {KvType::kBf16, ActType::kFp16, 0.f, inf, true},
      {KvType::kBf16, ActType::kBf16, nan, -1.f, true},   {KvType::kBf16, ActType::kBf16, 2.f, 0.f, true},
  };
  uint64_t seed = 960;
  for (const Case& c : cases) check_against_cpu_encoder(c, seed++);
}

namespace {

// Writes rows of 1.0 (K) and 2.0 (V) to `slots` of an E5M2 pool poisoned with kCachePoison;
// requires the error word to be `want_errors` and exactly the rows of `written` to hold the
// values, every other byte its poison.
void append_to_slots(const std::vector<int64_t>& slots, const std::vector<int64_t>& written, uint32_t want_errors) {
  const Pool pool(1);
  const int tokens = int(slots.size());
  std::vector<uint16_t> key(size_t(tokens) * pool.kv_heads * pool.head_dim, 0x3C00), value(key.size(), 0x4000);
  DeviceBuffer<uint16_t> dkey(key.size()), dvalue(value.size());
  DeviceBuffer<int64_t> dslots(slots.size());
  DeviceBuffer<unsigned char> kc(pool.elements()), vc(pool.elements());
  DeviceBuffer<uint32_t> errors(1);
  dkey.upload(key);
  dvalue.upload(value);
  dslots.upload(slots);
  kc.poison(kCachePoison);
  vc.poison(kCachePoison);
  errors.poison(0);
  vxqa::AppendKvParams p;
  p.key = dkey.get();
  p.value = dvalue.get();
  p.key_token_stride = p.value_token_stride = pool.kv_heads * pool.head_dim;
  p.key_head_stride = p.value_head_stride = pool.head_dim;
  p.slot_mapping = dslots.get();
  p.num_tokens = tokens;
  p.num_kv_heads = pool.kv_heads;
  p.head_dim = pool.head_dim;
  p.k_cache = kc.get();
  p.v_cache = vc.get();
  p.cache_type = vxqa::KvType::kE5M2;
  p.page_stride = pool.page_stride;
  p.token_stride = pool.token_stride;
  p.head_stride = pool.head_stride;
  p.page_size = pool.page_size;
  p.num_pages = pool.num_pages;
  p.errors = errors.get();
  const vxqa::Status s = vxqa::append_kv(p, 0);
  INFO(s.message());
  REQUIRE(s.ok());
  VXQA_CUDA_CHECK_LAUNCH();
  REQUIRE(errors.download()[0] == want_errors);
  const auto k_out = kc.download(), v_out = vc.download();
  size_t rows_written = 0;
  for (int64_t i = 0; i < pool.elements(); ++i) {
    bool in_row = false;
    for (int64_t slot : written)
      for (int h = 0; h < pool.kv_heads; ++h)
        in_row |= i >= pool.index(slot, h, 0) && i < pool.index(slot, h, 0) + pool.head_dim;
    INFO("byte " << i);
    REQUIRE(k_out[i] == (in_row ? 0x3C : kCachePoison));  // 1.0 in E5M2
    REQUIRE(v_out[i] == (in_row ? 0x40 : kCachePoison));  // 2.0
    rows_written += in_row;
  }
  REQUIRE(rows_written == written.size() * pool.kv_heads * pool.head_dim);
}

}  // namespace

// Slots at or past num_pages * page_size set kAppendErrorBadSlot and are not written; the
// negative ones beside them are skipped (no bit of their own: the word is the bad slots'
// bit alone), the good ones written.
TEST_CASE("append_kv: a slot outside the pool is flagged and never written", "[append_kv][sanitize_pages]") {
  const Pool pool(1);
  const int64_t num_slots = pool.num_pages * pool.page_size;
  append_to_slots({3, -2, num_slots, int64_t(1) << 40, -1, num_slots - 1, INT64_MIN, INT64_MAX},
                  {3, num_slots - 1}, uint32_t(vxqa::kAppendErrorBadSlot));
}

// vLLM pads a step's slot mapping with -1, and any negative slot is padding: skipped with no
// error bit, nothing written (the poison stays). How the old behaviour fails: before
// fc1accf a slot below -1 set kAppendErrorBadSlot (then 1), so the word was not 0.
TEST_CASE("append_kv: every negative slot is skipped silently", "[append_kv][sanitize_pages]") {
  const Pool pool(1);
  const int64_t num_slots = pool.num_pages * pool.page_size;
  append_to_slots({5, -1, -2, 17, -7, INT64_MIN, 0, -1000000, num_slots - 1, -(int64_t(1) << 40)},
                  {5, 17, 0, num_slots - 1}, 0u);
  append_to_slots({-1, -2, -7, INT64_MIN}, {}, 0u);  // a step of padding only
}

TEST_CASE("append_kv validates before it launches", "[append_kv]") {
  // Every field's check is a CPU test (test/cpu/append_kv_validate.cpp); here: append_kv
  // runs them and launches nothing on a bad field.
  DeviceBuffer<uint16_t> rows(1024);
  DeviceBuffer<int64_t> slots(4);
  DeviceBuffer<unsigned char> cache(1 << 16);
  vxqa::AppendKvParams p;
  p.key = p.value = rows.get();
  p.key_token_stride = p.value_token_stride = 64;
  p.key_head_stride = p.value_head_stride = 64;
  p.slot_mapping = slots.get();
  p.num_tokens = 4;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  p.k_cache = p.v_cache = cache.get();
  p.cache_type = vxqa::KvType::kE5M2;
  p.page_stride = 16 * 64;
  p.token_stride = 64;
  p.head_stride = 64;
  p.page_size = 16;
  p.num_pages = 4;
  p.cache_type = vxqa::KvType::kUnset;  // never assumed from the element size
  REQUIRE(vxqa::append_kv(p, 0).field() == "cache_type");
  p.cache_type = vxqa::KvType::kE5M2;
  p.page_stride = 64;  // pages overlap
  REQUIRE(vxqa::append_kv(p, 0).field() == "page_stride");
  p.page_stride = 16 * 64;
  p.head_dim = 60;
  REQUIRE(vxqa::append_kv(p, 0).field() == "head_dim");
  VXQA_CUDA_CHECK_LAUNCH();
}

namespace {

// The writer fills every live row of a random problem's cache (poisoned first), then Config
// decodes it: the answer must be the reference's over the original values.
template <class Config>
void append_then_decode(uint64_t seed) {
  auto o = vxqa_test::aligned_options<Config>();
  o.batch = 3;
  o.kv_heads = 2;
  o.group = 4;
  o.page_size = seed == 950 ? 16 : 7;
  o.max_seq_len = 300;
  const vxqa::reference::RandomProblem p = vxqa::reference::make_random_problem(o, seed);
  // The new rows: every live token's K/V as fp16 (E5M2 decodes exactly to fp16, so
  // append_kv must give back the very codes), the cache's live rows poisoned with NaN.
  std::vector<int64_t> slots;
  std::vector<uint16_t> key, value;
  std::vector<unsigned char> cache = p.cache;
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.seq_lens[b]; ++t) {
      slots.push_back(int64_t(p.block_table[b * p.table_stride + t / p.page_size]) * p.page_size + t % p.page_size);
      for (int h = 0; h < p.kv_heads; ++h)
        for (int d = 0; d < p.head_dim; ++d) {
          key.push_back(vxqa::reference::fp16_from_double(p.k_at(b, t, h, d)));
          value.push_back(vxqa::reference::fp16_from_double(p.v_at(b, t, h, d)));
          cache[p.k_offset + p.element_index(b, t, h, d)] = 0x7F;
          cache[p.v_offset + p.element_index(b, t, h, d)] = 0x7F;
        }
    }
  vxqa_test::DeviceProblem d(p);
  d.cache.upload(cache);
  DeviceBuffer<uint16_t> dkey(key.size()), dvalue(value.size());
  DeviceBuffer<int64_t> dslots(slots.size());
  dkey.upload(key);
  dvalue.upload(value);
  dslots.upload(slots);
  vxqa::DecodeParams dp = vxqa_test::make_params(p, d, nullptr, nullptr);
  vxqa::AppendKvParams ap;
  ap.key = dkey.get();
  ap.value = dvalue.get();
  ap.key_token_stride = ap.value_token_stride = int64_t(p.kv_heads) * p.head_dim;
  ap.key_head_stride = ap.value_head_stride = p.head_dim;
  ap.slot_mapping = dslots.get();
  ap.num_tokens = int(slots.size());
  ap.num_kv_heads = p.kv_heads;
  ap.head_dim = p.head_dim;
  ap.k_cache = const_cast<void*>(dp.k_cache);
  ap.v_cache = const_cast<void*>(dp.v_cache);
  ap.cache_type = dp.cache_type;
  ap.page_stride = dp.page_stride;
  ap.token_stride = dp.token_stride;
  ap.head_stride = dp.head_stride;
  ap.page_size = dp.page_size;
  ap.num_pages = dp.num_pages;
  INFO("seed " << seed << " page " << p.page_size << " tokens " << slots.size());
  const vxqa::Status s = vxqa::append_kv(ap, 0);
  INFO(s.message());
  REQUIRE(s.ok());
  VXQA_CUDA_CHECK_LAUNCH();
  int max_len = 1;
  for (int len : p.seq_lens) max_len = std::max(max_len, len);
  const vxqa::DecodePlan plan = vxqa_test::plan_for<Config>(p, max_len);
  vxqa_test::check_against_reference(p, vxqa_test::run_params<Config>(dp, plan, p.batch));
}

}  // namespace

TEST_CASE("append_kv then decode equals the float64 reference over the written cache", "[append_kv]") {
  for (uint64_t seed : {950u, 951u, 952u}) append_then_decode<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>>(seed);
  append_then_decode<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2>>(953u);  // head dim 512's rows
}
