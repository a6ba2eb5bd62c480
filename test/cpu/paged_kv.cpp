// PagedKvView / PagedKvSequence / PagedKvIterator against caches built element by element.
//
// Each test cache is laid out by nested loops in a chosen dimension order (with padding after
// any level, and any level optionally stored in reverse), writing a tag per element that names
// its (kv, page, slot, head, dim). Strides handed to the view come from the block sizes; every
// address the view yields must (a) equal a brute-force stride formula and (b) land on elements
// whose tags name the expected physical page, slot, head and all D dims.
#include <catch2/catch.hpp>

#include <vxqa/paged/paged_kv.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

using vxqa::PagedKvLayout;
using vxqa::PagedKvView;

// Views and layouts travel to kernels as arguments.
static_assert(std::is_trivially_copyable<PagedKvLayout>::value, "layout must be a kernel argument");
static_assert(std::is_trivially_copyable<PagedKvView<0, 1>>::value, "view must be a kernel argument");
static_assert(std::is_trivially_copyable<PagedKvView<800, 2>>::value, "view must be a kernel argument");

namespace {

enum Dim { kPage = 0, kSlot = 1, kHead = 2, kKv = 3 };

struct Level {
  Dim dim;
  int64_t pad;    // elements of padding after this level's extent
  bool reversed;  // index i stored at position extent - 1 - i (negative stride)
};

struct CacheShape {
  int num_pages, page_size, heads, dim;
  int64_t row_pad;  // padding after the D elements of a row
};

// A cache in one buffer (K and V both inside, when kKv is a level) or two (K and V apart).
struct Cache {
  CacheShape shape;
  int elem_bytes;
  std::vector<uint8_t> bytes[2];  // one per buffer
  std::vector<int64_t> tags[2];   // one tag per element; -1 = padding
  const uint8_t* base[2];         // K and V element [page 0, slot 0, head 0, dim 0]
  int64_t stride[3];              // page, slot, head strides in elements

