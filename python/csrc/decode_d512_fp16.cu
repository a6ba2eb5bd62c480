// The D 512, fp16-cache Configs of vxqa::DefaultDecoderConfigs (one family per file).
#include "decode_family.cuh"

VXQA_TORCH_DECODE_FAMILY(512, kFp16);
