#!/usr/bin/env bash
# The one prepared run for a session that is lent the GPU (the `device` tool): what the machine
# has, the `gpu`-marked tests, and the executor benchmark on CUDA. Every step has its own time
# limit and writes its own log under $OUT (the device tool returns that folder), so one failing
# step never hides the others. About 8 minutes in all; pass a smaller BUDGET_S to shorten.
#
#   OUT=/tmp/gpu_out bash bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
mkdir -p "$out"
step() {  # step NAME SECONDS CMD...: run CMD with a limit, log to $out/NAME.txt, record its exit code
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s): $*"
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    echo "$name rc=$?" | tee -a "$out/summary.txt"
    tail -n 4 "$out/$name.txt"
}
step env 60 bash -c 'nvidia-smi; python -c "import torch; print(torch.__version__, torch.cuda.is_available())";
    python -c "import vllm; print(\"vllm\", vllm.__version__)"; pip list 2>/dev/null | grep -i -E "^(torch|transformers|xgrammar|vllm) "'
step install 120 pip install -q --no-deps --no-build-isolation -e .
step pytest_gpu 240 python -m pytest -m gpu -q -p no:cacheprovider -rs tests
step bench_executor_cuda 180 python bench/bench_executor.py --device cuda --n 32 --batch 1 8 32 --repeat 3 --sampled-tokens 0
cat "$out/summary.txt"
