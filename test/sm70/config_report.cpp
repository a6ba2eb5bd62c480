// Prints what each SM70 Config audited in test/sm70/*.cu asks of a V100 SM beside the
// registers the SASS audit reads: threads, dynamic shared memory, and how many CTAs fit in
// 96 KB of shared memory. (The kernels' shared memory is dynamic, so the cubin's static
// figure is 0.)
#include <cstdio>
#include <vxqa/kernel/config.cuh>

namespace {

template <class C>
void row(const char* name) {
  std::printf("%-58s %7d %9d %8d %7d %6d\n", name, C::kThreads, C::kSmemBytes,
              vxqa::kSm70MaxSmemBytes / C::kSmemBytes, C::kPieceTokens, C::kStages);
}

}  // namespace

int main() {
  using vxqa::ConvertAt;
  using vxqa::DecodeConfig;
  using vxqa::KvType;
  std::printf("%-58s %7s %9s %8s %7s %6s\n", "config", "threads", "smem B", "CTAs/SM", "piece", "stages");
  row<DecodeConfig<256, KvType::kE5M2>>("DecodeConfig<256, E5M2>");
  row<DecodeConfig<256, KvType::kE5M2, 4, 1, 800>>("DecodeConfig<256, E5M2, 4, 1, 800>");
  row<DecodeConfig<256, KvType::kE5M2, 2, 1, 0, ConvertAt::kPublish>>("DecodeConfig<256, E5M2, 2, 1, 0, kPublish>");
  row<DecodeConfig<256, KvType::kFp16, 2>>("DecodeConfig<256, fp16, 2>");
  row<DecodeConfig<128, KvType::kE5M2>>("DecodeConfig<128, E5M2>");
  row<DecodeConfig<128, KvType::kE5M2, 4, 1, 0, ConvertAt::kPublish>>("DecodeConfig<128, E5M2, 4, 1, 0, kPublish>");
  row<DecodeConfig<128, KvType::kFp16>>("DecodeConfig<128, fp16>");
  row<DecodeConfig<64, KvType::kE5M2>>("DecodeConfig<64, E5M2>");
  row<DecodeConfig<64, KvType::kE5M2, 4, 1, 0, ConvertAt::kPublish>>("DecodeConfig<64, E5M2, 4, 1, 0, kPublish>");
  row<DecodeConfig<64, KvType::kFp16>>("DecodeConfig<64, fp16>");
  return 0;
}
