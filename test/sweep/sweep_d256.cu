// The sweep's D = 256 Configs (sweep_configs.h), compiled apart from the other head dims.
#include "sweep/sweep_runner.cuh"

std::vector<vxqa_sweep::SweepConfig> vxqa_sweep::d256_configs() { return sweep_configs(D256Configs{}); }
