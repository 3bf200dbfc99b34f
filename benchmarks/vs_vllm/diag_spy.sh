#!/bin/bash
# q4's collapse cell (1.0 sessions/s, 150 s, seed 4, part 0's profile) through
# diag_sessions.py; with SPY=1, py-spy (PY_SPY, default `py-spy`) samples the server for
# 60 s from 85 s in, every thread with idle time (spy-all.txt) and the GIL holder only
# (spy-gil.txt). Usage: [SPY=1] benchmarks/vs_vllm/diag_spy.sh OUT_DIR
cd "$(dirname "$0")/../.."
PY_SPY=${PY_SPY:-py-spy}
OUT=$1; shift
mkdir -p $OUT
date -u; uptime
DIAG_PROFILE=docs/data/sessions-q4-diag/profile-augserve.json .venv/bin/python benchmarks/vs_vllm/diag_sessions.py augserve-slo 1.0 150 4 $OUT > $OUT.log 2>&1 &
D=$!
while [ ! -s $OUT/metrics.jsonl ]; do sleep 1; kill -0 $D 2>/dev/null || break; done
echo "server up $(date -u)"
if [ "$SPY" = 1 ]; then
  sleep 85
  PID=$(pgrep -f "bin/augserve serve" | head -1)
  echo "spy on $PID"; ps -o pid,args -p $PID | cut -c1-200
  "$PY_SPY" record -p $PID -d 60 -r 50 --threads --idle --nonblocking -f raw -o $OUT/spy-all.txt > $OUT/spy.log 2>&1 &
  "$PY_SPY" record -p $PID -d 60 -r 50 --threads --gil --nonblocking -f raw -o $OUT/spy-gil.txt >> $OUT/spy.log 2>&1 &
fi
wait $D
echo "exit $? $(date -u)"; uptime
