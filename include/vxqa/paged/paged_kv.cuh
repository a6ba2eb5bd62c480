// vxqa/paged/paged_kv.cuh — addresses of K and V token rows in a paged cache.
//
// The cache is vLLM "NHD": logical [num_pages, page_size, Hkv, D] with D contiguous, any
// (signed) page / token / head strides in elements, K and V as two base pointers sharing the
// strides (so [pages, 2, page, Hkv, D] is K = base, V = base + page_size*Hkv*D, page stride
// 2*page_size*Hkv*D). An int32 block table [B, max_pages] (row stride in elements) maps a
// sequence's logical page to a physical page; pages may be shared between sequences.
//
//   PagedKvLayout            plain data, filled on the host, passed to kernels by value;
//   PagedKvView<P, E>        layout + page size, strides pre-scaled to bytes;
//   PagedKvSequence<P, E>    the view bound to one (sequence, KV head): per-token offset =
//                            one divmod, one block-table load, a few multiply-adds — the
//                            form a decode thread uses for its own token;
//   PagedKvIterator<P, E>    a sequential walk over tokens [begin, end) that loads the block
//                            table only when it enters a new page.
// P is the page size (a compile-time constant, or 0 for a runtime one: see PageSize), E the
// element size in bytes. Every offset is in bytes from the K base (the same offset from the
// V base is the V row). Nothing here reads the sequence lengths: callers pass the range.
#pragma once

#include "../common.cuh"
#include "../numeric/fast_divmod.cuh"

namespace vxqa {

struct PagedKvLayout {
  const void* k;  // K base: element [page 0, token 0, head 0, dim 0]
  const void* v;  // V base, same strides as K
  int64_t page_stride;   // elements between physical pages p and p+1
  int64_t token_stride;  // elements between token slots s and s+1 of a page
  int64_t head_stride;   // elements between KV heads h and h+1
  const int32_t* block_table;  // [B, max_pages]: physical page of each logical page
  int64_t block_table_stride;  // elements between the table rows of sequences b and b+1
};

template <int kPageSize, int kElemBytes>
class PagedKvSequence;
template <int kPageSize, int kElemBytes>
class PagedKvIterator;

template <int kPageSize, int kElemBytes>
class PagedKvView {
  static_assert(kElemBytes == 1 || kElemBytes == 2,
                "PagedKvView: KV elements are 1 byte (E5M2) or 2 bytes (fp16)");

 public:
  using PageSizeT = PageSize<kPageSize>;

  // Precondition: PageSizeT::matches(page_size). With a runtime page size this computes the
  // FastDivmod (a 64-bit divide): on the device prefer the PageSizeT overload with a value
  // built on the host, or build the whole view there (it is trivially copyable), so the
  // divide happens once per launch, not once per thread.
  VXQA_HD PagedKvView(const PagedKvLayout& layout, int page_size)
      : PagedKvView(layout, PageSizeT(page_size)) {}

  VXQA_HD PagedKvView(const PagedKvLayout& layout, PageSizeT page_size)
      : k_(static_cast<const uint8_t*>(layout.k)),
        v_(static_cast<const uint8_t*>(layout.v)),
        page_bytes_(layout.page_stride * kElemBytes),
        token_bytes_(layout.token_stride * kElemBytes),
        head_bytes_(layout.head_stride * kElemBytes),
        block_table_(layout.block_table),
        block_table_stride_(layout.block_table_stride),
        page_size_(page_size) {}

  VXQA_HD int page_size() const { return page_size_.size(); }

  VXQA_HD PagedKvSequence<kPageSize, kElemBytes> sequence(int seq, int kv_head) const {
    return PagedKvSequence<kPageSize, kElemBytes>(
        k_, v_, int64_t(kv_head) * head_bytes_, block_table_ + int64_t(seq) * block_table_stride_,
        page_bytes_, token_bytes_, page_size_);
  }

  // Byte offset of the row (seq, kv_head, token) from the K base; the same offset from the
  // V base is the V row.
  VXQA_HD int64_t row_offset(int seq, int kv_head, uint32_t token) const {
    return sequence(seq, kv_head).row_offset(token);
  }
  VXQA_HD const uint8_t* k_row(int seq, int kv_head, uint32_t token) const {
    return k_ + row_offset(seq, kv_head, token);
  }
  VXQA_HD const uint8_t* v_row(int seq, int kv_head, uint32_t token) const {
    return v_ + row_offset(seq, kv_head, token);
  }

  // Walks tokens [begin, end) of (seq, kv_head); empty when begin >= end.
  VXQA_HD PagedKvIterator<kPageSize, kElemBytes> iterate(int seq, int kv_head, uint32_t begin,
                                                         uint32_t end) const {
    return sequence(seq, kv_head).iterate(begin, end);
  }

