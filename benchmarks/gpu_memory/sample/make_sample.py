#!/usr/bin/env python
"""Regenerate the checked-in SAMPLE input of compare.py. SAMPLE, not a measurement.

    python benchmarks/gpu_memory/sample/make_sample.py [--from DRY_RUN_DIR]

Runs ``measure.py --dry-run`` on the CPU (needs PyTorch; or reads a dry run's folder given
with --from) for the structural columns: shapes, parameter counts, techniques, the
attention backend, and the weight, gradient, optimizer and KV cache tensor sizes, which
the dry run counts from real tensors. The GPU memory columns, empty in a dry run, are then
filled by the synthetic rule below, only so that compare.py's code path has numbers to
compare. Nothing here ran on a GPU; every file says so.

Synthetic rule (P parameters, s sequence, b micro-batch, vramopt = compare.predict_training):

- ``cuda_context_bytes`` = 1.5 GiB;
- training: ``activations_peak_bytes`` = 1.07 x (vramopt activations_bytes + logits_bytes);
  persistent = weights + gradients + optimizer + token ids and labels (2 x b x s x 8 B);
  forward+backward peak = persistent + activations; update peak = persistent + 4P (bf16's
  fp32 master gradients) or persistent (fp32); ``max_memory_allocated_bytes`` = the larger;
- inference: ``activations_peak_bytes`` = 0.07 x (weights + KV cache); allocated peak =
  weights + KV cache + ids (b x s x 8 B) + activations;
- ``max_memory_reserved_bytes`` = 1.07 x allocated peak, rounded up to 512 B;
- ``step_time_s`` and ``run_wall_s`` (CPU timings of the dry run) are left empty.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SAMPLE_DIR = Path(__file__).resolve().parent
BENCHMARK_DIR = SAMPLE_DIR.parent
sys.path.insert(0, str(BENCHMARK_DIR))

import compare  # noqa: E402

SAMPLE_GPU_NAME = "NVIDIA H200 (SAMPLE target; nothing ran on a GPU)"
CONTEXT_BYTES = 3 * 2**29  # 1.5 GiB
MARKUP = 1.07
ROUNDING_BYTES = 512  # the caching allocator rounds every block up to 512 bytes
SYNTHETIC_RULE = (
    "SAMPLE, not a measurement. Structural columns and tensor sizes from measure.py --dry-run on a CPU; "
    "GPU columns synthetic: context 1.5 GiB; training activations = 1.07 x vramopt (activations + logits), "
    "allocated = weights + gradients + optimizer + ids + max(activations, bf16 fp32 master gradients 4P); "
    "inference activations = 0.07 x (weights + KV); reserved = 1.07 x allocated rounded up to 512 B. "
    "See benchmarks/gpu_memory/sample/make_sample.py."
)


def run_dry_run(folder: Path) -> None:
    command = [sys.executable, str(BENCHMARK_DIR / "measure.py"), "--dry-run", "--output", str(folder)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def _int(row: dict[str, str], column: str) -> int:
    return int(row[column])


def _reserved(allocated: int) -> int:
    return math.ceil(MARKUP * allocated / ROUNDING_BYTES) * ROUNDING_BYTES


def synthetic_training(row: dict[str, str], config: Path, gpu: Any) -> dict[str, int]:
    memory = compare.predict_training(row, config, gpu)
    params, tokens = _int(row, "params_total"), _int(row, "seq_len") * _int(row, "micro_batch")
    ids = 2 * tokens * 8
    activations = round(MARKUP * (memory["activations_bytes"] + memory["logits_bytes"]))
    persistent = _int(row, "weights_bytes") + _int(row, "gradients_bytes") + _int(row, "optimizer_bytes") + ids
    master_gradients = 4 * params if row["precision"] == "bf16" else 0
    allocated = persistent + max(activations, master_gradients)
    return {
        "memory_after_init_allocated_bytes": _int(row, "weights_bytes") + master_gradients + ids,
        "allocated_before_forward_bytes": persistent,
        "activations_peak_bytes": activations,
        "forward_backward_peak_allocated_bytes": persistent + activations,
        "optimizer_step_peak_allocated_bytes": persistent + master_gradients,
        "max_memory_allocated_bytes": allocated,
        "max_memory_reserved_bytes": _reserved(allocated),
    }


def synthetic_inference(row: dict[str, str]) -> dict[str, int]:
    state = _int(row, "weights_bytes") + _int(row, "kv_cache_bytes")
    persistent = state + _int(row, "seq_len") * _int(row, "micro_batch") * 8
    activations = round((MARKUP - 1) * state)
    return {
        "memory_after_init_allocated_bytes": persistent,
        "allocated_before_forward_bytes": persistent,
        "activations_peak_bytes": activations,
        "forward_backward_peak_allocated_bytes": persistent + activations,
        "max_memory_allocated_bytes": persistent + activations,
        "max_memory_reserved_bytes": _reserved(persistent + activations),
    }


def write_sample(dry_run: Path) -> int:
    with open(dry_run / "measurements.csv", newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns, rows = [*reader.fieldnames, "sample_note"], list(reader)
    environment = json.loads((dry_run / "environment.json").read_text(encoding="utf-8"))
    shutil.rmtree(SAMPLE_DIR / "configs", ignore_errors=True)
    shutil.copytree(dry_run / "configs", SAMPLE_DIR / "configs")
    gpu = compare.load_gpu("h200")
    for row in rows:
        config = SAMPLE_DIR / "configs" / f"{row['model_shape']}.json"
        synthetic = synthetic_training(row, config, gpu) if row["kind"] == "train" else synthetic_inference(row)
        row.update({key: str(value) for key, value in synthetic.items()})
        row.update(
            cuda_context_bytes=str(CONTEXT_BYTES), allocated_before_run_bytes="0", step_time_s="", run_wall_s="",
            gpu_name=SAMPLE_GPU_NAME, driver_version="", cuda_version="", sample_note=compare.SAMPLE_LABEL,
        )  # fmt: skip
    with open(SAMPLE_DIR / "measurements.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    environment.update(
        sample=True, sample_note=SYNTHETIC_RULE, gpu_name=SAMPLE_GPU_NAME, cuda_context_bytes=CONTEXT_BYTES,
        generated_by="benchmarks/gpu_memory/sample/make_sample.py",
    )  # fmt: skip
    for key in ("elapsed_s", "platform", "estimated_grid_s", "time_budget_s"):
        environment.pop(key, None)  # CPU timings and the generating machine: not sample data
    text = json.dumps(environment, indent=2, sort_keys=True) + "\n"
    (SAMPLE_DIR / "environment.json").write_text(text, encoding="utf-8")
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="dry_run", type=Path, help="an existing measure.py --dry-run output folder")
    args = parser.parse_args(argv)
    if args.dry_run is not None:
        count = write_sample(args.dry_run)
    else:
        with tempfile.TemporaryDirectory() as folder:
            run_dry_run(Path(folder))
            count = write_sample(Path(folder))
    print(f"{count} SAMPLE rows (not a measurement) -> {SAMPLE_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
