// The family of (head dim, cache type), as vxqa::Decoder would look it up.
#include <string>
#include "launch.h"

namespace vxqa_torch {
namespace {

struct FamilyEntry {
  int head_dim;
  vxqa::KvType kv;
  vxqa::Status (*choose)(const Shape&, Choice*);
  vxqa::Status (*decode_with)(const Choice&, const vxqa::DecodeParams&, void*, size_t, cudaStream_t);
  std::string (*config_name)(const Choice&);
};

template <int D, vxqa::KvType Kv>
constexpr FamilyEntry entry() {
  return {D, Kv, &DecodeFamily<D, Kv>::choose, &DecodeFamily<D, Kv>::decode_with, &DecodeFamily<D, Kv>::config_name};
}

constexpr FamilyEntry kFamilies[] = {
    entry<64, vxqa::KvType::kE5M2>(),  entry<64, vxqa::KvType::kE4M3>(),  entry<64, vxqa::KvType::kFp16>(),
    entry<64, vxqa::KvType::kBf16>(),  entry<128, vxqa::KvType::kE5M2>(), entry<128, vxqa::KvType::kE4M3>(),
    entry<128, vxqa::KvType::kFp16>(), entry<128, vxqa::KvType::kBf16>(), entry<256, vxqa::KvType::kE5M2>(),
    entry<256, vxqa::KvType::kE4M3>(), entry<256, vxqa::KvType::kFp16>(), entry<256, vxqa::KvType::kBf16>(),
    entry<512, vxqa::KvType::kE5M2>(), entry<512, vxqa::KvType::kE4M3>(), entry<512, vxqa::KvType::kFp16>(),
    entry<512, vxqa::KvType::kBf16>(),
};

const FamilyEntry* find_family(int head_dim, vxqa::KvType kv) {
  for (const FamilyEntry& f : kFamilies)
    if (f.head_dim == head_dim && f.kv == kv) return &f;
  return nullptr;
}

vxqa::Status no_family(int head_dim, vxqa::KvType kv) {
  return vxqa::Status::invalid("head_dim", "no Config of vxqa::DefaultDecoderConfigs takes head dim " +
                                               std::to_string(head_dim) + " with a " + vxqa::kv_type_name(kv) +
                                               " cache (head dims 64, 128, 256, 512; e5m2, e4m3, fp16 or bf16)");
}

}  // namespace

vxqa::Status choose_decode(const Shape& shape, Choice* choice) {
  const FamilyEntry* f = find_family(shape.head_dim, shape.cache_type);
  return f ? f->choose(shape, choice) : no_family(shape.head_dim, shape.cache_type);
}

vxqa::Status decode_with(int head_dim, vxqa::KvType cache_type, const Choice& choice,
                         const vxqa::DecodeParams& params, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream) {
  const FamilyEntry* f = find_family(head_dim, cache_type);
  return f ? f->decode_with(choice, params, workspace, workspace_bytes, stream) : no_family(head_dim, cache_type);
}

std::string config_name(int head_dim, vxqa::KvType cache_type, const Choice& choice) {
  const FamilyEntry* f = find_family(head_dim, cache_type);
  return f ? f->config_name(choice) : std::string();
}

}  // namespace vxqa_torch
