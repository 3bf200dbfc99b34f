#!/usr/bin/env bash
# The vLLM plugin's GPU checks, one script (a lent CUDA machine runs it from the repo root,
# with vLLM's CUDA build installed: `pip install vllm==0.33.0` or 0.32.0; not run here).
#   benchmarks/vs_vllm/gpu_check_vllm.sh OUT_DIR [BENCH_DURATION_S]
# For tensor parallelism 1, and 2 where the machine has two GPUs or more:
#   1. tests/integrations/vllm_runner.py: vLLM's default scheduler and AugServeScheduler
#      (by dotted path in the multiprocess engine, and as a class in-process) on the same
#      greedy workload; the outputs must be equal; the in-process run's decisions land in
#      OUT_DIR/runner-tpN-*.json;
#   2. tests/integrations/vllm_tools_runner.py: server-side scripted calls over AsyncLLM,
#      each request one streaming session, pauses Preserve / Discard / the policy's choice;
# then, at TP 1, bench_plugin.py: vLLM with and without the plugin on the tool workload,
# no plan sent by the client (the online predictor), one sweep.
set -u
out=${1:?usage: gpu_check_vllm.sh OUT_DIR [BENCH_DURATION_S]}
duration=${2:-20}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/env.txt"
if ! $py -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
    | tee -a "$out/env.txt"; then
  echo "vLLM is not installed for $py: nothing to check" | tee -a "$out/env.txt"; exit 3
fi
gpus=$(nvidia-smi -L | wc -l)
model="$out/llama-small"
$py -c "from augserve.engine.make_model import make_model; \
make_model('llama', 'small', '$model', overrides={'tie_word_embeddings': False})" >/dev/null
tps="1"; [ "$gpus" -ge 2 ] && tps="1 2"
for tp in $tps; do
  for mode in default path class; do
    env -u VLLM_ENABLE_V1_MULTIPROCESSING timeout 600 $py tests/integrations/vllm_runner.py \
      --model "$model" --scheduler "$mode" --tp "$tp" > "$out/runner-tp$tp-$mode.log" 2>&1
    echo "tp $tp $mode: exit $?"
    grep '^@@ ' "$out/runner-tp$tp-$mode.log" | tail -1 | cut -c4- > "$out/runner-tp$tp-$mode.json"
  done
  $py - "$out" "$tp" <<'PY'
import json, sys
out, tp = sys.argv[1], sys.argv[2]
runs = {m: json.load(open(f"{out}/runner-tp{tp}-{m}.json")) for m in ("default", "path", "class")}
same = runs["path"]["outputs"] == runs["default"]["outputs"] == runs["class"]["outputs"]
print(f"tp {tp}: plugin outputs equal vLLM's default scheduler's: {same}; "
      f"learned {runs['class'].get('learned')}")
PY
  timeout 600 $py tests/integrations/vllm_tools_runner.py --model "$model" --tp "$tp" \
    > "$out/tools-tp$tp.log" 2>&1
  echo "tools tp $tp: exit $?; $(grep '^@@ ' "$out/tools-tp$tp.log" | tail -1)"
  grep -o "augserve: pause [^,]*" "$out/tools-tp$tp.log" | sort | uniq -c
done
VLLM_PYTHON="$(command -v "$py")" timeout 900 "$py" \
  benchmarks/vs_vllm/bench_plugin.py --model "$model" --rates 2 4 --duration "$duration" \
  --drain 30 --reps 1 --out "$out/bench_plugin.json" 2>&1 | tail -12
