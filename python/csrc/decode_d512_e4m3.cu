// The D 512, e4m3-cache Configs of vxqa::DefaultDecoderConfigs (one family per file).
#include "decode_family.cuh"

VXQA_TORCH_DECODE_FAMILY(512, kE4M3);
