#!/usr/bin/env python
"""Compare vramopt's per-GPU memory predictions with the rows measure.py wrote.

    python benchmarks/gpu_memory/compare.py --input DIR [--output docs/validation.md]
    python benchmarks/gpu_memory/compare.py --input DIR --suggest-calibration

DIR holds ``measurements.csv``, ``environment.json`` and ``configs/<shape>.json`` (what
measure.py writes). Each 'ok' training row is rebuilt as a vramopt plan on one GPU (no
ZeRO, no offload, global batch = micro-batch, no headroom) and every memory term vramopt
predicts is set beside the measured one; inference rows compare the KV cache only (vramopt
has no inference estimate yet). The markdown report says where the data comes from and
labels a checked-in SAMPLE as such. ``--suggest-calibration`` prints the framework reserve
and allocator fragmentation the data implies (and writes no report unless --output is
given). What each side of every term includes is written out in ``DEFINITIONS`` below and
in the report.

Standard library and vramopt only; any input problem is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import re
import statistics
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
try:
    import vramopt  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(REPO_ROOT))

from vramopt.costs.kv_cache import kv_cache_bytes_per_token  # noqa: E402
from vramopt.errors import VramoptError  # noqa: E402
from vramopt.estimate import estimate_training  # noqa: E402
from vramopt.hardware import all_gpus, load_gpu  # noqa: E402
from vramopt.models import load_model  # noqa: E402
from vramopt.types import GpuSpec, TrainingPlan, TrainingWorkload  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "docs" / "validation.md"
SAMPLE_LABEL = "SAMPLE, not a measurement"
GIB = 2**30

# The measure.py columns this script reads (the CSV may hold more).
REQUIRED_COLUMNS = (
    "run_id", "kind", "model_shape", "params_total", "seq_len", "micro_batch", "precision",
    "checkpointing", "attention_backend", "kv_cache_len", "status", "cuda_context_bytes",
    "max_memory_allocated_bytes", "max_memory_reserved_bytes", "weights_bytes", "gradients_bytes",
    "optimizer_bytes", "activations_peak_bytes", "kv_cache_bytes",
)  # fmt: skip

# Term -> (column title, what the measured side is, what the predicted side is).
DEFINITIONS = {
    "weights": (
        "weights",
        "`weights_bytes`: the model parameters' tensor sizes (bf16: 2 B, fp32: 4 B per parameter)",
        "`weights_bytes`: parameters x bytes of the precision",
    ),
    "gradients": (
        "gradients",
        "`gradients_bytes`: the model's `.grad` tensors after the measured backward, kept allocated "
        "between steps; the bf16 layout's fp32 master gradients (4 B per parameter, alive only during "
        "the update) are not in it",
        "`gradients_bytes`: parameters x bytes of the precision",
    ),
    "optimizer": (
        "optimizer",
        "`optimizer_bytes`: AdamW m and v (fp32) and its one-element `step` tensors, plus for bf16 "
        "the fp32 master weights (12 B per parameter; fp32: 8 B)",
        "`optimizer_bytes`: parameters x K, K = 12 (bf16, fp32 masters + m + v) or 8 (fp32)",
    ),
    "activations": (
        "activations + logits",
        "`activations_peak_bytes`: peak allocated during forward + backward minus allocated just "
        "before the forward: the saved activations, the bf16 logits, their fp32 copy, the "
        "log-softmax output and its gradient, backward temporaries and, under checkpointing, the "
        "recomputed segment, whichever coexist at the peak",
        "`activations_bytes` (Korthikanti et al. 2022 per layer, dropout masks included, x2 in fp32; "
        "`every:k`: the stored layer inputs plus one recomputed segment) + `logits_bytes` "
        "(one fp32 copy of the logits, 4 x s x b x V)",
    ),
    "reserve": (
        "reserve",
        "`cuda_context_bytes` (device memory outside PyTorch's allocator: context, kernels, "
        "cuBLAS/cuDNN handles) + `max_memory_reserved_bytes` - `max_memory_allocated_bytes` (the "
        "allocator's cached, fragmented memory; the two peaks may fall at different moments)",
        "`reserve_bytes`: the catalog's framework reserve of the GPU's node (context, NCCL buffers, "
        "fragmentation; one GPU has no NCCL communicator)",
    ),
    "peak": (
        "total vs peak",
        "`max_memory_reserved_bytes` + `cuda_context_bytes`: what nvidia-smi shows at the peak, "
        "less other processes",
        "`total_bytes`: every term above, reserve included",
    ),
    "allocated": (
        "total - reserve vs allocated",
        "`max_memory_allocated_bytes`: peak over forward + backward and the AdamW update; includes the "
        "token ids and labels and, with bf16, the transient fp32 master gradients of the update",
        "`total_bytes` - `reserve_bytes`",
    ),
}
TERMS = tuple(DEFINITIONS)
PRECISION_ORDER = ("bf16", "fp32")
BACKEND_ORDER = ("flash", "efficient", "math")


class InputProblem(Exception):
    """The input folder cannot be compared; the message is the one line printed."""


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class Term:
    measured: float | None
    predicted: float | None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured; positive means vramopt over-predicts."""
        return relative_error(self.predicted, self.measured)


