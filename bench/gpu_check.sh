#!/usr/bin/env bash
# The one prepared run for a session that is lent the GPU (the `device` tool). Every step has its own
# time limit and writes its own log under $OUT (the device tool returns that folder), so one failing
# step never hides the others; the limits add up to 580 s (under the device tool's 600 s a command):
#   env            the GPU and the image's packages;
#   pytest_gpu     the `gpu`-marked tests (FlexAttention's gradients against the block-sparse SDPA among them);
#   learner_memory the learner's logprob/entropy/loss path at Qwen3's vocabulary, 4k tokens, bf16:
#                  peak CUDA memory and tokens/s, the dense path against the chunked one;
#   flex           FlexAttention against the block-sparse SDPA on a 4k structured row, bf16, forward and
#                  backward: agreement, time, peak memory;
#   bench_executor_cuda  the parallel executor's decode on CUDA.
# Not here: collectives (one GPU cannot hold an NCCL group's two ranks; Ray and DeepSpeed are not in the image).
#
# The GPU image has torch and transformers but not xgrammar: run bench/gpu_wheels.sh here first
# and carry ".whl" (installed below into /tmp/site). Without it the grammar runs are skipped.
#
#   device run, carry [".whl"]:  OUT=$OUT bash bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
py=${PY:-python3}
mkdir -p "$out"
step() {  # step NAME SECONDS CMD...: run CMD with a limit, log to $out/NAME.txt, record its exit code
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s): $*"
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    echo "$name rc=$?" | tee -a "$out/summary.txt"
    tail -n 4 "$out/$name.txt"
}
if ls .whl/*.whl >/dev/null 2>&1; then
    step wheels 60 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
step env 60 bash -c "nvidia-smi; $py -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|xgrammar|vllm|hypothesis|pytest) '"
# only the modules that hold gpu tests: the rest import Ray, Hydra, DeepSpeed, which the image lacks
mapfile -t gpu_tests < <(grep -rl "mark.gpu" tests --include='test_*.py')
step pytest_gpu 150 "$py" -m pytest -m gpu -q -p no:cacheprovider -rs "${gpu_tests[@]}"
step learner_memory 100 "$py" bench/bench_learner_memory.py --device cuda --tokens 4096 --timeout 80
step flex 120 "$py" bench/bench_masks.py flex --device cuda --dtype bfloat16 --length 4096 --steps 5
grammar=()
"$py" -c "import xgrammar" 2>/dev/null || grammar=(--no-grammar)
step bench_executor_cuda 90 "$py" bench/bench_executor.py --device cuda --n 32 --batch 1 8 32 --repeat 3 \
    --sampled-tokens 0 "${grammar[@]}"
cat "$out/summary.txt"
