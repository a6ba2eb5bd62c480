// The sweep's D = 512 Configs (sweep_configs.h), compiled apart from the other head dims.
#include "sweep/sweep_runner.cuh"

std::vector<vxqa_sweep::SweepConfig> vxqa_sweep::d512_configs() { return sweep_configs(D512Configs{}); }
