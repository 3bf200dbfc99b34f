#!/bin/bash
# The sessions-q2 diagnosis cell (augserve-slo, 0.4 sessions/s, 150 s, seed 1001), our
# engine with the native decode attention and with torch's (AUGSERVE_NATIVE=0), one
# after the other on this machine, quiet.
cd /work/main
export DIAG_PROFILE=docs/data/sessions-q2-diag/profile-augserve.json
uptime
.venv/bin/python benchmarks/vs_vllm/diag_sessions.py augserve-slo 0.4 150 1001 runs/diag/native-on > runs/diag/native-on.log 2>&1
echo "native on done $(date -u +%T)"; uptime
AUGSERVE_NATIVE=0 .venv/bin/python benchmarks/vs_vllm/diag_sessions.py augserve-slo 0.4 150 1001 runs/diag/native-off > runs/diag/native-off.log 2>&1
echo "native off done $(date -u +%T)"; uptime
# then real vLLM 0.32 on the same cell (00:58-01:02 UTC), its env built by setup_env.sh:
#   VLLM_VENV=/work/venvs/vllm032 .venv/bin/python benchmarks/vs_vllm/diag_sessions.py vllm 0.4 150 1001 runs/diag/vllm
