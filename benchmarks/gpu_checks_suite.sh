#!/usr/bin/env bash
# The engine's and the server's whole test suites on a lent CUDA machine, one run.
# With CUDA present an engine built without `device` runs on cuda, so tests/engine
# and tests/server (the live HTTP server, tools, sessions, constrained decoding, the
# start-up profile, prefix cache, CUDA graphs) run their real paths on the GPU;
# AUGSERVE_TEST_DEVICE=cuda moves the HF-parity references there too.
# Python packages the machine lacks travel as wheels in .whl (docs/engine-speed.md, GPU checks).
# Usage: benchmarks/gpu_checks_suite.sh OUT_DIR [PYTEST_TIMEOUT_S] [THROUGHPUT_BUDGET_S]
set -u
out=${1:?usage: gpu_checks_suite.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
    $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl 2>&1 | tail -3
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 AUGSERVE_TEST_DEVICE=cuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/env.txt"
$py -c "import sys, torch, transformers, xgrammar; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'xgrammar', xgrammar.__version__)" 2>&1 | tee -a "$out/env.txt"
# the checks owed first (parity, graphs, swaps, constrained decoding, the start-up
# profile, the served path), then every other test file of the two folders
first="tests/engine/test_hf_parity.py tests/engine/test_cuda_graphs.py tests/engine/test_swap.py
tests/engine/test_runner_dtypes.py tests/engine/test_prefix_cache_engine.py
tests/engine/test_startup_profile.py tests/engine/test_grammar.py tests/server/test_constrained.py
tests/server/test_e2e_openai.py tests/server/test_overload.py"
rest=$(ls tests/engine/test_*.py tests/server/test_*.py | grep -v -x -F "$(echo $first | tr ' ' '\n')")
t0=$(date +%s)
timeout "${2:-330}" $py -m pytest -o addopts= -q -rfE --tb=line -p no:cacheprovider \
    --timeout 120 --junitxml "$out/junit.xml" --durations 15 \
    $first $rest 2>&1 | tee "$out/pytest.log" | tail -60
echo "pytest exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s" | tee -a "$out/env.txt"
if [ "${3:-0}" -gt 0 ]; then
    timeout "$(( ${3} + 60 ))" $py benchmarks/gpu_checks.py --out "$out" --budget-s "$3" \
        --parts throughput 2>&1 | grep -v "Loading weights" | tee "$out/gpu_checks.log" | tail -20
fi
