// Builds a sweep case on the CPU: the random problem as the device gets it (with its q
// rescaled, rounded to bf16 values, NaN/inf written, a bad page id or bad lengths; q laid
// out in the case's strides; multi-token: its q_indptr), the float64 reference and what each
// sequence's outputs must be; and, for the runner, the DecodeParams of a case on device
// buffers and the rows of an out buffer the kernels wrote. Rows are query tokens: one a
// sequence, or with q_indptr sequence b's rows [q_indptr[b], q_indptr[b + 1]). Host only; plain C++17 (the CPU test includes it).
#pragma once

#include "sweep/sweep_case.h"

#include <vxqa/api/params.cuh>
#include <vxqa/numeric/act_type.cuh>
#include <vxqa/testing/compare.h>
#include <vxqa/testing/decode_reference.h>
#include <vxqa/testing/problem_params.cuh>
#include <vxqa/testing/random_problem.h>

#include <array>
#include <chrono>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace vxqa_sweep {

using vxqa::reference::DecodeOutput;
using vxqa::reference::Expect;
using vxqa::reference::RandomProblem;
using vxqa::ActType;

// Between and after q's rows: NaN in fp16 and in bf16, so a read outside the rows shows.
inline constexpr uint16_t kQGap = 0xFFFF;
// What out holds before a decode (runner: a memset of 0x7B bytes; fp16 61280, bf16 ~1.3e36):
// finite and far from any output, so an unwritten element fails where it is compared, and
// an element outside the rows must still hold it after.
inline constexpr unsigned char kOutPoisonByte = 0x7B;
inline constexpr uint16_t kOutPoison = 0x7B7B;

struct PreparedCase {
  SweepCase spec;
  RandomProblem problem;               // cache as uploaded, q contiguous [rows, Hq, D], q_indptr; table and lengths all good
  std::vector<uint16_t> device_q;      // problem.q (fp16 bits) in spec.io's strides, kQGap elsewhere
  std::vector<uint16_t> device_q_bf16; // spec.bf16_q: the same values as bf16 bits, same layout
  std::vector<int32_t> device_table;   // problem.block_table, with the bad page id if any
  std::vector<int32_t> device_lens;    // problem.seq_lens, with the bad lengths if any
  DecodeOutput reference;              // of `problem`
  std::vector<Expect> expect;          // per sequence (each of its rows)
  uint32_t expected_errors = 0;
  vxqa::reference::ErrorModel model;   // of `reference`: the comparator's bound
  double prepare_seconds = 0;
  std::string error;                   // set when building threw: the case fails with it
};

