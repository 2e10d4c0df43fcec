#!/usr/bin/env bash
# The one prepared command for a machine with one NVIDIA GPU (README.md, "Running on a GPU
# machine"): runs measure.py's grid into $OUT/gpu_memory under a hard 470 s limit and keeps
# nvidia-smi's view of the GPU before and after it. Needs only python3 with PyTorch >= 2.5
# and nvidia-smi; it does not install anything and does not need vramopt.
#
#   OUT=/some/folder bash benchmarks/gpu_memory/run_on_gpu.sh [measure.py options]
#
# Writes $OUT/gpu_memory/{measurements.csv, environment.json, configs/, measure.log,
# nvidia-smi-before.txt, nvidia-smi-after.txt, nvidia-smi-query.csv}. The CSV is flushed row
# by row, so a timeout still leaves every finished run. Exit status: measure.py's (124 when
# the limit killed it).
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
out="${OUT:?set OUT to the folder that receives the results}/gpu_memory"
mkdir -p "$out"

query="name,driver_version,memory.total,memory.used,memory.free,compute_cap,mig.mode.current"
nvidia-smi > "$out/nvidia-smi-before.txt" 2>&1 || echo "nvidia-smi failed (status $?)" >> "$out/nvidia-smi-before.txt"
nvidia-smi --query-gpu="$query" --format=csv > "$out/nvidia-smi-query.csv" 2>&1 || true
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "available", torch.cuda.is_available())' \
    2>&1 | tee "$out/measure.log"

# measure.py stops starting runs after its own 420 s budget; the timeout is the backstop.
PYTHONUNBUFFERED=1 timeout --kill-after=10 470 \
    python3 benchmarks/gpu_memory/measure.py --output "$out" "$@" 2>&1 | tee -a "$out/measure.log"
status=${PIPESTATUS[0]}

nvidia-smi > "$out/nvidia-smi-after.txt" 2>&1 || true
echo "measure.py exit status $status; results in $out" | tee -a "$out/measure.log"
exit "$status"
