#!/usr/bin/env bash
# The prepared run for a session that is lent the GPU (the `device` tool: 10 minutes a command, 15 in all,
# machine start included). The steps are grouped into stages whose time limits add up to at most 240 s,
# so one device call runs one stage with room to spare, and a failure costs that stage, not the budget.
# Resumable: a step that passed is recorded under $GPU_CHECK_STATE (default build/gpu_check/, ignored by
# git, so a warm device machine keeps it between calls) and a rerun skips it; its log and summary line
# are copied to $OUT again, so every call's $OUT holds the whole picture so far.
#
#   bash bench/gpu_check.sh            the first stage that has a step not passed yet ("all passed": none)
#   bash bench/gpu_check.sh 2 3        stages 2 and 3 (their steps not passed yet)
#   bash bench/gpu_check.sh --list     the plan: each step's stage, name and limit, and each stage's total
#   FORCE=1 ...                        run passed steps again
#
# The steps (stage, limit in seconds):
#   1 env                 the GPU and the image's packages (and the carried wheels' versions);
#   1 learner_structured  the paper learner's path at a Qwen3 size (qwen3_1_7b: Qwen3-1.7B's shapes and
#                         151,936-token vocabulary, random weights) on 2 x 4,096 tokens of parallel branches:
#                         bf16 weights, ZeRO-3 on one rank (NCCL), gradient checkpointing, FlexAttention; SFT
#                         steps and the scoring pass against a plain transformers step: tokens/s, peak memory;
#                         then the ZeRO-3 export and its sync (gloo, from CUDA) bit for bit;
#   1 flex                FlexAttention against the block-sparse SDPA on a 4k structured row, bf16, forward
#                         and backward: agreement, time, peak memory;
#   2 pytest_gpu          the `gpu`-marked tests: FlexAttention's gradients against the block-sparse SDPA;
#                         NCCL between two processes on the one GPU (its refusal of two ranks on one device,
#                         why a colocated engine takes its weights another way); that other way, the
#                         same-device hand-off by CUDA IPC between two processes, bit for bit
#                         (parallax/weightsync/handoff.py); the release of a learner's cached CUDA memory; the
#                         executor on CUDA;
#   2 learner_memory      the learner's logprob/entropy/loss head at Qwen3's vocabulary, 4k tokens, bf16:
#                         peak CUDA memory and tokens/s, the dense path against the chunked one;
#   3 learner_causal      the learner step of stage 1 on causal rows (SDPA's own kernels);
#   3 bench_executor_cuda the parallel executor's decode on CUDA.
# Not here: Ray and vLLM (not in the image; vLLM's wheel is over what a call carries).
#
# The image has torch 2.11 and transformers 5.17 but not DeepSpeed or xgrammar; the project pins
# transformers 5.10.4. Run bench/gpu_wheels.sh here first and carry ".whl" (~23 MB: DeepSpeed, xgrammar,
# transformers 5.10.4 and tokenizers, installed below into /tmp/site, ahead of the image's); torch stays
# the image's 2.11 (its wheel is far over what a call carries), and `env` prints what each step ran on.
#
#   device run, carry [".whl"], timeout_s 300:  OUT=$OUT bash bench/gpu_check.sh
#
# GPU_CHECK_PLAN=FILE replaces the plan (lines "STAGE NAME LIMIT COMMAND": the smoke test's own steps);
# GPU_CHECK_WHEELS=DIR the wheels to install (default .whl).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
state=${GPU_CHECK_STATE:-build/gpu_check}
wheels=${GPU_CHECK_WHEELS:-.whl}  # bench/gpu_wheels.sh's folder
export PY=${PY:-python3}
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
MAX_STAGE_S=240

