// The sweep's D = 128 Configs (sweep_configs.h), compiled apart from the other head dims.
#include "sweep/sweep_runner.cuh"

std::vector<vxqa_sweep::SweepConfig> vxqa_sweep::d128_configs() { return sweep_configs(D128Configs{}); }
