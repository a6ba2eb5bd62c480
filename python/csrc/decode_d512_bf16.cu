// The D 512, bf16-cache Configs of vxqa::DefaultDecoderConfigs (one family per file).
#include "decode_family.cuh"

VXQA_TORCH_DECODE_FAMILY(512, kBf16);
