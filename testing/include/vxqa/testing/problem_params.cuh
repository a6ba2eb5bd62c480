// vxqa/testing/problem_params.cuh — the DecodeParams of a reference::RandomProblem whose host
// buffers were copied to the device as they are (cache, q, block table, lengths). The one
// place where the demo, the benchmark, the tests and a user's own checks map a random
// problem onto the public API.
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vxqa/api/params.cuh>
#include <vxqa/testing/random_problem.h>

namespace vxqa {

struct DeviceProblemBuffers {
  const void* cache = nullptr;           // copy of RandomProblem::cache
  const void* q = nullptr;               // copy of RandomProblem::q
  const int32_t* block_table = nullptr;  // copy of RandomProblem::block_table
  const int32_t* seq_lens = nullptr;     // copy of RandomProblem::seq_lens
  void* out = nullptr;                   // fp16 [batch, Hq, D], contiguous
  float* lse = nullptr;                  // optional fp32 [batch, Hq]
  const float* sinks = nullptr;          // copy of RandomProblem::sinks, when it has them
  const int32_t* q_indptr = nullptr;     // copy of RandomProblem::q_indptr, when it has one
};

// The most query tokens of any sequence of `p` (1 without q_indptr).
inline int problem_max_q_len(const reference::RandomProblem& p) {
  int most = 1;
  for (int b = 0; b < p.batch; ++b) most = std::max(most, p.query_count(b));
  return most;
}

// The library's name for a reference cache format.
inline KvType problem_kv_type(reference::KvFormat format) {
  switch (format) {
    case reference::KvFormat::kE5M2: return KvType::kE5M2;
    case reference::KvFormat::kE4M3: return KvType::kE4M3;
    case reference::KvFormat::kFp16: return KvType::kFp16;
    case reference::KvFormat::kBf16: return KvType::kBf16;
  }
  throw std::invalid_argument("vxqa::problem_kv_type: unknown reference::KvFormat");
}

// The problem's variant (window, soft-cap, sinks) and its query tokens (q_indptr: rows
// [num_tokens, Hq, D] of q and out) come along.
inline DecodeParams problem_params(const reference::RandomProblem& p, const DeviceProblemBuffers& d) {
  if (!p.q_indptr.empty() && !d.q_indptr)
    throw std::invalid_argument("vxqa::problem_params: the problem has several query tokens: give q_indptr's device copy");
  if (!p.sinks.empty() && !d.sinks)
    throw std::invalid_argument("vxqa::problem_params: the problem has sinks: give their device copy");
  const int64_t element_bytes = reference::element_bytes(p.format);
  const int64_t head_elems = p.head_dim, seq_elems = int64_t(p.query_heads()) * p.head_dim;
  DecodeParams params;
  params.q = d.q;
  params.q_head_stride = head_elems;
  params.q_batch_stride = seq_elems;
  params.out = d.out;
  params.out_head_stride = head_elems;
  params.out_batch_stride = seq_elems;
  params.lse = d.lse;
  params.cache_type = problem_kv_type(p.format);
  params.k_cache = static_cast<const uint8_t*>(d.cache) + p.k_offset * element_bytes;
  params.v_cache = static_cast<const uint8_t*>(d.cache) + p.v_offset * element_bytes;
  params.page_stride = p.page_stride;
  params.token_stride = p.token_stride;
  params.head_stride = p.head_stride;
  params.page_size = p.page_size;
  params.num_pages = p.num_pages;
  params.block_table = d.block_table;
  params.block_table_stride = p.table_stride;
  params.max_pages_per_seq = p.max_pages;
  params.seq_lens = d.seq_lens;
  params.batch = p.batch;
  params.num_kv_heads = p.kv_heads;
  params.group_size = p.group;
  params.head_dim = p.head_dim;
  params.k_scale = p.k_scale;
  params.v_scale = p.v_scale;
  params.softmax_scale = p.softmax_scale;
  params.sliding_window = p.window;
  params.logit_softcap = p.logit_softcap;
  params.sinks = p.sinks.empty() ? nullptr : d.sinks;
  params.q_indptr = p.q_indptr.empty() ? nullptr : d.q_indptr;
  params.max_q_len = problem_max_q_len(p);
  return params;
}

}  // namespace vxqa