  int64_t tag(int kv, int page, int slot, int head, int d) const {
    return (((int64_t(kv) * shape.num_pages + page) * shape.page_size + slot) * shape.heads + head) *
               shape.dim + d;
  }
  // Buffer that holds K or V, and the element an address points at (-1 when it is outside).
  int buffer_of(int kv) const { return bytes[1].empty() ? 0 : kv; }
  int64_t element_at(int kv, const uint8_t* p) const {
    const int b = buffer_of(kv);
    const int64_t off = p - bytes[b].data();
    if (off < 0 || off % elem_bytes != 0 || off / elem_bytes >= int64_t(tags[b].size())) return -1;
    return off / elem_bytes;
  }
};

int extent_of(const CacheShape& s, Dim d) {
  switch (d) {
    case kPage: return s.num_pages;
    case kSlot: return s.page_size;
    case kHead: return s.heads;
    default: return 2;
  }
}

// Writes tags in memory order by walking the levels; the position is a running cursor, so
// the element placement does not depend on any stride formula.
void fill(const CacheShape& s, const std::vector<Level>& levels, size_t li, int idx[4],
          std::vector<int64_t>& tags, int64_t& cursor, const Cache& c) {
  if (li == levels.size()) {
    for (int d = 0; d < s.dim; ++d) tags[cursor++] = c.tag(idx[kKv], idx[kPage], idx[kSlot], idx[kHead], d);
    cursor += s.row_pad;
    return;
  }
  const Level& l = levels[li];
  const int n = extent_of(s, l.dim);
  for (int i = 0; i < n; ++i) {
    idx[l.dim] = l.reversed ? n - 1 - i : i;
    fill(s, levels, li + 1, idx, tags, cursor, c);
  }
  cursor += l.pad;
}

// levels: outer to inner, a permutation of {page, slot, head} plus kKv for one buffer;
// without kKv, K and V get separate buffers of the same layout.
Cache build_cache(const CacheShape& s, const std::vector<Level>& levels, int elem_bytes, std::mt19937& rng) {
  Cache c;
  c.shape = s;
  c.elem_bytes = elem_bytes;
  const bool one_buffer = std::any_of(levels.begin(), levels.end(), [](const Level& l) { return l.dim == kKv; });

  // Block sizes from the inside out give the strides (what a user would compute).
  int64_t block = s.dim + s.row_pad;
  int64_t strides[4] = {0, 0, 0, 0};
  for (size_t i = levels.size(); i-- > 0;) {
    strides[levels[i].dim] = levels[i].reversed ? -block : block;
    block = extent_of(s, levels[i].dim) * block + levels[i].pad;
  }
  c.stride[0] = strides[kPage];
  c.stride[1] = strides[kSlot];
  c.stride[2] = strides[kHead];

  std::uniform_int_distribution<int> byte(0, 255);
  for (int b = 0; b < (one_buffer ? 1 : 2); ++b) {
    c.tags[b].assign(size_t(block), -1);
    c.bytes[b].resize(size_t(block) * elem_bytes);
    for (auto& x : c.bytes[b]) x = uint8_t(byte(rng));
    int idx[4] = {0, 0, 0, b};
    int64_t cursor = 0;
    fill(s, levels, 0, idx, c.tags[b], cursor, c);
    REQUIRE(cursor == block);
  }
  // The bases are found by searching for the tag of element 0, not computed.
  for (int kv = 0; kv < 2; ++kv) {
    const int b = c.buffer_of(kv);
    const auto it = std::find(c.tags[b].begin(), c.tags[b].end(), c.tag(kv, 0, 0, 0, 0));
    REQUIRE(it != c.tags[b].end());
    c.base[kv] = c.bytes[b].data() + (it - c.tags[b].begin()) * elem_bytes;
  }
  return c;
}

// Sequences with their block table: the allocation ends exactly after the last sequence's
// last needed entry, and unused entries hold page ids that would point outside the cache.
struct Batch {
  std::vector<int> lens;
  int64_t table_stride = 0;
  std::unique_ptr<int32_t[]> table;
  size_t table_size = 0;

