"""``vramopt validate``: the cost model against every published run shipped with the project.

Each row of the report is one (source, quantity, sample) group: how many runs, the mean and
the largest absolute relative error of vramopt's prediction, and whether the runs were used
to fit a coefficient. ``sample`` is one of:

- ``in-sample``: the runs a coefficient was fitted on, at the catalog value;
- ``leave-one-out``: the same runs, each predicted with the value fitted on the others;
- ``out-of-sample``: runs no fit used (``vramopt/validation/calibration.py`` says which are).

Besides the per-run quantities, two derived ones: Narayanan et al. 2021 Table 2's ratio of
ZeRO-3's TFLOP/s per GPU to PTD-P's at the same GPU count (``narayanan_table2.py``), and the
SGLang/vLLM offline serving rows' output tokens/s (``serving.py``).

The data and the mapping of each run to a plan are ``vramopt/validation/`` (sources in the
CSV files). The library computes the report; the CLI only displays it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from vramopt.validation.calibration import fit
from vramopt.validation.korthikanti_table4 import table4_errors
from vramopt.validation.narayanan_table2 import table2_runs, zero3_slowdowns
from vramopt.validation.published import calibration_runs, korthikanti_runs
from vramopt.validation.serving import serving_predictions

QUANTITIES = {
    "iteration_s": "iteration time",
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "model_tflops_per_gpu": "model TFLOP/s per GPU",
    "achieved_tflops_per_gpu": "achieved TFLOP/s per GPU",
    "peak_memory_gib": "peak memory",
    "zero3_over_ptdp": "ZeRO-3 / PTD-P TFLOP/s per GPU",
    "serving_output_tokens_per_s": "output tokens/s (5,000-request run)",
    "compile_speedup": "torch.compile / eager tokens/s",
    "layer_ms": "layer forward + backward time",
    "schedule_speedup": "interleaved / 1F1B tokens/s",
    "async_tp_speedup": "async TP / plain TP tokens/s",
}

SPEEDUP_PAIRS = {
    "schedule_speedup": (("tt24_t5_405b_fsdp8_tp8_pp8_1f1b", "tt24_t5_405b_fsdp8_tp8_pp8_interleaved"),),
    "async_tp_speedup": (("tt24_t4_70b_fsdp32_tp8", "tt24_t4_70b_fsdp32_tp8_asynctp"),
                         ("tto_405b_tp8_fsdp16_fp8_128h100", "tto_405b_tp8_fsdp16_fp8_asynctp_128h100")),
}
"""Published pairs of runs that differ in one technique: (slower, faster) case ids."""

SOURCES = (
    ("n21_t1_", "Narayanan et al. 2021 Table 1 (A100)"),
    ("meg_readme_", "Megatron-LM README weak scaling (H100)"),
    ("k22_t5_", "Korthikanti et al. 2022 Table 5 (A100)"),
    ("k22_t4_", "Korthikanti et al. 2022 Table 4 (A100, one 22B layer)"),
    ("k22_s63_", "Korthikanti et al. 2022 section 6.3 (A100)"),
    ("tt24_", "torchtitan Llama 3.1 H100 benchmarks, Dec 2024"),
    ("tto_", "torchtitan docs/performance.md (H100, A100)"),
    ("n21_t2_zero3_", "Narayanan et al. 2021 Table 2 ZeRO-3 (A100)"),
    ("n21_t2_ptdp_", "Narayanan et al. 2021 Table 2 PTD-P (A100)"),
    ("n21_t2_ratio_", "Narayanan et al. 2021 Table 2 (A100)"),
    ("sglang", "SGLang 0.3 / vLLM 0.6 offline (ShareGPT)"),
    ("vllm", "SGLang 0.3 / vLLM 0.6 offline (ShareGPT)"),
)


FITTED_QUANTITIES = {
    "ampere": ("achieved TFLOP/s per GPU", "ampere large-GEMM fraction"),
    "hopper": ("model TFLOP/s per GPU", "hopper large-GEMM fraction"),
    "grand_teton": ("tokens/s per GPU", "Grand Teton H100 sustained rate"),
}
"""What each fitted coefficient's rows measure, and the coefficient's name (calibration.py)."""


@dataclass(frozen=True, slots=True)
class ValidationRow:
    source: str
    quantity: str
    sample: str
    cases: int
    mean_abs_error_pct: float
    max_abs_error_pct: float
    case_errors_pct: dict[str, float]

    def to_dict(self) -> dict:
        return asdict(self)


def source_of(case_id: str) -> str:
    for prefix, name in SOURCES:
        if case_id.startswith(prefix):
            return name
    return "other"


def _row(source: str, quantity: str, sample: str, errors: dict[str, float]) -> ValidationRow:
    values = np.abs(np.array(list(errors.values())))
    return ValidationRow(
        source=source, quantity=quantity, sample=sample, cases=len(errors),
        mean_abs_error_pct=round(float(values.mean()) * 100, 2), max_abs_error_pct=round(float(values.max()) * 100, 2),
        case_errors_pct={case: round(error * 100, 2) for case, error in errors.items()},
    )


def validation_report() -> list[ValidationRow]:
    """Every group of published runs with its errors (takes some seconds: the fits and
    leave-one-out refits re-evaluate their runs on a grid of coefficient values)."""
    rows = []
    fitted_cases = set()
    for generation in ("ampere", "hopper", "grand_teton"):
        result = fit(generation)
        fitted_cases.update(result.case_ids)
        source = source_of(result.case_ids[0])
        quantity, coefficient = FITTED_QUANTITIES[generation]
        rows.append(_row(source, quantity, f"in-sample ({coefficient} {result.catalog})",
                         dict(zip(result.case_ids, result.in_sample_errors))))
        rows.append(_row(source, quantity, "leave-one-out", dict(zip(result.case_ids, result.held_out_errors))))
    groups: dict[tuple[str, str], dict[str, float]] = {}
    table2 = table2_runs()
    for run in korthikanti_runs() + calibration_runs() + table2:
        if run.case_id in fitted_cases:
            continue
        groups.setdefault((source_of(run.case_id), QUANTITIES[run.metric]), {})[run.case_id] = run.relative_error()
    # The size of ZeRO-3's slowdown against PTD-P at the same GPU count (the issue's must-show).
    groups[(source_of("n21_t2_ratio_"), QUANTITIES["zero3_over_ptdp"])] = {
        case: predicted / published - 1.0 for case, (published, predicted) in zero3_slowdowns(table2).items()}
    # torch.compile's speed-up over eager on the same torchtitan plan (eager kernels vs fused).
    by_case = {run.case_id: run for run in calibration_runs()}
    groups[(source_of("tt24_"), QUANTITIES["compile_speedup"])] = {
        f"{case}_speedup": (by_case[case].predicted() / by_case[case[: -len("_compile")]].predicted())
        / (by_case[case].published / by_case[case[: -len("_compile")]].published) - 1.0
        for case in by_case if case.startswith("tt24_") and case.endswith("_compile") and case[: -len("_compile")] in by_case}
    # Table 5's 1F1B -> interleaved 1F1B and async TP's speed-ups on the same torchtitan plans.
    for quantity, pairs in SPEEDUP_PAIRS.items():
        groups[(source_of(pairs[0][0]), QUANTITIES[quantity])] = {
            f"{faster}_speedup": (by_case[faster].predicted() / by_case[slower].predicted())
            / (by_case[faster].published / by_case[slower].published) - 1.0
            for slower, faster in pairs if slower in by_case and faster in by_case}
    groups[(source_of("sglang"), QUANTITIES["serving_output_tokens_per_s"])] = {
        row.case_id: row.relative_error() for row in serving_predictions()}
    groups[(source_of("k22_t4_"), QUANTITIES["layer_ms"])] = table4_errors()
    rows += [_row(source, quantity, "out-of-sample", errors) for (source, quantity), errors in groups.items()]
    return rows
