#!/usr/bin/env python
"""Measure per-GPU memory of single-GPU training and inference techniques.

Builds small Llama-style decoders (and one Mixtral-style MoE) with random weights in plain
PyTorch (``decoder_model.py``), runs the fractional-factorial grid of ``run_grid.py`` and
writes one CSV row per run, flushed as soon as the run ends:

    python3 benchmarks/gpu_memory/measure.py --output benchmarks/gpu_memory/results/h200

The full grid is 108 runs on 6 shapes (125M to 3.4B parameters, sequences 512-4,096,
micro-batches 1-8); its conservative estimate on one H200 is about 5 minutes, inside the
default ``--time-budget-s 420``. After the budget, the remaining runs are written as
'skipped'; an OOM or any error becomes a row with status 'oom' or 'error: ...' and the
grid goes on. ``--dry-run`` runs 18 tiny runs on the CPU (no CUDA) to test the script.
``--list`` prints the grid and its time estimate without running anything.

Needs PyTorch >= 2.5 (``nn.RMSNorm``, ``sdpa_kernel``, SDPA ``enable_gqa``) and nothing
else; it must not import vramopt, whose predictions it will be compared against. The CSV
columns are defined in README.md beside this file.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCRIPT_START_S = time.monotonic()  # the time budget counts from here, imports included

BENCHMARK_DIR = str(Path(__file__).resolve().parent)
if BENCHMARK_DIR not in sys.path:  # run as a script, or imported by path from a test
    sys.path.insert(0, BENCHMARK_DIR)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from attention_backends import attention_kernel, resolve_attention  # noqa: E402
from decoder_model import Decoder, KeyValueCache, module_parameters, write_hf_config  # noqa: E402
from gpu_environment import describe_environment  # noqa: E402
from run_grid import DRY_RUN_PLANS, GPU_PLANS, RunSpec, build_grid, estimated_run_s  # noqa: E402
from training_state import Fp32AdamW, MasterWeightAdamW, tensor_bytes  # noqa: E402

CSV_COLUMNS = (
    "run_id", "kind", "model_shape", "layers", "hidden_size", "heads", "kv_heads", "head_dim",
    "ffn_hidden_size", "vocab_size", "experts", "experts_per_token", "params_total", "seq_len",
    "micro_batch", "precision", "checkpointing", "attention_backend", "kv_cache_len", "status",
    "step_time_s", "cuda_context_bytes", "memory_after_init_allocated_bytes",
    "max_memory_allocated_bytes", "max_memory_reserved_bytes", "weights_bytes", "gradients_bytes",
    "optimizer_bytes", "activations_peak_bytes", "kv_cache_bytes", "gpu_name", "driver_version",
    "torch_version", "cuda_version",
    # Added after the columns above (see README.md):
    "attention_backend_requested", "gqa_kv_mode", "params_active", "allocated_before_run_bytes",
    "allocated_before_forward_bytes", "forward_backward_peak_allocated_bytes",
    "optimizer_step_peak_allocated_bytes", "run_wall_s",
)  # fmt: skip

DEFAULT_SEED = 1234


class RunTimeout(Exception):
    """One run took longer than --run-timeout-s."""


# ----------------------------------------------------------------------------- device memory


class DeviceMemory:
    """Allocator statistics on CUDA; None on the CPU of a dry run, where none exist."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.is_cuda = device.type == "cuda"

    def synchronize(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def allocated(self) -> int | None:
        return torch.cuda.memory_allocated(self.device) if self.is_cuda else None

    def peak_allocated(self) -> int | None:
        return torch.cuda.max_memory_allocated(self.device) if self.is_cuda else None

    def peak_reserved(self) -> int | None:
        return torch.cuda.max_memory_reserved(self.device) if self.is_cuda else None

    def reset_peak(self) -> None:
        if self.is_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def release(self) -> None:
        """Free everything the last run left, so the next run starts from an empty allocator."""
        gc.collect()
        if self.is_cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)


def _maximum(*values: int | None) -> int | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def _difference(minuend: int | None, subtrahend: int | None) -> int | None:
    return None if minuend is None or subtrahend is None else minuend - subtrahend


# ----------------------------------------------------------------------------- one run