  int pages_of(int seq, int page_size) const { return (lens[seq] + page_size - 1) / page_size; }
  int32_t physical(int seq, int logical_page) const { return table[seq * table_stride + logical_page]; }
};

Batch build_batch(const std::vector<int>& lens, int page_size, int num_pages, std::mt19937& rng) {
  Batch b;
  b.lens = lens;
  int max_pages = 1;
  for (size_t s = 0; s < lens.size(); ++s) max_pages = std::max(max_pages, b.pages_of(int(s), page_size));
  b.table_stride = max_pages + std::uniform_int_distribution<int>(0, 3)(rng);
  b.table_size = size_t((lens.size() - 1) * b.table_stride + b.pages_of(int(lens.size()) - 1, page_size));
  b.table.reset(new int32_t[b.table_size]);
  // A random permutation of the physical pages, reused round-robin: consecutive logical pages
  // are scattered, and once the pool is used up sequences share pages.
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_int_distribution<int32_t> any_page(0, num_pages - 1);
  size_t next = 0;
  for (size_t i = 0; i < b.table_size; ++i) {
    const int64_t seq = int64_t(i) / b.table_stride, lp = int64_t(i) % b.table_stride;
    if (lp < b.pages_of(int(seq), page_size)) {
      b.table[i] = (rng() % 4 == 0) ? any_page(rng) : perm[next++ % perm.size()];
    } else {
      b.table[i] = (rng() % 2) ? num_pages + 1000 : -100000;  // poison: must never be used
    }
  }
  return b;
}

PagedKvLayout make_layout(const Cache& c, const Batch& b) {
  PagedKvLayout l;
  l.k = c.base[0];
  l.v = c.base[1];
  l.page_stride = c.stride[0];
  l.token_stride = c.stride[1];
  l.head_stride = c.stride[2];
  l.block_table = b.table.get();
  l.block_table_stride = b.table_stride;
  return l;
}

// Checks one yielded row: the brute-force byte offset and the tags of all D elements.
// Returns false (after reporting) on the first mismatch so a broken case does not flood.
bool check_row(const Cache& c, const Batch& b, int seq, int head, int token, int64_t offset_from_k_base,
               const uint8_t* k_row, const uint8_t* v_row) {
  const int page_size = c.shape.page_size;
  const int phys = b.physical(seq, token / page_size);
  const int slot = token % page_size;
  const int64_t expected =
      (int64_t(phys) * c.stride[0] + int64_t(slot) * c.stride[1] + int64_t(head) * c.stride[2]) * c.elem_bytes;
  bool ok = offset_from_k_base == expected && k_row == c.base[0] + expected && v_row == c.base[1] + expected;
  const uint8_t* rows[2] = {k_row, v_row};
  for (int kv = 0; kv < 2 && ok; ++kv) {
    const int64_t e = c.element_at(kv, rows[kv]);
    ok = e >= 0 && e + c.shape.dim <= int64_t(c.tags[c.buffer_of(kv)].size());
    for (int d = 0; d < c.shape.dim && ok; ++d) ok = c.tags[c.buffer_of(kv)][e + d] == c.tag(kv, phys, slot, head, d);
  }
  if (!ok) {
    INFO("seq " << seq << " head " << head << " token " << token << " page " << phys << " slot " << slot
                << ": offset " << offset_from_k_base << ", expected " << expected);
    CHECK(ok);
  }
  return ok;
}

// Per-token math (what a decode thread does) for every token of every (seq, head).
template <int kPageSize, int kElem>
void check_per_token(const Cache& c, const Batch& b) {
  const PagedKvView<kPageSize, kElem> view(make_layout(c, b), c.shape.page_size);
  // The same view from a page size prepared beforehand (as a kernel receives it).
  const PagedKvView<kPageSize, kElem> view2(make_layout(c, b), vxqa::PageSize<kPageSize>(c.shape.page_size));
  REQUIRE(view.page_size() == c.shape.page_size);
  REQUIRE(view2.page_size() == c.shape.page_size);
  for (int seq = 0; seq < int(b.lens.size()); ++seq) {
    for (int head = 0; head < c.shape.heads; ++head) {
      const auto sv = view.sequence(seq, head);
      REQUIRE(sv.page_size() == c.shape.page_size);
      for (int t = 0; t < b.lens[seq]; ++t) {
        const int64_t off = view.row_offset(seq, head, uint32_t(t));
        if (view2.row_offset(seq, head, uint32_t(t)) != off) {
          INFO("seq " << seq << " head " << head << " token " << t);
          CHECK(view2.row_offset(seq, head, uint32_t(t)) == off);
          return;
        }
        if (!check_row(c, b, seq, head, t, off, view.k_row(seq, head, uint32_t(t)),
                       view.v_row(seq, head, uint32_t(t))))
          return;
        if (!check_row(c, b, seq, head, t, sv.row_offset(uint32_t(t)), sv.k_row(uint32_t(t)),
                       sv.v_row(uint32_t(t))))
          return;
      }
    }
  }
}

// Ranges [begin, end) worth walking for a sequence of length len.
std::vector<std::pair<int, int>> ranges_for(int len, int page_size, std::mt19937& rng) {
  std::vector<std::pair<int, int>> r = {{0, len}, {len, len}, {0, 0}};
  const int cuts[] = {0, 1, page_size - 1, page_size, page_size + 1, 2 * page_size - 1, 2 * page_size, len - 1, len};
  for (int a : cuts)
    for (int e : cuts)
      if (a >= 0 && e >= a && e <= len) r.push_back({a, e});
  std::uniform_int_distribution<int> pos(0, len);
  for (int i = 0; i < 6; ++i) {
    int a = pos(rng), e = pos(rng);
    r.push_back({std::min(a, e), std::max(a, e)});
  }
  return r;
}

template <int kPageSize, int kElem>
void check_iterator(const Cache& c, const Batch& b, std::mt19937& rng) {
  const PagedKvView<kPageSize, kElem> view(make_layout(c, b), c.shape.page_size);
  for (int seq = 0; seq < int(b.lens.size()); ++seq) {
    for (int head = 0; head < c.shape.heads; ++head) {
      for (auto [begin, end] : ranges_for(b.lens[seq], c.shape.page_size, rng)) {
        int expected_token = begin;
        for (auto it = view.iterate(seq, head, uint32_t(begin), uint32_t(end)); !it.done(); it.next()) {
          if (int(it.token()) != expected_token || expected_token >= end) {
            INFO("seq " << seq << " [" << begin << ", " << end << "): yielded " << it.token() << ", expected "
                        << expected_token);
            CHECK(false);
            return;
          }
          if (!check_row(c, b, seq, head, expected_token, it.row_offset(), it.k_row(), it.v_row()))
            return;
          ++expected_token;
        }
        if (expected_token != end) {
          INFO("seq " << seq << " [" << begin << ", " << end << "): stopped at " << expected_token);
          CHECK(false);
          return;
        }
      }
    }
  }
}

std::vector<int> ragged_lens(int page_size, int max_len, std::mt19937& rng) {
  const int boundary[] = {0, 1, page_size - 1, page_size, page_size + 1, 2 * page_size + 1};
  std::vector<int> lens;
  const int batch = 2 + int(rng() % 4);
  std::uniform_int_distribution<int> any_len(0, max_len);
  for (int i = 0; i < batch; ++i) {
    const int len = (rng() % 2) ? boundary[rng() % 6] : any_len(rng);
    lens.push_back(std::max(0, std::min(len, max_len)));
  }
  // The last row of the table ends the allocation: make it a full last page sometimes, so a
  // read one entry past it is an out-of-bounds read (caught under -fsanitize=address).
  if (rng() % 2) lens.back() = std::max(1, max_len / page_size) * page_size;
  return lens;
}

// Named layouts plus random ones; each is checked per token and with the iterator.
template <int kPageSize, int kElem>
void run_layouts(int page_size, uint32_t seed) {
  std::mt19937 rng(seed);
  // Keep caches small: a few pages for big page sizes, more for small.
  const int num_pages = page_size >= 512 ? 5 : 24;
  const int max_len = page_size >= 512 ? 3 * page_size + 7 : 40 * page_size + 3;
  const int heads = page_size >= 512 ? 2 : 3;
  const int dim = page_size >= 512 ? 4 : 8;

  struct Named {
    const char* name;
    std::vector<Level> levels;
    int64_t row_pad;
  };
  std::vector<Named> cases = {
      {"vLLM NHD, K and V apart", {{kPage, 0, false}, {kSlot, 0, false}, {kHead, 0, false}}, 0},
      {"vLLM [pages, 2, page, Hkv, D]", {{kPage, 0, false}, {kKv, 0, false}, {kSlot, 0, false}, {kHead, 0, false}}, 0},
      {"K and V halves of one buffer", {{kKv, 13, false}, {kPage, 0, false}, {kSlot, 0, false}, {kHead, 0, false}}, 0},
      {"padded strides", {{kPage, 5, false}, {kKv, 3, false}, {kSlot, 7, false}, {kHead, 2, false}}, 3},
      {"head-major [Hkv, pages, page, D]", {{kHead, 1, false}, {kPage, 0, false}, {kSlot, 0, false}}, 0},
      {"HND pages [pages, Hkv, page, D]", {{kPage, 0, false}, {kHead, 0, false}, {kSlot, 0, false}}, 0},
      {"negative strides", {{kPage, 2, true}, {kSlot, 0, false}, {kHead, 0, true}}, 1},
  };
  // Random dimension orders, pads and directions.
  for (int i = 0; i < 6; ++i) {
    std::vector<Level> levels = {{kPage, 0, false}, {kSlot, 0, false}, {kHead, 0, false}};
    if (rng() % 2) levels.push_back({kKv, 0, false});
    std::shuffle(levels.begin(), levels.end(), rng);
    for (auto& l : levels) {
      l.pad = (rng() % 2) ? int64_t(rng() % 9) : 0;
      l.reversed = rng() % 5 == 0;
    }
    cases.push_back({"random", levels, int64_t(rng() % 3)});
  }

  for (const auto& nc : cases) {
    const CacheShape shape{num_pages, page_size, heads, dim, nc.row_pad};
    const Cache cache = build_cache(shape, nc.levels, kElem, rng);
    const Batch batch = build_batch(ragged_lens(page_size, max_len, rng), page_size, num_pages, rng);
    INFO("layout: " << nc.name << ", page size " << page_size << (kPageSize ? " (static)" : " (runtime)")
                    << ", elem bytes " << kElem);
    check_per_token<kPageSize, kElem>(cache, batch);
    check_iterator<kPageSize, kElem>(cache, batch, rng);
  }
}

}  // namespace

