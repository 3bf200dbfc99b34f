#!/usr/bin/env bash
# Example, not run here (no GPUs): AugServe scheduling in a tensor- and pipeline-parallel vLLM
# deployment on two 4-GPU nodes joined by Ray. Only vLLM's engine-core process (on the head
# node) runs the scheduler, so augserve must be importable there; the GPU workers never load
# it. Pin the vLLM version the plugin was tested with (augserve.integrations.vllm.SUPPORTED_VLLM).
#
#   head node:    ray start --head --port 6379
#   other node:   ray start --address HEAD_IP:6379
#   head node:    MODEL=meta-llama/Llama-3.1-70B-Instruct bash plugin_tp_example.sh
set -euo pipefail
MODEL="${MODEL:?set MODEL to a model id or directory}"
PREDICTOR="${PREDICTOR:-online}"      # the default; or learned:DIR (`augserve predictor train`)
PROFILE="${PROFILE:-llama3-70b-4xa100}"  # or a JSON profile fitted on your hardware

# pip install "vllm==0.33.0" "augserve[predictor]"   (vLLM's CUDA build; augserve adds no GPU code)
exec vllm serve "$MODEL" \
  --tensor-parallel-size 4 --pipeline-parallel-size 2 \
  --distributed-executor-backend ray \
  --enable-prefix-caching \
  --scheduler-cls augserve.integrations.vllm.AugServeScheduler \
  --additional-config "{\"augserve\": {\"profile\": \"$PROFILE\", \"predictor\": \"$PREDICTOR\"}}"

# A client emulating a tool call the way the scheduler recognizes it: end the turn at the
# call, run the tool, then send the whole context plus its result in the same session:
#
#   from openai import OpenAI
#   c = OpenAI(base_url="http://HEAD_IP:8000/v1", api_key="none")
#   r = c.completions.create(model=MODEL, prompt=ctx, max_tokens=256,
#                            extra_body={"session_id": "conv-42", "return_token_ids": True})
#   ... run the tool ...
#   r = c.completions.create(model=MODEL, prompt=ctx + output + tool_result, max_tokens=256,
#                            extra_body={"session_id": "conv-42"})
