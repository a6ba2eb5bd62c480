// The D 256, e5m2-cache Configs of vxqa::DefaultDecoderConfigs (one family per file).
#include "decode_family.cuh"

VXQA_TORCH_DECODE_FAMILY(256, kE5M2);