 private:
  const uint8_t* k_;
  const uint8_t* v_;
  int64_t page_bytes_;
  int64_t token_bytes_;
  int64_t head_bytes_;
  const int32_t* block_table_;
  int64_t block_table_stride_;
  PageSizeT page_size_;
};

template <int kPageSize, int kElemBytes>
class PagedKvSequence {
 public:
  using PageSizeT = PageSize<kPageSize>;

  // k / v are the layout's bases; head_offset is the KV head's byte offset from them;
  // table_row is this sequence's block-table row.
  VXQA_HD PagedKvSequence(const uint8_t* k, const uint8_t* v, int64_t head_offset,
                          const int32_t* table_row, int64_t page_bytes, int64_t token_bytes,
                          PageSizeT page_size)
      : k_(k),
        v_(v),
        head_offset_(head_offset),
        table_row_(table_row),
        page_bytes_(page_bytes),
        token_bytes_(token_bytes),
        page_size_(page_size) {}

  VXQA_HD int page_size() const { return page_size_.size(); }
  // Bytes between consecutive tokens' rows of one page.
  VXQA_HD int64_t token_bytes() const { return token_bytes_; }

  // Physical page holding logical page `page` of this sequence (one block-table load).
  VXQA_HD int32_t physical_page(uint32_t page) const { return table_row_[page]; }

  // Byte offset of the token's row from the K base (and from the V base).
  VXQA_HD int64_t row_offset(uint32_t token) const {
    uint32_t page, slot;
    page_size_.divmod(token, page, slot);
    return head_offset_ + int64_t(physical_page(page)) * page_bytes_ + int64_t(slot) * token_bytes_;
  }
  VXQA_HD const uint8_t* k_row(uint32_t token) const { return k_ + row_offset(token); }
  VXQA_HD const uint8_t* v_row(uint32_t token) const { return v_ + row_offset(token); }

  // row_offset for a block table that may be corrupt: when the token's page id lies outside
  // [0, num_pages), sets `bad` and returns the offset of this head's row 0 of page 0, which
  // is inside the pool (num_pages >= 1), so the caller's load stays in bounds.
  VXQA_HD int64_t checked_row_offset(uint32_t token, int num_pages, bool& bad) const {
    uint32_t page, slot;
    page_size_.divmod(token, page, slot);
    const int32_t id = physical_page(page);
    if (static_cast<uint32_t>(id) >= static_cast<uint32_t>(num_pages)) {  // also id < 0
      bad = true;
      return head_offset_;
    }
    return head_offset_ + int64_t(id) * page_bytes_ + int64_t(slot) * token_bytes_;
  }

  VXQA_HD PagedKvIterator<kPageSize, kElemBytes> iterate(uint32_t begin, uint32_t end) const {
    return PagedKvIterator<kPageSize, kElemBytes>(*this, begin, end);
  }

 private:
  friend class PagedKvIterator<kPageSize, kElemBytes>;
  const uint8_t* k_;
  const uint8_t* v_;
  int64_t head_offset_;
  const int32_t* table_row_;
  int64_t page_bytes_;
  int64_t token_bytes_;
  PageSizeT page_size_;
};

// for (auto it = seq.iterate(begin, end); !it.done(); it.next()) { it.token(); it.k_row(); }
// Block-table entries are loaded only for pages that hold a token of [begin, end), so a
// table row needs no entry past the page of token end - 1.
template <int kPageSize, int kElemBytes>
class PagedKvIterator {
 public:
  VXQA_HD PagedKvIterator(const PagedKvSequence<kPageSize, kElemBytes>& seq, uint32_t begin,
                          uint32_t end)
      : seq_(seq), token_(begin), end_(end), page_(0), slot_(0), row_offset_(0) {
    seq_.page_size_.divmod(begin, page_, slot_);
    if (!done()) row_offset_ = page_offset() + int64_t(slot_) * seq_.token_bytes_;
  }

  VXQA_HD bool done() const { return token_ >= end_; }
  VXQA_HD uint32_t token() const { return token_; }
  // Byte offset of the current row from the K base (and from the V base).
  VXQA_HD int64_t row_offset() const { return row_offset_; }
  VXQA_HD const uint8_t* k_row() const { return seq_.k_ + row_offset_; }
  VXQA_HD const uint8_t* v_row() const { return seq_.v_ + row_offset_; }

  VXQA_HD void next() {
    ++token_;
    if (++slot_ == static_cast<uint32_t>(seq_.page_size())) {
      slot_ = 0;
      ++page_;
      if (!done()) row_offset_ = page_offset();
    } else {
      row_offset_ += seq_.token_bytes_;
    }
  }

 private:
  // Offset of slot 0 of the current page, this head.
  VXQA_HD int64_t page_offset() const {
    return seq_.head_offset_ + int64_t(seq_.physical_page(page_)) * seq_.page_bytes_;
  }

  PagedKvSequence<kPageSize, kElemBytes> seq_;
  uint32_t token_;
  uint32_t end_;
  uint32_t page_;
  uint32_t slot_;
  int64_t row_offset_;  // of token_, valid while !done()
};

}  // namespace vxqa
