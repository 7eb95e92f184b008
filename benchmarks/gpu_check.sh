#!/usr/bin/env bash
# The checks a session runs on a lent CUDA machine (not CI): the CUDA-marked tests, then `attnzoo bench gpu`.
# Usage, in the repository root there: OUT=<folder> [TESTS='<paths>'] bash benchmarks/gpu_check.sh [pytest args...]
# TESTS (default: tests) names the test files or folders; pytest args alone do not narrow what is collected.
# Python packages the machine lacks travel as wheels in .whl/ (installed into /tmp/site, no network needed).
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    cp .whl/*.py /tmp/site/ 2>/dev/null
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, lightning, transformers; print('torch', torch.__version__, torch.cuda.get_device_name(), \
'lightning', lightning.__version__, 'transformers', transformers.__version__)"
timeout "${TEST_TIMEOUT:-330}" python3 -m pytest -p no:cacheprovider -m cuda -n "${WORKERS:-8}" --timeout 300 -q \
    -o addopts="" -rfE "$@" ${TESTS:-tests} > "$OUT/cuda_tests.log" 2>&1
echo "tests: exit $?"; tail -n 40 "$OUT/cuda_tests.log"
if [ -z "${SKIP_BENCH:-}" ]; then
    timeout "${BENCH_TIMEOUT:-220}" python3 -m attnzoo.bench gpu --repeats 3 --out "$OUT" 2>&1 | tail -n 60
fi
