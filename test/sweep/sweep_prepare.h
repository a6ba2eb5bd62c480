// Builds a sweep case on the CPU: the random problem as the device gets it (with its q
// rescaled, NaN/inf written, a bad page id or bad lengths), the float64 reference and what
// each sequence's outputs must be. Host only; plain C++17 (the CPU test includes it).
#pragma once

#include "sweep/sweep_case.h"

#include <vxqa/testing/compare.h>
#include <vxqa/testing/decode_reference.h>
#include <vxqa/testing/random_problem.h>

#include <chrono>
#include <exception>
#include <string>
#include <vector>

namespace vxqa_sweep {

using vxqa::reference::DecodeOutput;
using vxqa::reference::Expect;
using vxqa::reference::RandomProblem;

struct PreparedCase {
  SweepCase spec;
  RandomProblem problem;               // cache and q as uploaded; table and lengths all good
  std::vector<int32_t> device_table;   // problem.block_table, with the bad page id if any
  std::vector<int32_t> device_lens;    // problem.seq_lens, with the bad lengths if any
  DecodeOutput reference;              // of `problem`
  std::vector<Expect> expect;          // per sequence
  uint32_t expected_errors = 0;
  vxqa::reference::ErrorModel model;   // of `reference`: the comparator's bound
  double prepare_seconds = 0;
  std::string error;                   // set when building threw: the case fails with it
};

namespace detail {

// Raw element bits of a NaN or an infinity (set_k / set_v would saturate an E5M2 inf).
inline uint32_t poison_bits(Poison p, KvFormat format) {
  const bool e5m2 = format == KvFormat::kE5M2;
  switch (p) {
    case Poison::kNan: return e5m2 ? 0x7Eu : 0x7E00u;
    case Poison::kPlusInf: return e5m2 ? 0x7Cu : 0x7C00u;
    case Poison::kMinusInf: return e5m2 ? 0xFCu : 0xFC00u;
  }
  return 0;
}

inline void inject(const Injection& in, RandomProblem* p) {
  if (in.target == Target::kQ) {
    p->q[(size_t(in.seq) * p->query_heads() + in.head) * p->head_dim + in.dim] =
        uint16_t(poison_bits(in.value, KvFormat::kFp16));
    const int kv_head = in.head / p->group;
    if (in.zero_partner >= 0) p->set_k(in.seq, in.zero_partner, kv_head, in.dim, 0.0);
    return;
  }
  const int64_t base = in.target == Target::kK ? p->k_offset : p->v_offset;
  p->store(base + p->element_index(in.seq, in.token, in.head, in.dim), poison_bits(in.value, p->format));
  if (in.zero_partner >= 0)
    p->q[(size_t(in.seq) * p->query_heads() + in.head * p->group + in.zero_partner) * p->head_dim + in.dim] = 0;
}

// q's dim > 0 for the group's heads, K's dim -inf at the masked tokens, V's poisons
// (MaskedTail). q becomes q_stddev there: positive, normal and finite in fp16.
inline void mask_tail(const MaskedTail& m, double q_stddev, RandomProblem* p) {
  const uint16_t positive = vxqa::reference::fp16_from_double(q_stddev);
  for (int g = 0; g < p->group; ++g)
    p->q[(size_t(m.seq) * p->query_heads() + m.kv_head * p->group + g) * p->head_dim + m.dim] = positive;
  const uint32_t minus_inf = poison_bits(Poison::kMinusInf, p->format);
  for (int t = m.from; t < p->seq_lens[m.seq]; ++t)
    p->store(p->k_offset + p->element_index(m.seq, t, m.kv_head, m.dim), minus_inf);
  for (const MaskedTail::VPoison& v : m.v)
    p->store(p->v_offset + p->element_index(m.seq, v.token, m.kv_head, v.dim), poison_bits(v.value, p->format));
}

inline void build(const SweepCase& c, PreparedCase* out) {
  RandomProblem& p = out->problem;
  p = vxqa::reference::make_random_problem(c.problem, c.problem_seed);
  for (uint16_t& x : p.q)
    x = vxqa::reference::fp16_from_double(vxqa::reference::fp16_to_double(x) * c.q_stddev);
  for (const Injection& in : c.injections) inject(in, &p);
  if (c.masked.seq >= 0) mask_tail(c.masked, c.q_stddev, &p);

  out->device_table = p.block_table;
  if (c.bad_page.seq >= 0)
    out->device_table[c.bad_page.seq * p.table_stride + c.bad_page.column] = c.bad_page.resolve(p.num_pages);
  out->device_lens = c.device_lens();

  out->reference = vxqa::reference::decode_reference(p.inputs());
  out->expect = vxqa::reference::expect_from_lengths(p.seq_lens);
  for (const auto& bad : c.bad_lengths) out->expect[bad.first] = Expect::kNan;
  if (c.bad_page.seq >= 0) out->expect[c.bad_page.seq] = Expect::kNan;
  out->expected_errors = c.expected_errors();
  out->model = vxqa::reference::decode_error_model(p.inputs(), out->reference);
}

}  // namespace detail

inline PreparedCase prepare_case(uint64_t seed) {
  const auto start = std::chrono::steady_clock::now();
  PreparedCase out;
  out.spec.seed = seed;  // named in the failure even if drawing throws
  try {
    out.spec = draw_case(seed);
    detail::build(out.spec, &out);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  out.prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace vxqa_sweep
