// A user's program: includes the umbrella header and calls a device piece and a host piece.
#include <vxqa/vxqa.cuh>
#include <cstdio>

__global__ void decode_one(unsigned char code, float* out) { *out = vxqa::e5m2_to_float(code); }

int main() {
  // 0x3C is 1.0 in E5M2; the host form needs no GPU.
  const float one = vxqa::e5m2_to_float(static_cast<uint8_t>(0x3C));
  std::printf("vxqa consumer: e5m2 0x3C = %g\n", one);
  return one == 1.0f ? 0 : 1;
}