TEST_CASE("paged KV: compile-time page sizes, 1-byte elements", "[paged_kv]") {
  run_layouts<1, 1>(1, 1);
  run_layouts<16, 1>(16, 2);
  run_layouts<784, 1>(784, 3);
  run_layouts<800, 1>(800, 4);
  run_layouts<1568, 1>(1568, 5);
  run_layouts<4096, 1>(4096, 6);
}

TEST_CASE("paged KV: runtime page sizes, 1-byte elements", "[paged_kv]") {
  for (int p : {1, 16, 784, 800, 1568, 4096, 3, 100}) run_layouts<0, 1>(p, 100 + uint32_t(p));
}

TEST_CASE("paged KV: 2-byte elements", "[paged_kv]") {
  run_layouts<16, 2>(16, 7);
  run_layouts<800, 2>(800, 8);
  for (int p : {1, 16, 784, 1568}) run_layouts<0, 2>(p, 200 + uint32_t(p));
}

TEST_CASE("paged KV: sequences sharing physical pages see the same rows", "[paged_kv]") {
  std::mt19937 rng(31);
  const int page_size = 16;
  const CacheShape shape{8, page_size, 2, 4, 0};
  const Cache c = build_cache(shape, {{kPage, 0, false}, {kKv, 0, false}, {kSlot, 0, false}, {kHead, 0, false}}, 1, rng);
  // Two sequences, table stride 4: both start with physical pages 5, 2 (a shared prefix),
  // then diverge (7 vs 0).
  Batch b;
  b.lens = {3 * page_size, 3 * page_size - 5};
  b.table_stride = 4;
  b.table_size = 4 + 3;
  b.table.reset(new int32_t[b.table_size]{5, 2, 7, -1, 5, 2, 0});
  const PagedKvView<0, 1> view(make_layout(c, b), page_size);
  for (int head = 0; head < 2; ++head) {
    for (int t = 0; t < b.lens[1]; ++t) {
      const bool shared = t < 2 * page_size;
      CHECK((view.k_row(0, head, uint32_t(t)) == view.k_row(1, head, uint32_t(t))) == shared);
      CHECK((view.v_row(0, head, uint32_t(t)) == view.v_row(1, head, uint32_t(t))) == shared);
    }
  }
  check_per_token<0, 1>(c, b);
  check_per_token<16, 1>(c, b);
  check_iterator<16, 1>(c, b, rng);
}