def train_step(model: Decoder, optimizer: Fp32AdamW | MasterWeightAdamW, input_ids: torch.Tensor,
               labels: torch.Tensor, backend: str, memory: DeviceMemory) -> dict[str, Any]:  # fmt: skip
    """One forward, backward and AdamW step; the peaks of forward+backward and of the update."""
    memory.synchronize()
    started_s = time.perf_counter()
    optimizer.zero_grad()
    before_forward = memory.allocated()
    memory.reset_peak()
    with attention_kernel(backend):
        logits = model(input_ids)
        # Cross-entropy on fp32 logits, as mixed-precision training recipes do.
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))
        del logits
        loss.backward()
    memory.synchronize()
    forward_backward_peak = memory.peak_allocated()
    forward_backward_reserved = memory.peak_reserved()
    gradients = tensor_bytes(parameter.grad for parameter in model.parameters())
    memory.reset_peak()
    optimizer.step()
    memory.synchronize()
    return {
        "step_time_s": time.perf_counter() - started_s,
        "allocated_before_forward_bytes": before_forward,
        "forward_backward_peak_allocated_bytes": forward_backward_peak,
        "optimizer_step_peak_allocated_bytes": memory.peak_allocated(),
        "max_memory_allocated_bytes": _maximum(forward_backward_peak, memory.peak_allocated()),
        "max_memory_reserved_bytes": _maximum(forward_backward_reserved, memory.peak_reserved()),
        "gradients_bytes": gradients,
        "activations_peak_bytes": _difference(forward_backward_peak, before_forward),
    }


def measure_training(run: RunSpec, device: torch.device, memory: DeviceMemory, row: dict[str, Any]) -> None:
    """Build, step twice, and fill ``row`` from the second step (Adam m and v exist by then)."""
    dtype = torch.bfloat16 if run.precision == "bf16" else torch.float32
    backend, gqa_mode = resolve_attention(run.attention_backend, dtype, run.shape, device, training=True)
    row.update(attention_backend=backend, gqa_kv_mode=gqa_mode)
    model = Decoder(run.shape, device=device, dtype=dtype)
    model.set_checkpointing(run.checkpointing)
    model.set_native_gqa(gqa_mode != "repeat")
    fused = memory.is_cuda  # the fused CUDA AdamW has no foreach temporaries
    optimizer = MasterWeightAdamW(model, fused) if run.precision == "bf16" else Fp32AdamW(model, fused)
    token_shape = (run.micro_batch, run.seq_len)
    input_ids = torch.randint(run.shape.vocab_size, token_shape, device=device)
    labels = torch.randint(run.shape.vocab_size, token_shape, device=device)
    memory.synchronize()
    row["memory_after_init_allocated_bytes"] = memory.allocated()  # Adam m, v come at step 1
    row["weights_bytes"] = tensor_bytes(model.parameters())
    train_step(model, optimizer, input_ids, labels, backend, memory)  # warm-up: creates m and v
    row.update(train_step(model, optimizer, input_ids, labels, backend, memory))
    row["optimizer_bytes"] = optimizer.state_bytes()


def measure_inference(run: RunSpec, device: torch.device, memory: DeviceMemory, row: dict[str, Any]) -> None:
    """Prefill ``seq_len`` prompt tokens into a preallocated bf16 KV cache, twice; keep the second."""
    dtype = torch.bfloat16
    backend, gqa_mode = resolve_attention(run.attention_backend, dtype, run.shape, device, training=False)
    row.update(attention_backend=backend, gqa_kv_mode=gqa_mode)
    model = Decoder(run.shape, device=device, dtype=dtype).eval().requires_grad_(False)
    model.set_native_gqa(gqa_mode != "repeat")
    cache = KeyValueCache(run.shape, batch=run.micro_batch, length=run.kv_cache_len, device=device, dtype=dtype)
    input_ids = torch.randint(run.shape.vocab_size, (run.micro_batch, run.seq_len), device=device)
    memory.synchronize()
    row["memory_after_init_allocated_bytes"] = memory.allocated()
    row.update(weights_bytes=tensor_bytes(model.parameters()), gradients_bytes=0, optimizer_bytes=0)
    row["kv_cache_bytes"] = cache.nbytes
    for _ in range(2):  # the first pass loads kernels; the second is measured
        memory.synchronize()
        started_s = time.perf_counter()
        before_forward = memory.allocated()
        memory.reset_peak()
        with torch.inference_mode(), attention_kernel(backend):
            logits = model(input_ids, cache=cache, last_token_logits_only=True)
        memory.synchronize()
        step_time_s = time.perf_counter() - started_s
        del logits
    row.update(
        step_time_s=step_time_s,
        allocated_before_forward_bytes=before_forward,
        forward_backward_peak_allocated_bytes=memory.peak_allocated(),
        max_memory_allocated_bytes=memory.peak_allocated(),
        max_memory_reserved_bytes=memory.peak_reserved(),
        activations_peak_bytes=_difference(memory.peak_allocated(), before_forward),
    )