@dataclass(frozen=True, slots=True)
class TrainingComparison:
    row: dict[str, str]
    terms: dict[str, Term]

    @property
    def technique(self) -> tuple[str, str, str]:
        return (self.row["precision"], self.row["checkpointing"], self.row["attention_backend"])


@dataclass(frozen=True, slots=True)
class Report:
    input_label: str
    environment: dict[str, Any]
    sample: bool
    gpu: GpuSpec
    training: list[TrainingComparison]
    inference: list[tuple[dict[str, str], Term]]
    not_compared: list[tuple[str, str]] = field(default_factory=list)
    """(run_id, status or the reason vramopt refused it)."""


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None:
        return None
    if measured == 0:
        return 0.0 if predicted == 0 else None
    return (predicted - measured) / measured


def _number(row: dict[str, str], column: str) -> int | None:
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        return int(float(text))
    except ValueError:
        raise InputProblem(f"{row.get('run_id', '?')}: column {column} is not a number: {text!r}") from None


def _add(*values: float | None) -> float | None:
    return None if any(value is None for value in values) else sum(values)  # type: ignore[arg-type]


def _subtract(minuend: float | None, subtrahend: float | None) -> float | None:
    return None if minuend is None or subtrahend is None else minuend - subtrahend


# ----------------------------------------------------------------------------- input