default_plan() {  # STAGE NAME LIMIT COMMAND (run with bash -c; $PY and $LEARNER are exported)
    cat <<'PLAN'
1 env 20 nvidia-smi; "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, transformers.__file__)'; "$PY" -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|tokenizers|deepspeed|xgrammar|vllm|peft|pytest) '
1 learner_structured 150 $LEARNER --layout structured --export
1 flex 60 "$PY" bench/bench_masks.py flex --device cuda --dtype bfloat16 --length 4096 --steps 5
2 pytest_gpu 150 "$PY" -m pytest -m gpu -q -p no:cacheprovider -rsP $(grep -rl "mark.gpu" tests --include='test_*.py')
2 learner_memory 70 "$PY" bench/bench_learner_memory.py --device cuda --tokens 4096 --timeout 60
3 learner_causal 110 $LEARNER --layout causal
3 bench_executor_cuda 60 "$PY" bench/bench_executor.py --device cuda --n 32 --batch 1 8 32 --repeat 3 --sampled-tokens 0 $("$PY" -c "import xgrammar" 2>/dev/null || echo --no-grammar)
PLAN
}
# GRPO's loss is verl's, and verl imports Ray (not in the image): SFT and scoring steps only
export LEARNER="$PY bench/bench_learner_speed.py --device cuda --model qwen3_1_7b --dtype bfloat16 --batch 2 \
--tokens 4096 --zero-stage 3 --gradient-checkpointing --precisions bf16 --steps 2 --warmup 1 --threads 8 \
--kinds sft,score"

plan() { if [ -n "${GPU_CHECK_PLAN:-}" ]; then grep -v -E '^\s*(#|$)' "$GPU_CHECK_PLAN"; else default_plan; fi; }

# every stage within MAX_STAGE_S, checked before anything runs
totals=$(plan | awk '{t[$1] += $3} END {for (s in t) print s, t[s]}' | sort -n)
over=$(awk -v m=$MAX_STAGE_S '$2 > m' <<<"$totals")
if [ -n "$over" ]; then
    echo "gpu_check: a stage's limits add up to more than ${MAX_STAGE_S} s (stage seconds): $over" >&2
    exit 2
fi
if [ "${1:-}" = --list ]; then
    plan | awk '{printf "%s %s %s\n", $1, $2, $3}'
    awk '{printf "stage %s: %s s\n", $1, $2}' <<<"$totals"
    exit 0
fi

mkdir -p "$out" "$state"
: >"$out/summary.txt"
if ls "$wheels"/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl \
        >"$out/wheels.txt" 2>&1
    echo "wheels rc=$?" | tee -a "$out/summary.txt"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

# the stages to run: those named, or the first with a step not passed yet
if [ $# -gt 0 ]; then
    stages=" $* "
else
    next=$(plan | while read -r s name _; do [ -f "$state/$name.passed" ] || { echo "$s"; break; }; done)
    [ -n "${FORCE:-}" ] && next=$(plan | awk 'NR == 1 {print $1}')
    if [ -z "$next" ]; then
        echo "gpu_check: all passed (${state}; FORCE=1 or name a stage to run one again)"
    fi
    stages=" $next "
fi

rc_all=0
while read -r s name limit cmd; do
    if [ -f "$state/$name.passed" ] && [ -z "${FORCE:-}" ]; then  # passed earlier: its record, not a rerun
        cp "$state/$name.txt" "$out/$name.txt" 2>/dev/null
        echo "$(cat "$state/$name.passed") (passed earlier, skipped)" | tee -a "$out/summary.txt"
        continue
    fi
    [[ $stages == *" $s "* ]] || { echo "$name not run (stage $s)" >>"$out/summary.txt"; continue; }
    echo "== stage $s: $name (limit ${limit}s): $cmd"
    t0=$SECONDS
    timeout "$limit" bash -c "$cmd" >"$out/$name.txt" 2>&1
    rc=$?
    line="$name rc=$rc $((SECONDS - t0))s"
    echo "$line" | tee -a "$out/summary.txt"
    tail -n 12 "$out/$name.txt"
    if [ "$rc" = 0 ]; then
        cp "$out/$name.txt" "$state/$name.txt"
        echo "$line" >"$state/$name.passed"
    else
        rm -f "$state/$name.passed"
        rc_all=1
    fi
done < <(plan)
echo "--- summary (state: $state)"
cat "$out/summary.txt"
exit $rc_all
