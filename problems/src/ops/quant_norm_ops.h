// References of operator group "quant_norm" (shared by the CPU definitions in
// quant_norm_defs.cpp and the CUDA table in ../cuda/quant_norm_cuda.cu).
#pragma once

#include "quant_norm_fp8.h"
#include "quant_norm_norms.h"
