#!/usr/bin/env bash
# Run HERE (the CPU machine, which reaches PyPI) before a device call: fetch into .whl/ the wheels
# the GPU image lacks for bench/gpu_check.sh (xgrammar and its needs; cp312, manylinux; DeepSpeed,
# built here from its sdist with no ops: a pure-Python wheel, its ops JIT-built where they run, and
# hjson; transformers and tokenizers at the project's pins, where the image has transformers 5.17), at
# the versions of requirements/constraints.txt. ~23 MB of the 64 MiB a call carries; .whl/ is kept out of git. Then call
# the device tool with carry [".whl"] and `OUT=$OUT bash bench/gpu_check.sh`.
# vLLM cannot travel this way (its wheel is far over the 64 MiB a call carries): vLLM tests skip
# unless the image has it.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
pin() { grep -i -E "^$1==" requirements/constraints.txt || { echo "$1 not pinned" >&2; exit 1; }; }
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    "$(pin xgrammar)" "$(pin apache-tvm-ffi)" "$(pin pydantic)" "$(pin pydantic_core)" "$(pin typing_extensions)" \
    "$(pin annotated-types)" "$(pin typing-inspection)" "$(pin hjson)" "$(pin transformers)" "$(pin tokenizers)"
DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps "$(pin deepspeed)" -w .whl  # PyPI has DeepSpeed as an sdist only
ls -la .whl