def read_input(folder: Path) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """The CSV rows and environment.json; every problem becomes an InputProblem."""
    csv_path, environment_path = folder / "measurements.csv", folder / "environment.json"
    for path in (csv_path, environment_path):
        if not path.is_file():
            raise InputProblem(f"{path} not found (run measure.py --output {folder} first)")
    try:
        environment = json.loads(environment_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InputProblem(f"{environment_path}: not JSON ({error})") from None
    with open(csv_path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [column for column in REQUIRED_COLUMNS if column not in (reader.fieldnames or ())]
        if missing:
            raise InputProblem(f"{csv_path} lacks column(s): {', '.join(missing)}")
        rows = list(reader)
    if not rows:
        raise InputProblem(f"{csv_path} has no rows")
    return rows, environment


def is_sample(environment: dict[str, Any], rows: list[dict[str, str]]) -> bool:
    return environment.get("sample") is True or any(row.get("sample_note") for row in rows)


def config_path(folder: Path, shape: str) -> Path:
    path = folder / "configs" / f"{shape}.json"
    if not path.is_file():
        raise InputProblem(f"{path} not found (measure.py writes one config per shape)")
    return path


def _tokens(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return set(words) | {first + second for first, second in zip(words, words[1:])}


def resolve_gpu(gpu_name: str, override: str | None) -> GpuSpec:
    """The catalog GPU for nvidia's device name ('NVIDIA H200' -> h200), or --gpu."""
    if override:
        try:
            return load_gpu(override)
        except VramoptError as error:
            raise InputProblem(f"--gpu: {error}") from None
    words = _tokens(gpu_name or "")
    scored = []
    for gpu in all_gpus():
        family, *qualifiers = gpu.name.split("-")
        if family in words:
            scored.append((sum(1 if qualifier in words else -1 for qualifier in qualifiers), gpu))
    best = max((score for score, _ in scored), default=None)
    winners = [gpu for score, gpu in scored if score == best]
    if len(winners) != 1:
        known = ", ".join(gpu.name for gpu in all_gpus())
        raise InputProblem(f"cannot match GPU {gpu_name!r} to one catalog GPU; pass --gpu (one of {known})")
    return winners[0]


# ----------------------------------------------------------------------------- vramopt side


@functools.lru_cache(maxsize=None)
def _model(path: str):
    return load_model(path)


def predict_training(row: dict[str, str], config: Path, gpu: GpuSpec) -> dict[str, Any]:
    """vramopt's memory dict for the single-GPU plan the row ran."""
    micro_batch = _number(row, "micro_batch")
    workload = TrainingWorkload(
        model=str(config), seq_len=_number(row, "seq_len"), global_batch=micro_batch, headroom_fraction=0.0
    )
    plan = TrainingPlan(
        gpu=gpu.name,
        gpus=1,
        precision=row["precision"],
        grad_comm_precision=row["precision"],
        checkpointing=row["checkpointing"],
        flash_attention=row["attention_backend"] != "math",  # flash and efficient keep no s^2 scores
        micro_batch=micro_batch,
        zero_stage=0,
        offload="none",
    )
    return estimate_training(workload, plan).to_dict()["memory"]


def measured_terms(row: dict[str, str]) -> dict[str, float | None]:
    context = _number(row, "cuda_context_bytes")
    allocated = _number(row, "max_memory_allocated_bytes")
    reserved = _number(row, "max_memory_reserved_bytes")
    return {
        "weights": _number(row, "weights_bytes"),
        "gradients": _number(row, "gradients_bytes"),
        "optimizer": _number(row, "optimizer_bytes"),
        "activations": _number(row, "activations_peak_bytes"),
        "reserve": _add(context, _subtract(reserved, allocated)),
        "peak": _add(reserved, context),
        "allocated": allocated,
    }


def predicted_terms(memory: dict[str, Any]) -> dict[str, float]:
    return {
        "weights": memory["weights_bytes"],
        "gradients": memory["gradients_bytes"],
        "optimizer": memory["optimizer_bytes"],
        "activations": memory["activations_bytes"] + memory["logits_bytes"],
        "reserve": memory["reserve_bytes"],
        "peak": memory["total_bytes"],
        "allocated": memory["total_bytes"] - memory["reserve_bytes"],
    }


def compare_training(row: dict[str, str], config: Path, gpu: GpuSpec) -> TrainingComparison:
    measured, predicted = measured_terms(row), predicted_terms(predict_training(row, config, gpu))
    return TrainingComparison(row, {term: Term(measured[term], predicted[term]) for term in TERMS})


def compare_kv_cache(row: dict[str, str], config: Path) -> Term:
    """Measured KV buffers vs vramopt's per-token bf16 KV bytes x positions x sequences."""
    per_token = kv_cache_bytes_per_token(_model(str(config)), "bf16")
    predicted = per_token * _number(row, "kv_cache_len") * _number(row, "micro_batch")
    return Term(_number(row, "kv_cache_bytes"), predicted)


def build_report(folder: Path, gpu_override: str | None) -> Report:
    rows, environment = read_input(folder)
    gpu = resolve_gpu(str(environment.get("gpu_name", "")), gpu_override)
    training, inference, not_compared = [], [], []
    for row in rows:
        if row["status"] != "ok":
            not_compared.append((row["run_id"], row["status"]))
            continue
        config = config_path(folder, row["model_shape"])
        try:
            if row["kind"] == "train":
                training.append(compare_training(row, config, gpu))
            else:
                inference.append((row, compare_kv_cache(row, config)))
        except VramoptError as error:
            not_compared.append((row["run_id"], f"vramopt refused it: {error}"))
    return Report(_label(folder), environment, is_sample(environment, rows), gpu, training, inference, not_compared)


def _label(folder: Path) -> str:
    resolved = folder.resolve()
    try:
        return str(resolved.relative_to(REPO_ROOT))
    except ValueError:
        return str(folder)


# ----------------------------------------------------------------------------- calibration


def suggest_calibration(training: list[TrainingComparison]) -> dict[str, Any]:
    """The reserve and fragmentation the measured rows imply (medians over the runs)."""
    implied, direct, fragmentation = [], [], []
    for comparison in training:
        terms, row = comparison.terms, comparison.row
        peak, allocated = terms["peak"].measured, terms["allocated"].measured
        if peak is not None:
            implied.append(peak - terms["allocated"].predicted)
        if terms["reserve"].measured is not None:
            direct.append(terms["reserve"].measured)
        reserved = _number(row, "max_memory_reserved_bytes")
        if reserved and allocated:
            fragmentation.append(reserved / allocated)
    return {
        "runs": len(training),
        "reserve_from_totals_bytes": _median(implied),
        "reserve_measured_bytes": _median(direct),
        "cuda_context_bytes": _median(_number(c.row, "cuda_context_bytes") for c in training),
        "fragmentation_median": _median(fragmentation),
        "fragmentation_max": max(fragmentation, default=None),
    }


def _median(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def calibration_lines(calibration: dict[str, Any], gpu: GpuSpec) -> list[str]:
    def gib(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f} bytes ({value / GIB:.3f} GiB)"

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f} (+{value - 1:.1%})"

    return [
        f"ok training runs: {calibration['runs']} (the values are medians over them)",
        f"framework reserve implied by the totals, measured peak - predicted (total - reserve): "
        f"{gib(calibration['reserve_from_totals_bytes'])}",
        f"framework reserve measured, context + reserved - allocated: {gib(calibration['reserve_measured_bytes'])}",
        f"of which CUDA context: {gib(calibration['cuda_context_bytes'])}",
        f"fragmentation, max_memory_reserved / max_memory_allocated: median {ratio(calibration['fragmentation_median'])}, "
        f"max {ratio(calibration['fragmentation_max'])}",
        f"the catalog's reserve for {gpu.name} now: {gib(float(gpu.node.framework_reserve_bytes))}",
    ]


# ----------------------------------------------------------------------------- markdown


def _unit(value: float) -> tuple[float, str, int]:
    magnitude = abs(value)
    if magnitude >= GIB:
        return GIB, "GiB", 2
    if magnitude >= 2**20:
        return 2**20, "MiB", 1
    return 2**10, "KiB", 1


def format_error(error: float | None) -> str:
    return "-" if error is None else f"{error:+.1%}"


def format_term(term: Term) -> str:
    """'measured / predicted unit (error)', both sides in the unit of the larger."""
    present = [value for value in (term.measured, term.predicted) if value is not None]
    if not present:
        return "-"
    scale, unit, digits = _unit(max(present, key=abs))

    def show(value: float | None) -> str:
        return "-" if value is None else f"{value / scale:,.{digits}f}"

    return f"{show(term.measured)} / {show(term.predicted)} {unit} ({format_error(term.error)})"


def technique_label(technique: tuple[str, str, str]) -> str:
    precision, checkpointing, backend = technique
    return f"{precision}, checkpointing {checkpointing}, {backend} attention"


def _technique_order(technique: tuple[str, str, str]) -> tuple[Any, ...]:
    precision, checkpointing, backend = technique
    every = checkpointing.removeprefix("every:")
    policy = {"none": (0, 0), "selective": (1, 0)}.get(checkpointing, (2, int(every) if every.isdigit() else 0))
    return (
        PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else 9, policy,
        BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else 9, backend,
    )  # fmt: skip


def by_technique(training: list[TrainingComparison]) -> dict[tuple[str, str, str], list[TrainingComparison]]:
    groups: dict[tuple[str, str, str], list[TrainingComparison]] = {}
    for comparison in training:
        groups.setdefault(comparison.technique, []).append(comparison)
    return {key: groups[key] for key in sorted(groups, key=_technique_order)}


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _errors(comparisons: list[TrainingComparison], term: str) -> list[float]:
    return [abs(error) for c in comparisons if (error := c.terms[term].error) is not None]


def _mean_max(errors: list[float]) -> list[str]:
    if not errors:
        return ["-", "-"]
    return [f"{statistics.mean(errors):.1%}", f"{max(errors):.1%}"]


def header_section(report: Report) -> list[str]:
    lines = ["# Validation: vramopt's predicted vs measured GPU memory", ""]
    if report.sample:
        lines += [
            f"> **{SAMPLE_LABEL}.** Every \"measured\" GPU number on this page is SYNTHETIC: the "
            "checked-in sample of `benchmarks/gpu_memory/sample/` (tiny CPU dry-run shapes, GPU "
            "columns filled by a documented rule from vramopt's own formulas plus a fixed 7% and a "
            "1.5 GiB context). It only exercises the comparison code. No GPU was measured; the "
            "errors below say nothing about vramopt's accuracy.",
            "",
        ]
    return lines + [
        f"Generated by `python benchmarks/gpu_memory/compare.py --input {report.input_label}` from the "
        "rows `benchmarks/gpu_memory/measure.py` wrote (columns: `benchmarks/gpu_memory/README.md`).",
        "",
    ]


def provenance_section(report: Report) -> list[str]:
    environment = report.environment
    statuses = Counter(status.split(":")[0] for _, status in report.not_compared)
    context = environment.get("cuda_context_bytes")
    data = f"**{SAMPLE_LABEL}** (synthetic)" if report.sample else "measurement"
    if environment.get("dry_run") and not report.sample:
        data = "CPU dry run: no GPU memory was measured"
    rows = [
        ["data", f"{data}, `{report.input_label}`"],
        ["GPU", str(environment.get("gpu_name", "-"))],
        ["driver", str(environment.get("driver_version") or "-")],
        ["torch", str(environment.get("torch_version") or "-")],
        ["CUDA", str(environment.get("cuda_version") or "-")],
        ["date (UTC)", str(environment.get("date_utc") or "-")],
        ["CUDA context", "-" if context is None else f"{context:,} bytes ({context / GIB:.2f} GiB)"],
        ["compared", f"{_runs(len(report.training))} of training, {_runs(len(report.inference))} of inference"],
        ["not compared", ", ".join(f"{count} {status}" for status, count in sorted(statuses.items())) or "none"],
        ["vramopt GPU", f"`{report.gpu.name}` ({report.gpu.display_name}), framework reserve "
                        f"{report.gpu.node.framework_reserve_bytes / GIB:g} GiB"],
    ]  # fmt: skip
    return ["## Provenance", "", *_table(["", ""], rows), ""]


def _runs(count: int) -> str:
    return f"{count} run" + ("" if count == 1 else "s")


def definitions_section() -> list[str]:
    rows = [[title, measured, predicted] for title, measured, predicted in DEFINITIONS.values()]
    return [
        "## What is compared",
        "",
        "Each 'ok' training row is rebuilt in vramopt as `TrainingWorkload(model=<configs/shape.json>, "
        "seq_len, global_batch=micro_batch, headroom_fraction=0)` and `TrainingPlan(gpus=1, precision, "
        "grad_comm_precision=precision, checkpointing, flash_attention=<backend is flash or efficient>, "
        "micro_batch, zero_stage=0, offload='none')`, and `estimate_training(...).to_dict()['memory']` "
        "is read. Relative error = (predicted - measured) / measured: positive means vramopt "
        "over-predicts. Bytes are shown in KiB/MiB/GiB (2^10, 2^20, 2^30).",
        "",
        *_table(["term", "measured (CSV columns)", "predicted (vramopt memory keys)"], rows),
        "",
    ]


def technique_sections(report: Report) -> list[str]:
    lines = ["## Training, per technique", "", "Each cell: measured / predicted (relative error).", ""]
    for technique, comparisons in by_technique(report.training).items():
        rows = [[f"`{c.row['run_id']}`", *(format_term(c.terms[term]) for term in TERMS)] for c in comparisons]
        lines += [f"### {technique_label(technique)}", "", *_table(["run", *(DEFINITIONS[t][0] for t in TERMS)], rows), ""]
    return lines


def inference_section(report: Report) -> list[str]:
    lines = [
        "## Inference: KV cache only",
        "",
        "vramopt has no inference memory estimate yet, so only the preallocated KV cache is "
        "compared: measured `kv_cache_bytes` (the contiguous K and V buffers) vs "
        "`kv_cache_bytes_per_token(model, 'bf16') x kv_cache_len x micro_batch`.",
        "",
    ]
    if not report.inference:
        return lines + ["No 'ok' inference rows.", ""]
    rows = [[f"`{row['run_id']}`", row["kv_cache_len"], row["micro_batch"], format_term(term)] for row, term in report.inference]
    return lines + _table(["run", "cache positions", "sequences", "KV cache"], rows) + [""]


def summary_section(report: Report) -> list[str]:
    groups = by_technique(report.training)
    header = ["technique", "runs", "peak: mean abs error", "peak: max", "allocated: mean abs error", "allocated: max"]
    rows = [
        [technique_label(key), str(len(group)), *_mean_max(_errors(group, "peak")), *_mean_max(_errors(group, "allocated"))]
        for key, group in groups.items()
    ]
    rows.append(["**all**", str(len(report.training)), *_mean_max(_errors(report.training, "peak")),
                 *_mean_max(_errors(report.training, "allocated"))])  # fmt: skip
    per_term = [[DEFINITIONS[term][0], *_mean_max(_errors(report.training, term))] for term in TERMS]
    return [
        "## Summary",
        "",
        "Absolute relative error of vramopt's total against the measured peak (reserved + context) "
        "and, without the reserve, against the peak allocated:",
        "",
        *_table(header, rows),
        "",
        "Per term, over all training runs:",
        "",
        *_table(["term", "mean abs error", "max abs error"], per_term),
        "",
    ]


def changes_section(report: Report) -> list[str]:
    calibration = calibration_lines(suggest_calibration(report.training), report.gpu)
    caveat = f" ({SAMPLE_LABEL}: synthetic input, do not apply)" if report.sample else " (not applied)"
    return [
        "## What changed in the cost model as a result",
        "",
        "Nothing yet: the measurement is pending; once a real CSV exists under "
        "`benchmarks/gpu_memory/results/`, re-run compare.py and calibrate the framework reserve "
        "and fragmentation from it (`compare.py --input <dir> --suggest-calibration`).",
        "",
        f"What this input implies{caveat}, {calibration[0]}:",
        "",
        *[f"- {line}" for line in calibration[1:]],
        "",
        "Not compared: " + ("none." if not report.not_compared else ""),
        *[f"- `{run_id}`: {status}" for run_id, status in report.not_compared],
        "",
    ]


def render(report: Report) -> str:
    sections = (
        header_section(report), provenance_section(report), definitions_section(),
        technique_sections(report), inference_section(report), summary_section(report), changes_section(report),
    )  # fmt: skip
    return "\n".join(line for section in sections for line in section).rstrip() + "\n"


# ----------------------------------------------------------------------------- CLI


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, required=True, help="folder with measurements.csv, environment.json, configs/")
    parser.add_argument("--output", type=Path, help=f"markdown report (default {DEFAULT_OUTPUT.relative_to(REPO_ROOT)}, "
                                                    "none with --suggest-calibration alone)")  # fmt: skip
    parser.add_argument("--gpu", help="catalog GPU to predict for, when environment.json's gpu_name does not match one")
    parser.add_argument("--suggest-calibration", action="store_true", help="print the reserve and fragmentation the data implies")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    try:
        report = build_report(args.input, args.gpu)
    except InputProblem as error:
        print(f"compare.py: {error}", file=sys.stderr)
        return 2
    if args.suggest_calibration:
        if report.sample:
            print(f"{SAMPLE_LABEL}: these values come from synthetic input")
        print("\n".join(calibration_lines(suggest_calibration(report.training), report.gpu)))
    output = args.output if args.output is not None else (None if args.suggest_calibration else DEFAULT_OUTPUT)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(render(report), encoding="utf-8")
        print(f"compared {_runs(len(report.training))} of training, {_runs(len(report.inference))} of inference -> {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