TEST_CASE("paged KV iterator loads a block-table entry only on entering its page", "[paged_kv]") {
  std::mt19937 rng(57);
  const int page_size = 4;
  const CacheShape shape{6, page_size, 1, 2, 0};
  const Cache c = build_cache(shape, {{kPage, 0, false}, {kSlot, 0, false}, {kHead, 0, false}}, 1, rng);
  Batch b;
  b.lens = {3 * page_size};
  b.table_stride = 3;
  b.table_size = 3;
  b.table.reset(new int32_t[3]{4, 1, 3});
  const PagedKvView<0, 1> view(make_layout(c, b), page_size);
  const int64_t page_bytes = c.stride[0];

  auto it = view.iterate(0, 0, 1, 3 * page_size);
  // Page 0's entry was read at construction: changing it now must not move tokens 1..3.
  b.table[0] = 5;
  b.table[1] = 2;  // page 1 not entered yet: the new entry must be the one used
  for (int t = 1; t < page_size; ++t, it.next()) CHECK(it.row_offset() == 4 * page_bytes + t * c.stride[1]);
  REQUIRE(int(it.token()) == page_size);
  CHECK(it.row_offset() == 2 * page_bytes);
  // Inside page 1 the entry is not re-read.
  b.table[1] = 0;
  it.next();
  CHECK(it.row_offset() == 2 * page_bytes + c.stride[1]);
}

