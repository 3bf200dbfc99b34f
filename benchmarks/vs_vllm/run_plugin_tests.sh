#!/usr/bin/env bash
# Tests of the vLLM scheduler plugin (augserve.integrations.vllm), in vLLM's own environment.
#   [VLLM_VERSION=0.33.0] [VLLM_VENV=DIR] benchmarks/vs_vllm/run_plugin_tests.sh [pytest args]
# Builds the environment if needed (setup_env.sh: vllm-cpu 0.32.0, or vLLM 0.33.0's Python
# over its kernels; torch 2.13.0+cpu, augserve editable), adds pytest to it, and runs
# tests/integrations with its python (the project's own suite and .ci/run never import
# vLLM). About 10 minutes on 2 cores: five engine launches. fp32; CPU settings below
# unless already set. Run it once per supported version (SUPPORTED_VLLM).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="${VLLM_VERSION:-0.32.0}"
suffix=""; [ "$version" = 0.32.0 ] || suffix="-$version"
venv="${VLLM_VENV:-$here/.venv-vllm$suffix}"
"$here/setup_env.sh" "$venv" "$version"
"$venv/bin/python" -c "import pytest" 2>/dev/null || "$venv/bin/pip" install -q "pytest>=8"
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export VLLM_CPU_NUM_OF_RESERVED_CPU="${VLLM_CPU_NUM_OF_RESERVED_CPU:-0}"
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0-1}"
export HF_HUB_OFFLINE=1
cd "$root"
exec timeout 1800 "$venv/bin/python" -m pytest tests/integrations -q -p no:cacheprovider "$@"