def spec_columns(run: RunSpec, params: dict[str, int], environment: dict[str, Any]) -> dict[str, Any]:
    """The columns known before the run: what was asked for, and the machine."""
    shape = run.shape
    return {
        "run_id": run.run_id, "kind": run.kind, "model_shape": shape.name, "layers": shape.layers,
        "hidden_size": shape.hidden_size, "heads": shape.heads, "kv_heads": shape.kv_heads,
        "head_dim": shape.head_dim, "ffn_hidden_size": shape.ffn_hidden_size, "vocab_size": shape.vocab_size,
        "experts": shape.experts, "experts_per_token": shape.experts_per_token,
        "params_total": params["total"], "params_active": params["active"], "seq_len": run.seq_len,
        "micro_batch": run.micro_batch, "precision": run.precision, "checkpointing": run.checkpointing,
        "attention_backend_requested": run.attention_backend,
        "kv_cache_len": run.kv_cache_len if run.kind == "infer" else 0,
        "kv_cache_bytes": 0 if run.kind == "train" else None,
        "cuda_context_bytes": environment["cuda_context_bytes"], "gpu_name": environment["gpu_name"],
        "driver_version": environment["driver_version"], "torch_version": environment["torch_version"],
        "cuda_version": environment["cuda_version"],
    }  # fmt: skip


