#!/bin/bash
cd "$(dirname "$0")"
R=../../..
export PATH=/usr/local/cuda/bin:$PATH
nvcc -std=c++20 -O2 -x cu -DGPU -Iinc -I$R/runner/include -I$R/problems/include -I$R/problems/src harness.cc -o harness_gpu -ldl || exit 1
python3 run_gpu.py
