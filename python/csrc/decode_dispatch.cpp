// run_decode: the family of (head dim, cache type), as vxqa::Decoder would look it up.
#include <string>
#include "launch.h"

namespace vxqa_torch {

vxqa::Status run_decode(const vxqa::DecodeParams& params, vxqa::KvType cache_type, int max_context,
                        const WorkspaceFn& workspace, cudaStream_t stream) {
  using Family = vxqa::Status (*)(const vxqa::DecodeParams&, int, const WorkspaceFn&, cudaStream_t);
  const struct {
    int head_dim;
    vxqa::KvType kv;
    Family run;
  } families[] = {
      {64, vxqa::KvType::kE5M2, &decode_family<64, vxqa::KvType::kE5M2>},
      {64, vxqa::KvType::kFp16, &decode_family<64, vxqa::KvType::kFp16>},
      {128, vxqa::KvType::kE5M2, &decode_family<128, vxqa::KvType::kE5M2>},
      {128, vxqa::KvType::kFp16, &decode_family<128, vxqa::KvType::kFp16>},
      {256, vxqa::KvType::kE5M2, &decode_family<256, vxqa::KvType::kE5M2>},
      {256, vxqa::KvType::kFp16, &decode_family<256, vxqa::KvType::kFp16>},
  };
  for (const auto& f : families)
    if (f.head_dim == params.head_dim && f.kv == cache_type) return f.run(params, max_context, workspace, stream);
  return vxqa::Status::invalid("head_dim", "no Config of vxqa::DefaultDecoderConfigs takes head dim " +
                                               std::to_string(params.head_dim) + " with a " +
                                               (cache_type == vxqa::KvType::kE5M2 ? "E5M2" : "fp16") + " cache and " +
                                               vxqa::act_type_name(params.qo_type) + " q/out");
}

}  // namespace vxqa_torch
