// vxqa::validate_append_kv: a valid writer step passes, and every field broken alone is
// rejected with a status that names it. Pointers are fake, aligned and never dereferenced:
// the validation must not read device memory. (append_kv itself runs it first: the GPU test
// test/gpu/append_kv.cu checks that.)
#include <catch2/catch.hpp>

#include <vxqa/api/append_kv_params.cuh>

#include <cmath>
#include <cstdint>
#include <string>

namespace {

template <class T = void>
T* fake(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

vxqa::AppendKvParams good_params() {
  vxqa::AppendKvParams p;  // 4 tokens into 4 pages of 16 slots, one head of 64, E5M2
  p.key = fake(0x100000);
  p.value = fake(0x200000);
  p.key_token_stride = p.value_token_stride = 64;
  p.key_head_stride = p.value_head_stride = 64;
  p.slot_mapping = fake<const int64_t>(0x300000);
  p.num_tokens = 4;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  p.k_cache = fake(0x400000);
  p.v_cache = fake(0x500000);
  p.cache_type = vxqa::KvType::kE5M2;
  p.page_stride = 16 * 64;
  p.token_stride = 64;
  p.head_stride = 64;
  p.page_size = 16;
  p.num_pages = 4;
  return p;
}

}  // namespace

TEST_CASE("validate_append_kv accepts valid layouts", "[append_kv_validate]") {
  REQUIRE(vxqa::validate_append_kv(good_params()).ok());
  vxqa::AppendKvParams p = good_params();
  p.num_tokens = 0;  // nothing to write: nothing else is looked at
  p.key = nullptr;
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();  // signed cache strides, as DecodeParams allows
  p.token_stride = -64;
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();  // two heads packed, HND-like pages
  p.num_kv_heads = 2;
  p.head_stride = 16 * 64;
  p.token_stride = 64;
  p.page_stride = 2 * 16 * 64;
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();  // device scales replace the values
  p.k_scale = p.v_scale = -1.f;
  p.k_scale_ptr = fake<const float>(0x600000);
  p.v_scale_ptr = fake<const float>(0x600004);
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();
  p.cache_type = vxqa::KvType::kFp16;
  p.page_stride = 16 * 64;  // elements: the byte checks scale by 2
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();  // the same layout holds E4M3 codes
  p.cache_type = vxqa::KvType::kE4M3;
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();  // and bf16, 2 bytes an element as fp16: 8-element (16-byte) strides do
  p.cache_type = vxqa::KvType::kBf16;
  p.num_kv_heads = 2;
  p.head_stride = 64 + 8;
  p.token_stride = 2 * (64 + 8) + 8;
  p.page_stride = 16 * p.token_stride + 8;
  REQUIRE(vxqa::validate_append_kv(p).ok());
}

TEST_CASE("validate_append_kv takes the element size from the cache type", "[append_kv_validate]") {
  // 8 elements: 16 bytes of fp16 or bf16, but 8 bytes of a one-byte code, E4M3 as E5M2.
  vxqa::AppendKvParams p = good_params();
  p.page_stride = 16 * 64 + 8;
  for (vxqa::KvType two_byte_type : {vxqa::KvType::kFp16, vxqa::KvType::kBf16}) {
    p.cache_type = two_byte_type;
    INFO(vxqa::kv_type_name(two_byte_type));
    REQUIRE(vxqa::validate_append_kv(p).ok());
  }
  for (vxqa::KvType byte_type : {vxqa::KvType::kE5M2, vxqa::KvType::kE4M3}) {
    p.cache_type = byte_type;
    INFO(vxqa::kv_type_name(byte_type));
    REQUIRE(vxqa::validate_append_kv(p).field() == "page_stride");
  }
}

TEST_CASE("validate_append_kv: a bf16 pool laid out in an E5M2 page's bytes is refused", "[append_kv_validate]") {
  // A page of 16 tokens of 64 takes 1024 bytes in E5M2 but 2048 in bf16: a page stride of
  // 1024 bytes, 512 bf16 elements, puts each page over half of the one before it.
  vxqa::AppendKvParams p = good_params();
  p.cache_type = vxqa::KvType::kBf16;
  p.page_stride = 16 * 64 / 2;
  const vxqa::Status s = vxqa::validate_append_kv(p);
  INFO(s.message());
  REQUIRE(s.field() == "page_stride");
  p.cache_type = vxqa::KvType::kE5M2;  // strides are elements, not bytes: refused for E5M2 too
  REQUIRE(vxqa::validate_append_kv(p).field() == "page_stride");
  p.page_stride = 16 * 64;  // and the element count, the same for both, is taken by both
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p.cache_type = vxqa::KvType::kBf16;
  REQUIRE(vxqa::validate_append_kv(p).ok());
}

TEST_CASE("validate_append_kv: an unset cache type names every type it takes", "[append_kv_validate]") {
  vxqa::AppendKvParams p = good_params();
  p.cache_type = vxqa::KvType::kUnset;
  const vxqa::Status s = vxqa::validate_append_kv(p);
  INFO(s.message());
  REQUIRE(s.field() == "cache_type");
  for (const char* name : {"kE5M2", "kE4M3", "kFp16", "kBf16"}) REQUIRE(s.message().find(name) != std::string::npos);
}

TEST_CASE("validate_append_kv ignores the strides of size-1 dimensions", "[append_kv_validate]") {
  // Framework views of a dimension of one row carry any stride; index 0 never uses it.
  vxqa::AppendKvParams p = good_params();  // one KV head: head strides are free
  p.head_stride = 5;
  p.key_head_stride = p.value_head_stride = 3;
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();  // one token a page: the token stride is free
  p.page_size = 1;
  p.num_pages = 64;
  p.page_stride = 64;
  p.token_stride = 7;
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();  // one page in the pool: its stride is free
  p.num_pages = 1;
  p.page_stride = 9;
  REQUIRE(vxqa::validate_append_kv(p).ok());
  p = good_params();  // one token: its input stride is free
  p.num_tokens = 1;
  p.key_token_stride = p.value_token_stride = -3;
  REQUIRE(vxqa::validate_append_kv(p).ok());
  // The same strides are refused where the dimension has two rows.
  p.num_tokens = 2;
  REQUIRE(vxqa::validate_append_kv(p).field() == "key_token_stride");
  p = good_params();
  p.num_pages = 2;
  p.page_stride = 9;
  REQUIRE(vxqa::validate_append_kv(p).field() == "page_stride");
}

TEST_CASE("validate_append_kv names every bad field", "[append_kv_validate]") {
  struct Bad {
    const char* field;
    void (*spoil)(vxqa::AppendKvParams&);
  };
  const Bad bad[] = {
      {"num_tokens", [](vxqa::AppendKvParams& p) { p.num_tokens = -1; }},
      {"num_kv_heads", [](vxqa::AppendKvParams& p) { p.num_kv_heads = 0; }},
      {"head_dim", [](vxqa::AppendKvParams& p) { p.head_dim = 60; }},
      {"key", [](vxqa::AppendKvParams& p) { p.key = nullptr; }},
      {"key", [](vxqa::AppendKvParams& p) { p.key = fake(0x100008); }},
      {"value", [](vxqa::AppendKvParams& p) { p.value = fake(0x200002); }},
      {"key_token_stride", [](vxqa::AppendKvParams& p) { p.key_token_stride = 60; }},
      {"key_head_stride", [](vxqa::AppendKvParams& p) { p.num_kv_heads = 2; p.token_stride = 128; p.key_head_stride = 4; }},
      {"value_token_stride", [](vxqa::AppendKvParams& p) { p.value_token_stride = -64; }},
      {"value_head_stride", [](vxqa::AppendKvParams& p) { p.num_kv_heads = 2; p.token_stride = 128; p.value_head_stride = -8; }},
      {"slot_mapping", [](vxqa::AppendKvParams& p) { p.slot_mapping = nullptr; }},
      {"slot_mapping", [](vxqa::AppendKvParams& p) { p.slot_mapping = fake<const int64_t>(0x300004); }},
      {"cache_type", [](vxqa::AppendKvParams& p) { p.cache_type = vxqa::KvType::kUnset; }},
      {"cache_type", [](vxqa::AppendKvParams& p) { p.cache_type = vxqa::KvType::kUnset; p.num_tokens = 0; }},
      {"k_cache", [](vxqa::AppendKvParams& p) { p.k_cache = nullptr; }},
      {"v_cache", [](vxqa::AppendKvParams& p) { p.v_cache = fake(0x500008); }},
      {"page_size", [](vxqa::AppendKvParams& p) { p.page_size = 0; }},
      {"num_pages", [](vxqa::AppendKvParams& p) { p.num_pages = 0; }},
      {"token_stride", [](vxqa::AppendKvParams& p) { p.token_stride = 8; }},   // 8 bytes: not 16
      {"token_stride", [](vxqa::AppendKvParams& p) { p.token_stride = 16; }},  // rows overlap
      {"token_stride", [](vxqa::AppendKvParams& p) { p.token_stride = 0; }},
      {"head_stride", [](vxqa::AppendKvParams& p) { p.num_kv_heads = 2; p.token_stride = 256; p.head_stride = 72; }},
      {"head_stride", [](vxqa::AppendKvParams& p) { p.num_kv_heads = 2; p.token_stride = 128; p.head_stride = 32; }},
      {"page_stride", [](vxqa::AppendKvParams& p) { p.page_stride = 0; }},
      {"page_stride", [](vxqa::AppendKvParams& p) { p.page_stride = 64; }},  // pages overlap
      {"page_stride", [](vxqa::AppendKvParams& p) { p.page_stride = 16 * 64 - 16; }},
      {"page_stride", [](vxqa::AppendKvParams& p) { p.page_stride = 8; }},  // not 16 bytes
      {"k_scale", [](vxqa::AppendKvParams& p) { p.k_scale = 0.f; }},
      {"k_scale", [](vxqa::AppendKvParams& p) { p.k_scale = INFINITY; }},
      {"v_scale", [](vxqa::AppendKvParams& p) { p.v_scale = NAN; }},
      {"k_scale_ptr", [](vxqa::AppendKvParams& p) { p.k_scale_ptr = fake<const float>(0x600002); }},
      {"v_scale_ptr", [](vxqa::AppendKvParams& p) { p.v_scale_ptr = fake<const float>(0x600001); }},
      {"errors", [](vxqa::AppendKvParams& p) { p.errors = fake<uint32_t>(2); }},
  };
  for (const Bad& b : bad) {
    vxqa::AppendKvParams p = good_params();
    b.spoil(p);
    const vxqa::Status s = vxqa::validate_append_kv(p);
    INFO("spoiled " << b.field << ": " << s.message());
    REQUIRE_FALSE(s.ok());
    REQUIRE(s.code() == vxqa::StatusCode::kInvalidArgument);
    REQUIRE(s.field() == b.field);
    REQUIRE_FALSE(s.message().empty());
  }
}
