#!/usr/bin/env bash
# The GPU run in one command, on a machine with an NVIDIA GPU and TensorFlow with CUDA:
#
#   bash benchmarks/gpu_run.sh [GPUS]          # GPUS: EXPECTED_GPU_COUNT, default: all nvidia-smi lists
#
# 1. the TF-free GPU check (python -m trainer.gpu_check) on every visible GPU;
# 2. the gpu-marked tests (pytest -m gpu), when pytest is installed;
# 3. the trainer at fp32, bf16 and fp16 (benchmarks/gpu_precision.py), twice: first with an empty
#    CUDA JIT cache, then with the cache the first pass filled (CUDA_CACHE_MAXSIZE=4 GiB, as the
#    image sets it): first-step time (the difference is the PTX JIT), steps/s, loss finite;
# 4. ResNet-50: the trainer's (mixed precision, XLA) synthetic and from raw-pixel records on local
#    disk, against torchvision's (AMP, channels-last, torch.compile) in the same command, with MFU
#    (python -m benchmarks.resnet_bench --vs-torch; the torch rows skip with one line without torch).
# Results: printed, and under ${OUT:-gpu-run-out}/ (gpu-check.json, pytest.txt, cold.json, warm.json,
# resnet-vs-torch.md).
# See benchmarks/RESULTS.md, "pending GPU figures", for how the lent GPU machine gets TensorFlow.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-gpu-run-out}
mkdir -p "$out"
python=${PYTHON:-python3}
gpus=${1:-$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)}
export PYTHONPATH="$PWD/training_image:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_CACHE_MAXSIZE=4294967296
export CUDA_CACHE_PATH="$out/cuda-jit-cache"
export TF_FORCE_GPU_ALLOW_GROWTH=true
status=0

echo "== device"
nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,compute_cap --format=csv 2>&1 | tee "$out/nvidia-smi.csv"
"$python" -c 'import tensorflow as tf; print("tensorflow", tf.__version__, "cuda build", tf.test.is_built_with_cuda(), tf.sysconfig.get_build_info().get("cuda_version"), "GPUs", len(tf.config.list_physical_devices("GPU")))'

echo "== TF-free GPU check, EXPECTED_GPU_COUNT=$gpus"
EXPECTED_GPU_COUNT=$gpus "$python" -m trainer.gpu_check "$out/gpu-check.json" || status=1
cat "$out/gpu-check.json"; echo

echo "== gpu-marked tests"
if "$python" -c 'import pytest' 2>/dev/null; then
  EXPECTED_GPU_COUNT=$gpus "$python" -m pytest -q -p no:cacheprovider -m gpu tests/trainer 2>&1 | tee "$out/pytest.txt" | tail -15
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
else
  echo "pytest is not installed here: gpu-marked tests not run" | tee "$out/pytest.txt"
fi

for pass in cold warm; do
  echo "== trainer at fp32/bf16/fp16, $pass JIT cache ($CUDA_CACHE_PATH)"
  [ "$pass" = cold ] && rm -rf "$CUDA_CACHE_PATH"
  "$python" -m benchmarks.gpu_precision --gpus "$gpus" --label "$pass" --out "$out/$pass.json" || status=1
done
du -sh "$CUDA_CACHE_PATH" 2>/dev/null | sed 's/^/JIT cache: /'

echo "== ResNet-50: trainer (synthetic, raw records) vs torchvision, one GPU"
"$python" -m benchmarks.resnet_bench --vs-torch 2>"$out/resnet-vs-torch.log" | tee "$out/resnet-vs-torch.md"
[ "${PIPESTATUS[0]}" = 0 ] || { status=1; tail -5 "$out/resnet-vs-torch.log"; }
exit $status
