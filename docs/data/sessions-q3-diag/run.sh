#!/bin/bash
# q3's worst cell (0.8 sessions/s) diagnosed: policy vs engine. 150 s, seed 2, one run each,
# quiet, one after the other (2026-12-06 05:09-05:41 UTC, AMD EPYC Zen 5, 2 cores).
# The profile is q3 part 2's fit, copied here as profile-augserve.json. Code: 9359cfa for the
# first three (slo-before, serve-vllm-policy-before, vllm); then c934acd's changes
# (oneDNN-prepacked linears, allocator thresholds) for slo-after.
cd /work/main
export DIAG_PROFILE=docs/data/sessions-q3-diag/profile-augserve.json
for p in augserve-slo serve:vllm vllm; do
  uptime
  VLLM_VENV=/work/venvs/vllm032 .venv/bin/python benchmarks/vs_vllm/diag_sessions.py $p 0.8 150 2 runs/diag3/${p/:/-} > runs/diag3/${p/:/-}.log 2>&1
  echo "$p done $(date -u +%T)"
done
uptime
# after c934acd:
.venv/bin/python benchmarks/vs_vllm/diag_sessions.py augserve-slo 0.8 150 2 runs/diag3/slo-fixed > runs/diag3/slo-fixed.log 2>&1
echo "done $(date -u +%T)"; uptime