def describe_failure(error: BaseException, timeout_s: float) -> str:
    """'oom', or 'error: <type>: <first line>' kept to one short CSV field."""
    out_of_memory = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    if isinstance(error, out_of_memory) or "out of memory" in str(error).lower():
        return "oom"
    if isinstance(error, RunTimeout):
        return f"error: timeout after {timeout_s:g} s"
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"error: {type(error).__name__}: {first_line}"[:300]


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise RunTimeout in the main thread after ``seconds`` (POSIX only; else no limit)."""
    if not hasattr(signal, "SIGALRM") or seconds <= 0:
        yield
        return

    def _expire(signum: int, frame: Any) -> None:
        raise RunTimeout()

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def execute(run: RunSpec, index: int, args: argparse.Namespace, device: torch.device, memory: DeviceMemory,
            row: dict[str, Any]) -> None:  # fmt: skip
    """Run one grid point, filling ``row``; every failure becomes its status, never an exit."""
    memory.release()
    row["allocated_before_run_bytes"] = memory.allocated()
    torch.manual_seed(args.seed + index)
    started_s = time.perf_counter()
    try:
        with time_limit(args.run_timeout_s):
            if run.kind == "train":
                measure_training(run, device, memory, row)
            else:
                measure_inference(run, device, memory, row)
        row["status"] = "ok"
    except Exception as error:  # noqa: BLE001 - a failed run is data, the grid goes on
        row["status"] = describe_failure(error, args.run_timeout_s)
        # The peak up to the failure: a lower bound of what the run needed.
        row.setdefault("max_memory_allocated_bytes", memory.peak_allocated())
        row.setdefault("max_memory_reserved_bytes", memory.peak_reserved())
    row["run_wall_s"] = time.perf_counter() - started_s
    memory.release()  # the failed run's tensors die with its frames; free them before the next


# ----------------------------------------------------------------------------- CLI


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="folder for measurements.csv, environment.json, configs/")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU; no CUDA needed")
    parser.add_argument("--time-budget-s", type=float, default=420.0, help="skip the runs left after this")
    parser.add_argument("--run-timeout-s", type=float, default=45.0, help="give up one run after this (0: never)")
    parser.add_argument("--only", default="", help="comma-separated shape names to run")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--list", action="store_true", help="print the grid and its estimate, run nothing")
    args = parser.parse_args(argv)
    if args.output is None and not args.list:
        parser.error("--output is required (unless --list)")
    return args


def print_grid(runs: list[RunSpec]) -> None:
    for run in runs:
        print(f"{run.run_id:70s} tier {run.tier}  est {estimated_run_s(run):5.1f} s")
    print(f"{len(runs)} runs, estimated {sum(estimated_run_s(run) for run in runs):.0f} s on one H200")


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    only = tuple(name.strip() for name in args.only.split(",") if name.strip())
    try:
        runs = build_grid(DRY_RUN_PLANS if args.dry_run else GPU_PLANS, only)
    except ValueError as error:
        print(f"measure.py: {error}", file=sys.stderr)
        return 2
    if args.list:
        print_grid(runs)
        return 0
    if not hasattr(torch.nn, "RMSNorm"):
        print(f"measure.py: needs PyTorch >= 2.5, found {torch.__version__}", file=sys.stderr)
        return 2
    if not args.dry_run and not torch.cuda.is_available():
        print("measure.py: no CUDA device; use --dry-run to test on the CPU", file=sys.stderr)
        return 2
    device = torch.device("cpu") if args.dry_run else torch.device("cuda", 0)
    # TF32 tensor cores for fp32 matmuls: storage (and so memory) stays fp32, time drops ~5x.
    torch.set_float32_matmul_precision("high")
    memory = DeviceMemory(device)

    output = args.output
    (output / "configs").mkdir(parents=True, exist_ok=True)
    shapes = {run.shape.name: run.shape for run in runs}
    for name, shape in shapes.items():
        write_hf_config(shape, output / "configs" / f"{name}.json")
    # Counted on the meta device: no memory, and known even for rows that fail or are skipped.
    params = {name: module_parameters(Decoder(shape, device="meta")) for name, shape in shapes.items()}

    environment = describe_environment(device, args.dry_run)
    estimate_s = sum(estimated_run_s(run) for run in runs)
    environment.update(runs_planned=len(runs), estimated_grid_s=round(estimate_s), time_budget_s=args.time_budget_s)
    _write_json(output / "environment.json", environment)
    print(f"{environment['gpu_name']}, torch {environment['torch_version']}, CUDA {environment['cuda_version']}, "
          f"context {_gib(environment['cuda_context_bytes'])}; {len(runs)} runs, estimate {estimate_s:.0f} s, "
          f"budget {args.time_budget_s:g} s", flush=True)  # fmt: skip

    statuses: Counter[str] = Counter()
    with open(output / "measurements.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS, extrasaction="raise")
        writer.writeheader()
        for index, run in enumerate(runs, start=1):
            row = spec_columns(run, params[run.shape.name], environment)
            elapsed_s = time.monotonic() - SCRIPT_START_S
            if elapsed_s >= args.time_budget_s:
                row["status"] = "skipped"
            else:
                execute(run, index, args, device, memory, row)
            writer.writerow({column: _csv_value(row.get(column)) for column in CSV_COLUMNS})
            handle.flush()  # a kill after this line still leaves the row on disk
            os.fsync(handle.fileno())
            statuses[row["status"].split(":")[0]] += 1
            step_time = "-" if row.get("step_time_s") is None else f"{row['step_time_s']:.3f} s"
            print(f"[{index:3d}/{len(runs)} {time.monotonic() - SCRIPT_START_S:6.1f} s] {run.run_id}: "
                  f"{row['status']}, peak {_gib(row.get('max_memory_allocated_bytes'))}, step {step_time}",
                  flush=True)  # fmt: skip

    environment.update(finished=True, elapsed_s=round(time.monotonic() - SCRIPT_START_S, 1), statuses=dict(statuses))
    _write_json(output / "environment.json", environment)
    print(f"done in {environment['elapsed_s']} s: {dict(statuses)} -> {output / 'measurements.csv'}", flush=True)
    return 0


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def _write_json(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)  # never a half-written file if the run is killed


if __name__ == "__main__":
    sys.exit(main())
