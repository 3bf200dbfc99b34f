#!/usr/bin/env bash
# The engine's GPU checks, one script (a lent CUDA machine runs it from the repo root):
#   1. the HF-parity, swap and dtype tests of tests/engine on a CUDA runner;
#   2. benchmarks/gpu_checks.py: paged decode attention, swaps, throughput vs HF.
# Usage: benchmarks/gpu_checks.sh OUT_DIR [PYTEST_TIMEOUT_S] [BENCH_BUDGET_S] [PARTS]
set -u
out=${1:?usage: gpu_checks.sh OUT_DIR}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 AUGSERVE_TEST_DEVICE=cuda
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/env.txt"
$py -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$out/env.txt"
timeout "${2:-240}" $py -m pytest -o addopts= -q -rf --tb=short -p no:cacheprovider tests/engine/test_hf_parity.py \
    tests/engine/test_swap.py tests/engine/test_runner_dtypes.py tests/engine/test_cuda_graphs.py \
    2>&1 | tee "$out/pytest_cuda.log" | tail -25
echo "pytest exit: ${PIPESTATUS[0]}"
timeout "${3:-300}" $py benchmarks/gpu_checks.py --out "$out" --budget-s "$(( ${3:-300} - 80 ))" \
    --parts "${4:-attention,swap,throughput}" \
    2>&1 | grep -v "Loading weights" | tee "$out/gpu_checks.log"
