#!/usr/bin/env bash
# Run parts of a comparison split by repeat (docs/benchmarking.md, "A run in parts"), one
# after another, from a detached checkout of the commit part 0 ran (so that work committed
# between parts cannot change the run), each on a quiet machine.
#   [VLLM_VENV=DIR] [QUIET_LOAD=1.0] benchmarks/vs_vllm/run_parts.sh CONFIG COMMIT OUTDIR K [K ...]
# CONFIG: the committed config (path inside the repository); COMMIT: part 0's commit (for
# part 0 itself, the commit that holds CONFIG); OUTDIR: where part-K.json and part-K.log go.
# Before each part it waits until the 1-minute load average is under QUIET_LOAD (the
# protocol records the load at every cell; this only avoids starting on a busy machine).
# Merge the parts with bench_parts.py once all have run.
set -euo pipefail
# all inside main, read whole before it runs: editing this file during a run (hours)
# cannot change or break that run (bash reads a script as it goes)
main() {
  [ $# -ge 4 ] || { sed -n 2,10p "$0"; exit 2; }
  config="$1"; commit="$2"; out="$(mkdir -p "$3" && cd "$3" && pwd)"; shift 3
  root="$(cd "$(dirname "$0")/../.." && pwd)"
  python="${PYTHON:-$root/.venv/bin/python}"
  model="${MODEL:-$root/runs/calib/llama-small}"
  quiet="${QUIET_LOAD:-1.0}"
  checkout="${CHECKOUT:-/tmp/augserve-parts-$(git -C "$root" rev-parse --short "$commit")}"
  [ -d "$checkout" ] || git -C "$root" worktree add --detach "$checkout" "$commit" >&2
  [ "$(git -C "$checkout" rev-parse HEAD)" = "$(git -C "$root" rev-parse "$commit^{commit}")" ] \
    || { echo "$checkout is not at $commit" >&2; exit 1; }
  # the benchmark starts our server as .venv/bin/augserve under the repository it runs from:
  # the checkout borrows this tree's environment, whose Python imports the checkout's code
  # (PYTHONPATH below comes before the editable install)
  [ -e "$checkout/.venv" ] || ln -s "$root/.venv" "$checkout/.venv"
  load() { cut -d' ' -f1 /proc/loadavg; }
  for k in "$@"; do
    while awk -v l="$(load)" -v q="$quiet" 'BEGIN { exit !(l >= q) }'; do sleep 15; done
    echo "$(date -u +%FT%TZ) part $k starts (load $(load))"
    (cd "$checkout" && PYTHONPATH="$checkout" "$python" benchmarks/vs_vllm/bench_tools.py \
        --config "$config" --model "$model" --repeats "$k" --out "$out/part-$k.json") \
        > "$out/part-$k.log" 2>&1
    echo "$(date -u +%FT%TZ) part $k ended: $out/part-$k.json"
  done
}
main "$@"; exit  # one line: bash has read it whole before main runs
