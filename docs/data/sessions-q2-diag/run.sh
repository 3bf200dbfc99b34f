#!/bin/bash
cd /work/main
export DIAG_PROFILE=docs/data/sessions-q2-diag/profile-augserve.json  # (runs/vs_vllm/sessions-q2/ when it ran: the same file)
while pgrep -f "diag_sessions.py augserve-slo 0.4" >/dev/null; do sleep 5; done
echo "augserve-slo done $(date -u +%T)"
DIAG_FLAGS="" .venv/bin/python benchmarks/vs_vllm/diag_sessions.py serve:vllm 0.4 150 1001 runs/diag/vllm-policy > runs/diag/vllm-policy.log 2>&1
echo "vllm-policy done $(date -u +%T)"
DIAG_FLAGS="--pace-window 64" .venv/bin/python benchmarks/vs_vllm/diag_sessions.py augserve-slo 0.4 150 1001 runs/diag/augserve-slo-pace > runs/diag/augserve-slo-pace.log 2>&1
echo "augserve-slo-pace done $(date -u +%T)"