TEST_CASE("paged KV: row offsets are 64-bit", "[paged_kv]") {
  // Offsets past 2^32 bytes must not wrap. Only offsets are computed (no row pointer is
  // formed), so the cache needs no allocation.
  const int32_t table[2] = {70000, 3};
  PagedKvLayout l;
  l.k = l.v = nullptr;
  l.page_stride = int64_t(800) * 256;  // one page of 800 tokens x 256 dims
  l.token_stride = 256;
  l.head_stride = 1 << 20;
  l.block_table = table;
  l.block_table_stride = 2;
  const PagedKvView<800, 2> view(l, 800);
  const int64_t expected = (int64_t(70000) * 800 * 256 + 799 * 256 + 3 * (int64_t(1) << 20)) * 2;
  CHECK(expected > (int64_t(1) << 32));
  CHECK(view.row_offset(0, 3, 799) == expected);
  CHECK(view.iterate(0, 3, 799, 801).row_offset() == expected);
  CHECK(view.sequence(0, 3).row_offset(799) == expected);
}

TEST_CASE("paged KV: checked_row_offset flags ids outside [0, num_pages) and stays in the pool",
          "[paged_kv]") {
  constexpr int kPages = 5, kPage = 16;
  int32_t table[8] = {0, 4, 3, -1, 5, INT32_MIN, INT32_MAX, 50000000};
  PagedKvLayout l;
  l.k = l.v = nullptr;
  l.page_stride = int64_t(kPage) * 2 * 128;
  l.token_stride = 2 * 128;
  l.head_stride = 128;
  l.block_table = table;
  l.block_table_stride = 8;
  for (const int head : {0, 1}) {
    const auto seq = PagedKvView<0, 1>(l, kPage).sequence(0, head);
    for (int logical = 0; logical < 8; ++logical) {
      const uint32_t token = uint32_t(logical * kPage + 7);
      bool bad = false;
      const int64_t off = seq.checked_row_offset(token, kPages, bad);
      const bool in_pool = table[logical] >= 0 && table[logical] < kPages;
      INFO("head " << head << ", logical page " << logical << " -> id " << table[logical]);
      CHECK(bad == !in_pool);
      if (in_pool) {
        CHECK(off == seq.row_offset(token));
      } else {  // this head's row 0 of page 0: inside any pool of >= 1 page
        CHECK(off == int64_t(head) * 128);
      }
      bool still_bad = bad;  // a later good id never clears the flag
      seq.checked_row_offset(0, kPages, still_bad);
      CHECK(still_bad == bad);
    }
  }
}
