#!/usr/bin/env bash
# One batched GPU run for a maintainer: the self-check of some lessons, then `bench` of some lesson ids, with logs.
#
#   bash scripts/gpu_run.sh "04_CUDA_Systems/0[1-4]*.ipynb" "p04.reduction p03.decode_attention" [self-check seconds]
#
# Logs go to $OUT (or /tmp/llm_algo_gpu): selfcheck.log and bench.log. The self-check and bench import neither
# nbformat nor nbclient (checked with both blocked), so a machine with torch, triton, numba-cuda, transformers, peft
# and cloudpickle needs nothing more; wheels put in .whl/ (nbformat and its own, for headless runs) are installed
# into /tmp/site first when nbformat is missing.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/llm_algo_gpu}
mkdir -p "$OUT"
if [[ -d .whl ]] && ! python3 -c 'import nbformat' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
    exit 1
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
python3 -m llm_algo doctor 2>&1 | grep -v "^  p0" | head -14
if [[ -n "${1:-}" ]]; then
  echo "=== prebuild-cuda $1"
  # Every CUDA C++ extension of these lessons and their mutants, 8 builds at a time: the self-check then only loads
  # them (a lesson's C++ mutants would otherwise build one after another in its grading process).
  start=$SECONDS
  # shellcheck disable=SC2086
  python3 -m llm_algo prebuild-cuda --jobs 8 $1 >"$OUT/prebuild.log" 2>&1
  echo "exit $? in $((SECONDS - start)) s"
  tail -3 "$OUT/prebuild.log"
  echo "=== self-check $1"
  # shellcheck disable=SC2086  # $1 is a list of paths or globs
  timeout "${3:-400}" python3 -m pytest -q -p no:cacheprovider --self-check --grading-jobs 8 -p no:xdist $1 \
    >"$OUT/selfcheck.log" 2>&1
  echo "exit $?"
  grep -E "FAILED|ERROR|passed|failed" "$OUT/selfcheck.log" | tail -40
fi
for id in ${2:-}; do
  echo "=== bench $id"
  timeout 120 python3 -m llm_algo bench "$id" 2>&1 | tee -a "$OUT/bench.log" | tail -30
done
