// The D 128, bf16-cache Configs of vxqa::DefaultDecoderConfigs (one family per file).
#include "decode_family.cuh"

VXQA_TORCH_DECODE_FAMILY(128, kBf16);
