#!/usr/bin/env bash
# Issue 27's GPU verification in one run (GPU time is scarce): Part 04's C++ extensions built up front, then the
# self-check of the Part 04 lessons with C++ exercises (the new GPU mutants, the 2^31-element checks, the operand
# layouts), then Part 03's GPU-only checks past 2^31 elements and their int32 mutants (review C5), and p03.matmul's
# long-K check. Logs under $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/llm_algo_gpu}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
CPP="04_CUDA_Systems/01_CUDA_Intro.ipynb 04_CUDA_Systems/02_Shared_Memory.ipynb 04_CUDA_Systems/03_Warp_Primitives.ipynb 04_CUDA_Systems/04_Reduction.ipynb 04_CUDA_Systems/05_Tensor_Cores.ipynb 04_CUDA_Systems/06_Async_Copy.ipynb 04_CUDA_Systems/13_CUDA_vs_Triton.ipynb"
ATTN="03_Triton_Kernels/14_Decode_Attention.ipynb 03_Triton_Kernels/15_Paged_Attention.ipynb 03_Triton_Kernels/20_Varlen_Attention.ipynb 03_Triton_Kernels/10_Flash_Attention_Fwd.ipynb 03_Triton_Kernels/11_Flash_Attention_Bwd.ipynb 03_Triton_Kernels/03_Softmax.ipynb"
step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  echo "=== $name"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "exit $? in $((SECONDS - start)) s"
  grep -E "^(FAILED|ERROR)|passed|failed|prebuild-cuda: done" "$OUT/$name.log" | tail -12
}
# shellcheck disable=SC2086
step prebuild 150 python3 -m llm_algo prebuild-cuda --jobs 12 $CPP
# shellcheck disable=SC2086
step part04 180 python3 -m pytest -q -p no:cacheprovider -p no:xdist --self-check --grading-jobs 8 $CPP
# shellcheck disable=SC2086
step c5 90 python3 -m pytest -q -p no:cacheprovider -p no:xdist --solutions --mutants --grading-jobs 6 $ATTN -k "past_2_31 or int32"
step matmul 40 python3 -m pytest -q -p no:cacheprovider -p no:xdist --self-check --grading-jobs 2 03_Triton_Kernels/07_MatMul.ipynb
