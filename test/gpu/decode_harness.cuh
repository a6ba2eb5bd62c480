// Runs vxqa::decode on a RandomProblem through the public API and compares it with the
// float64 reference by vxqa/testing/compare.h's rules and bounds.
#pragma once
#include <catch2/catch.hpp>
#include <cuda_fp16.h>
#include <cmath>
#include <cstring>
#include <vector>
#include <vxqa/vxqa.cuh>
#include <vxqa/testing/compare.h>
#include <vxqa/testing/problem_params.cuh>
#include "gpu/gpu_check.cuh"

namespace vxqa_test {

using vxqa::reference::RandomProblem;
using vxqa::reference::RandomProblemOptions;

inline double half_bits_to_double(uint16_t bits) { return vxqa::reference::fp16_to_double(bits); }

// Poison bytes: 0xFF reads as NaN in fp16 and fp32, so an unwritten output fails any check
// of a finite or empty (0, -inf) expectation, but not one of NaN: a test that expects NaN
// anywhere poisons out and lse with finite bytes instead (0x7B: fp16 61280, fp32 ~1.3e36;
// run_params' `poison`), and, where a partial the kernels never wrote could pass for a NaN,
// gives it a workspace of finite garbage too.
constexpr unsigned char kNanPoison = 0xFF;

struct DecodeResult {
  std::vector<uint16_t> out;  // fp16 bits [B, Hq, D]
  std::vector<float> lse;     // [B, Hq]
  uint32_t errors = 0;
};

// Device copies of one problem.
struct DeviceProblem {
  DeviceBuffer<unsigned char> cache;
  DeviceBuffer<uint16_t> q;
  DeviceBuffer<int32_t> table;
  DeviceBuffer<int32_t> lens;
  DeviceBuffer<float> sinks;        // empty without
  DeviceBuffer<int32_t> q_indptr;   // empty with one query token a sequence
  explicit DeviceProblem(const RandomProblem& p)
      : cache(p.cache.size()), q(p.q.size()), table(p.block_table.size()), lens(p.seq_lens.size()),
        sinks(p.sinks.size()), q_indptr(p.q_indptr.size()) {
    cache.upload(p.cache);
    q.upload(p.q);
    table.upload(p.block_table);
    lens.upload(p.seq_lens);
    if (!p.sinks.empty()) sinks.upload(p.sinks);
    if (!p.q_indptr.empty()) q_indptr.upload(p.q_indptr);
  }
};

inline vxqa::DecodeParams make_params(const RandomProblem& p, const DeviceProblem& d, void* out,
                               float* lse) {
  return vxqa::problem_params(
      p, {d.cache.get(), d.q.get(), d.table.get(), d.lens.get(), out, lse, d.sinks.get(), d.q_indptr.get()});
}

inline int sm_count() {
  int device = 0, sms = 0;
  VXQA_CUDA_CHECK(cudaGetDevice(&device));
  VXQA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// A plan for the problem's capacity: max_batch / max_context default to the problem's.
template <class Config>
vxqa::DecodePlan plan_for(const RandomProblem& p, int max_context, int chunk_tokens = 0,
                          int max_batch = 0) {
  vxqa::DecodePlan plan;
  const vxqa::Status s = vxqa::make_decode_plan<Config>(max_batch ? max_batch : p.batch, max_context,
                                                       p.kv_heads, p.group, sm_count(), &plan,
                                                       chunk_tokens);
  INFO(s.message());
  REQUIRE(s.ok());
  return plan;
}

// One eager decode of `params` (its out / lse are set here) into fresh buffers sized for
// `batch` rows (sequences, or with q_indptr query tokens). With `workspace` null a fresh one is used, filled with 0xFF (a
// workspace's bytes are garbage before its first decode: nothing may depend on them).
template <class Config>
DecodeResult run_params(vxqa::DecodeParams params, const vxqa::DecodePlan& plan, int batch,
                        unsigned char poison = kNanPoison, unsigned char* workspace = nullptr) {
  const int hq = params.num_kv_heads * params.group_size;
  DeviceBuffer<uint16_t> out(size_t(batch) * hq * Config::kHeadDim);
  DeviceBuffer<float> lse(size_t(batch) * hq);
  DeviceBuffer<unsigned char> own_workspace(workspace ? 0 : plan.workspace_bytes);
  unsigned char* ws = workspace ? workspace : own_workspace.get();
  if (!workspace) own_workspace.poison(0xFF);
  out.poison(poison);
  lse.poison(poison);
  params.out = out.get();
  params.lse = lse.get();
  const vxqa::Status s = vxqa::decode<Config>(params, plan, ws, plan.workspace_bytes, 0);
  INFO(s.message());
  REQUIRE(s.ok());
  VXQA_CUDA_CHECK_LAUNCH();
  DecodeResult r;
  r.out = out.download();
  r.lse = lse.download();
  const vxqa::Status e = vxqa::read_decode_errors(ws, 0, &r.errors);
  INFO(e.message());
  REQUIRE(e.ok());
  return r;
}

// One eager decode of a problem: poisons out and lse, launches, checks every CUDA call.
template <class Config>
DecodeResult run_decode(const RandomProblem& p, const DeviceProblem& d, const vxqa::DecodePlan& plan) {
  return run_params<Config>(make_params(p, d, nullptr, nullptr), plan, p.num_tokens);
}

// Compares with the float64 reference (every sequence as given, no error bits expected),
// within the error model's bound. bf16 outputs are compared as the fp16 values they equal,
// with bf16's rounding in the bound.
inline vxqa::reference::Comparison compare_against_reference(const RandomProblem& p, DecodeResult r,
                                                             vxqa::ActType out_type = vxqa::ActType::kFp16) {
  namespace ref = vxqa::reference;
  ref::CompareBounds bounds;
  if (out_type == vxqa::ActType::kBf16) {
    for (uint16_t& bits : r.out)
      bits = ref::fp16_from_double(vxqa::detail::act_to_float<vxqa::ActType::kBf16>(bits));
    bounds.out_mantissa_bits = 7;
  }
  const ref::DecodeOutput reference = ref::decode_reference(p.inputs());
  return ref::compare_with_reference(reference, ref::decode_error_model(p.inputs(), reference),
                                     ref::expect_from_lengths(p.seq_lens), p.query_heads(), p.head_dim,
                                     {r.out.data(), r.lse.data(), r.errors}, 0u, bounds, ref::row_layout(p.inputs()));
}

// The same, required to pass; returns the worst error relative to the bound.
inline double check_against_reference(const RandomProblem& p, const DecodeResult& r,
                                      vxqa::ActType out_type = vxqa::ActType::kFp16) {
  const vxqa::reference::Comparison c = compare_against_reference(p, r, out_type);
  INFO(c.mismatches << " mismatches; first: " << c.first);
  REQUIRE(c.ok());
  return c.worst;
}

// Rounds the problem's q to bf16 values in place (kept as fp16 bits: fp16 holds them
// exactly) and returns their bf16 bits, for a decode with bf16 q.
inline std::vector<uint16_t> round_q_to_bf16(RandomProblem& p) {
  std::vector<uint16_t> bf16(p.q.size());
  for (size_t i = 0; i < p.q.size(); ++i) {
    const float x = float(vxqa::reference::fp16_to_double(p.q[i]));
    bf16[i] = vxqa::detail::float_to_act<vxqa::ActType::kBf16>(x);
    p.q[i] = vxqa::reference::fp16_from_double(vxqa::detail::act_to_float<vxqa::ActType::kBf16>(bf16[i]));
  }
  return bf16;
}

// Options with 16-byte aligned strides (the kernel's 16-byte loads need them).
template <class Config>
RandomProblemOptions aligned_options() {
  RandomProblemOptions o;
  o.head_dim = Config::kHeadDim;
  o.format = Config::kKv == vxqa::KvType::kE5M2   ? vxqa::reference::KvFormat::kE5M2
             : Config::kKv == vxqa::KvType::kE4M3 ? vxqa::reference::KvFormat::kE4M3
             : Config::kKv == vxqa::KvType::kBf16 ? vxqa::reference::KvFormat::kBf16
                                                  : vxqa::reference::KvFormat::kFp16;
  o.stride_align = 16 / Config::kElemBytes;
  return o;
}

// Builds, runs and checks one problem; returns the worst error / bound.
template <class Config>
double decode_matches_reference(RandomProblemOptions o, uint64_t seed, int chunk_tokens = 0) {
  const RandomProblem p = vxqa::reference::make_random_problem(o, seed);
  int max_len = 1;
  for (int len : p.seq_lens) max_len = std::max(max_len, len);
  const DeviceProblem d(p);
  const vxqa::DecodePlan plan = plan_for<Config>(p, max_len, chunk_tokens);
  INFO("D " << p.head_dim << " G " << p.group << " Hkv " << p.kv_heads << " page " << p.page_size
            << " batch " << p.batch << " chunk " << plan.chunk_tokens << " chunks " << plan.num_chunks
            << " seed " << seed);
  return check_against_reference(p, run_decode<Config>(p, d, plan));
}

}  // namespace vxqa_test

namespace vxqa_test {

// Lengths at every edge the kernel has: a page, a warp tile (32), a CTA round, a chunk.
inline std::vector<int32_t> edge_lengths(int page, int cta_tokens, int chunk) {
  std::vector<int32_t> v = {1, 2, 31, 32, 33, page - 1, page, page + 1,
                            cta_tokens - 1, cta_tokens + 1, chunk - 1, chunk, chunk + 1, 2 * chunk + 7};
  std::vector<int32_t> out;
  for (int x : v)
    if (x >= 1) out.push_back(x);
  return out;
}

// Groups x page sizes, each with a ragged batch holding every edge length; a forced small
// chunk so that split-KV and the combine run on short sequences too.
template <class Config>
void sweep_groups_and_pages(const std::vector<int>& groups, const std::vector<int>& pages,
                            uint64_t seed) {
  for (int group : groups) {
    for (int page : pages) {
      RandomProblemOptions o = aligned_options<Config>();
      o.group = group;
      o.kv_heads = group > 8 ? 1 : 2;
      o.page_size = page;
      const int chunk = 3 * Config::kChunkMultiple;  // not whole rounds of the SM70 body's CTA
      o.seq_lens = edge_lengths(page, Config::kCtaTokens, chunk);
      o.batch = int(o.seq_lens.size());
      o.k_scale = 0.75f;
      o.v_scale = 1.25f;
      decode_matches_reference<Config>(o, seed++, chunk);
    }
  }
}

}  // namespace vxqa_test
