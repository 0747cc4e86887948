#!/usr/bin/env bash
# The one prepared run for a session that is lent the GPU (the `device` tool). Every step has its own
# time limit and writes its own log under $OUT (the device tool returns that folder), so one failing
# step never hides the others. The most telling steps run first; the limits add up to 520 s, and a
# quiet H100 needs about half of that. A rerun can take only some steps: ONLY="flex pytest_gpu".
#   env                the GPU and the image's packages;
#   learner_structured the paper learner's path at a Qwen3 size (qwen3_1_7b: Qwen3-1.7B's shapes and
#                      151,936-token vocabulary, random weights) on 2 x 4,096 tokens of parallel branches:
#                      bf16 weights, ZeRO-3 on one rank (NCCL), gradient checkpointing, FlexAttention; SFT
#                      steps and the scoring pass against a plain transformers step: tokens/s, peak memory; then the
#                      ZeRO-3 export and its sync (gloo, from CUDA) bit for bit;
#   learner_causal     the same on causal rows (SDPA's own kernels);
#   pytest_gpu         the `gpu`-marked tests: FlexAttention's gradients against the block-sparse SDPA, with
#                      and without gradient checkpointing; NCCL's refusal of two sync ranks on one GPU
#                      (why weightsync.driver.shared_devices sends colocated engines through the object
#                      store); the executor on CUDA;
#   learner_memory     the learner's logprob/entropy/loss head at Qwen3's vocabulary, 4k tokens, bf16:
#                      peak CUDA memory and tokens/s, the dense path against the chunked one;
#   flex               FlexAttention against the block-sparse SDPA on a 4k structured row, bf16, forward and
#                      backward: agreement, time, peak memory;
#   bench_executor_cuda  the parallel executor's decode on CUDA.
# Not here: a collective of two ranks (one GPU cannot hold an NCCL group's two ranks), Ray and vLLM (not
# in the image; vLLM's wheel is over what a call carries).
#
# The GPU image has torch and transformers but not DeepSpeed or xgrammar: run bench/gpu_wheels.sh here
# first and carry ".whl" (installed below into /tmp/site).
#
#   device run, carry [".whl"]:  OUT=$OUT bash bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
py=${PY:-python3}
only=${ONLY:-}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
step() {  # step NAME SECONDS CMD...: run CMD with a limit, log to $out/NAME.txt, record its exit code
    local name=$1 limit=$2
    shift 2
    if [ -n "$only" ] && [[ " $only " != *" $name "* ]]; then return; fi
    echo "== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    echo "$name rc=$? $((SECONDS - t0))s" | tee -a "$out/summary.txt"
    tail -n 12 "$out/$name.txt"
}
if ls .whl/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        >"$out/wheels.txt" 2>&1
    echo "wheels rc=$?" | tee -a "$out/summary.txt"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
step env 30 bash -c "nvidia-smi; $py -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|deepspeed|xgrammar|vllm|peft|pytest) '"
learner=("$py" bench/bench_learner_speed.py --device cuda --model qwen3_1_7b --dtype bfloat16 --batch 2
         --tokens 4096 --zero-stage 3 --gradient-checkpointing --precisions bf16 --steps 2 --warmup 1 --threads 8
         --kinds sft,score)  # GRPO's loss is verl's, and verl imports Ray: not in the image
step learner_structured 130 "${learner[@]}" --layout structured --export
step learner_causal 90 "${learner[@]}" --layout causal
# only the modules that hold gpu tests: the rest import Ray, Hydra, DeepSpeed, which the image lacks
mapfile -t gpu_tests < <(grep -rl "mark.gpu" tests --include='test_*.py')
step pytest_gpu 120 "$py" -m pytest -m gpu -q -p no:cacheprovider -rsP "${gpu_tests[@]}"
step learner_memory 60 "$py" bench/bench_learner_memory.py --device cuda --tokens 4096 --timeout 50
step flex 50 "$py" bench/bench_masks.py flex --device cuda --dtype bfloat16 --length 4096 --steps 5
grammar=()
"$py" -c "import xgrammar" 2>/dev/null || grammar=(--no-grammar)
step bench_executor_cuda 40 "$py" bench/bench_executor.py --device cuda --n 32 --batch 1 8 32 --repeat 3 \
    --sampled-tokens 0 "${grammar[@]}"
cat "$out/summary.txt"