namespace detail {

// Raw element bits of a NaN or an infinity (set_k / set_v would saturate an E5M2 inf). E4M3
// has no infinity: its poisons are the NaN codes, of the infinity's sign.
inline uint32_t poison_bits(Poison p, KvFormat format) {
  if (format == KvFormat::kE4M3) return p == Poison::kMinusInf ? 0xFFu : 0x7Fu;
  if (format == KvFormat::kBf16) return p == Poison::kNan ? 0x7FC0u : p == Poison::kPlusInf ? 0x7F80u : 0xFF80u;
  const bool e5m2 = format == KvFormat::kE5M2;
  switch (p) {
    case Poison::kNan: return e5m2 ? 0x7Eu : 0x7E00u;
    case Poison::kPlusInf: return e5m2 ? 0x7Cu : 0x7C00u;
    case Poison::kMinusInf: return e5m2 ? 0xFCu : 0xFC00u;
  }
  return 0;
}

// Element `dim` of query head `head` in row `row` of q.
inline uint16_t& q_at(RandomProblem* p, int row, int head, int dim) {
  return p->q[(size_t(row) * p->query_heads() + head) * p->head_dim + dim];
}

// A q poison goes to its query token's row; a K poison's zero partner is q's dim in every
// row of the sequence.
inline void inject(const Injection& in, RandomProblem* p) {
  if (in.target == Target::kQ) {
    q_at(p, p->first_row(in.seq) + in.token, in.head, in.dim) = uint16_t(poison_bits(in.value, KvFormat::kFp16));
    const int kv_head = in.head / p->group;
    if (in.zero_partner >= 0) p->set_k(in.seq, in.zero_partner, kv_head, in.dim, 0.0);
    return;
  }
  const int64_t base = in.target == Target::kK ? p->k_offset : p->v_offset;
  p->store(base + p->element_index(in.seq, in.token, in.head, in.dim), poison_bits(in.value, p->format));
  if (in.zero_partner >= 0)
    for (int i = 0; i < p->query_count(in.seq); ++i)
      q_at(p, p->first_row(in.seq) + i, in.head * p->group + in.zero_partner, in.dim) = 0;
}

// q's dim > 0 for the group's heads (in every row of the sequence), K's dim -inf at the
// masked tokens, V's poisons (MaskedTail). q becomes q_stddev there: positive, normal and
// finite in fp16.
inline void mask_tail(const MaskedTail& m, double q_stddev, RandomProblem* p) {
  const uint16_t positive = vxqa::reference::fp16_from_double(q_stddev);
  for (int i = 0; i < p->query_count(m.seq); ++i)
    for (int g = 0; g < p->group; ++g) q_at(p, p->first_row(m.seq) + i, m.kv_head * p->group + g, m.dim) = positive;
  const uint32_t minus_inf = poison_bits(Poison::kMinusInf, p->format);
  for (int t = m.from; t < p->seq_lens[m.seq]; ++t)
    p->store(p->k_offset + p->element_index(m.seq, t, m.kv_head, m.dim), minus_inf);
  for (const MaskedTail::VPoison& v : m.v)
    p->store(p->v_offset + p->element_index(m.seq, v.token, m.kv_head, v.dim), poison_bits(v.value, p->format));
}

// Rounds q (fp16 bits) to bf16 values in place and returns their bf16 bits; q then holds
// the fp16 values the kernels convert those to where they load them (as
// test/gpu/decode_harness.cuh's round_q_to_bf16). NaN and ±inf stay what they are.
inline std::vector<uint16_t> round_q_to_bf16(std::vector<uint16_t>* q) {
  std::vector<uint16_t> bf16(q->size());
  for (size_t i = 0; i < q->size(); ++i) {
    const float x = float(vxqa::reference::fp16_to_double((*q)[i]));
    bf16[i] = vxqa::detail::float_to_act<ActType::kBf16>(x);
    (*q)[i] = vxqa::reference::fp16_from_double(vxqa::detail::act_to_float<ActType::kBf16>(bf16[i]));
  }
  return bf16;
}

// Contiguous [rows, Hq, D] rows into the layout's buffer, kQGap around them.
inline std::vector<uint16_t> scatter_q(const std::vector<uint16_t>& rows, const IoLayout& io, int row_count, int heads,
                                       int dim) {
  std::vector<uint16_t> buffer(size_t(io.q_elements), kQGap);
  for (int r = 0; r < row_count; ++r)
    for (int h = 0; h < heads; ++h)
      std::copy_n(rows.begin() + (size_t(r) * heads + h) * dim, dim, buffer.begin() + io.q_row(r, h));
  return buffer;
}

// Multi-token queries as the case says: the problem generator's q_indptr (q_len > 1) or,
// for q_len 1 with q_indptr, one made here (one token a sequence with keys, none for an
// empty one; the generator's q rows of the empty sequences dropped). Throws where the
// built problem's query tokens are not the case's q_counts (generator_query_counts).
inline void set_queries(const SweepCase& c, RandomProblem* p) {
  if (c.q_len == 1 && c.has_q_indptr()) {
    const size_t row = size_t(p->query_heads()) * p->head_dim;
    std::vector<uint16_t> q;
    p->q_indptr.assign(1, 0);
    for (int b = 0; b < p->batch; ++b) {
      if (c.q_counts[b] > 0) q.insert(q.end(), p->q.begin() + b * row, p->q.begin() + (b + 1) * row);
      p->q_indptr.push_back(p->q_indptr.back() + c.q_counts[b]);
    }
    p->q = std::move(q);
    p->num_tokens = p->q_indptr.back();
  }
  std::vector<int32_t> want;
  if (c.has_q_indptr()) {
    want.assign(1, 0);
    for (int32_t n : c.q_counts) want.push_back(want.back() + n);
  }
  if (p->q_indptr != want || p->num_tokens != c.rows() ||
      p->q.size() != size_t(c.rows()) * p->query_heads() * p->head_dim)
    throw std::runtime_error("the built problem's query tokens are not the case's (generator_query_counts)");
}

inline void build(const SweepCase& c, PreparedCase* out) {
  RandomProblem& p = out->problem;
  p = vxqa::reference::make_random_problem(c.problem, c.problem_seed);
  set_queries(c, &p);
  for (uint16_t& x : p.q)
    x = vxqa::reference::fp16_from_double(vxqa::reference::fp16_to_double(x) * c.q_stddev);
  // The sinks were drawn about the scores of unscaled q: they scale with it, so that they
  // stay among the scores (from barely counting to outweighing every key).
  for (float& sink : p.sinks) sink = float(sink * c.q_stddev);
  for (const Injection& in : c.injections) inject(in, &p);
  if (c.masked.seq >= 0) mask_tail(c.masked, c.q_stddev, &p);
  // After every change to q: the reference takes the values the device gets.
  if (c.bf16_q) {
    out->device_q_bf16 = scatter_q(round_q_to_bf16(&p.q), c.io, p.num_tokens, p.query_heads(), p.head_dim);
  }
  out->device_q = scatter_q(p.q, c.io, p.num_tokens, p.query_heads(), p.head_dim);

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

// The case's device buffers, as the runner has them (the CPU test gives fake addresses).
struct CaseBuffers {
  const void* cache = nullptr;
  const void* q = nullptr;  // the start of device_q or device_q_bf16 (offset 0)
  const int32_t* block_table = nullptr;
  const int32_t* seq_lens = nullptr;
  void* out = nullptr;  // the start of an out buffer of spec.io.out_elements (offset 0)
  float* lse = nullptr;
  const float* scales = nullptr;  // device_scales(): {k, v}
  const float* sinks = nullptr;   // the problem's sinks, [Hq] (cases with sinks)
  const int32_t* q_indptr = nullptr;  // the problem's q_indptr, [B + 1] (multi-token cases with one)
};

// What the device scales hold: the case's k and v scales.
inline std::array<float, 2> device_scales(const SweepCase& c) { return {c.problem.k_scale, c.problem.v_scale}; }

// The decode step of a prepared case on those buffers with q and out of type `qo`: the
// problem's parameters, then the case's q/out strides and offsets, its max_q_len (at or
// above the problem's) and its device scales (with NaN as the host values they replace: the
// kernels must not use them).
inline vxqa::DecodeParams case_params(const PreparedCase& c, const CaseBuffers& d, ActType qo) {
  const IoLayout& io = c.spec.io;
  vxqa::DecodeParams params = vxqa::problem_params(
      c.problem, {d.cache, static_cast<const uint16_t*>(d.q) + io.q_offset, d.block_table, d.seq_lens,
                  static_cast<uint16_t*>(d.out) + io.out_offset, d.lse, d.sinks, d.q_indptr});
  params.max_q_len = c.spec.max_q_len;
  params.qo_type = qo;
  params.q_head_stride = io.q_head_stride;
  params.q_batch_stride = io.q_batch_stride;
  params.out_head_stride = io.out_head_stride;
  params.out_batch_stride = io.out_batch_stride;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (c.spec.k_scale_on_device) params.k_scale_ptr = d.scales, params.k_scale = nan;
  if (c.spec.v_scale_on_device) params.v_scale_ptr = d.scales + 1, params.v_scale = nan;
  return params;
}

// An out buffer (spec.io's layout) after a decode with q/out of type `qo`: its rows as
// contiguous fp16 bits [rows, Hq, D] for the comparator (bf16 values converted to the fp16
// values they equal, as check_against_reference does; compare with out_mantissa_bits 7),
// and the elements outside the rows that no longer hold kOutPoison.
struct GatheredOut {
  std::vector<uint16_t> rows;
  size_t stray = 0;          // elements outside the rows that were written
  int64_t first_stray = -1;  // the first one's index in the buffer
};
inline GatheredOut gather_out(const std::vector<uint16_t>& buffer, const IoLayout& io, int row_count, int heads,
                              int dim, ActType qo) {
  GatheredOut g;
  g.rows.resize(size_t(row_count) * heads * dim);
  std::vector<bool> in_row(buffer.size(), false);
  for (int r = 0; r < row_count; ++r)
    for (int h = 0; h < heads; ++h) {
      const int64_t row = io.out_row(r, h);
      for (int d = 0; d < dim; ++d) {
        uint16_t bits = buffer[size_t(row + d)];
        if (qo == ActType::kBf16)
          bits = vxqa::reference::fp16_from_double(vxqa::detail::act_to_float<ActType::kBf16>(bits));
        g.rows[(size_t(r) * heads + h) * dim + d] = bits;
        in_row[size_t(row + d)] = true;
      }
    }
  for (size_t i = 0; i < buffer.size(); ++i)
    if (!in_row[i] && buffer[i] != kOutPoison) {
      if (g.stray++ == 0) g.first_stray = int64_t(i);
    }
  return g;
}

// The comparator's bound for outputs of type `qo`.
inline vxqa::reference::CompareBounds compare_bounds(ActType qo) {
  vxqa::reference::CompareBounds bounds;
  if (qo == ActType::kBf16) bounds.out_mantissa_bits = 7;
  return bounds;
}

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
