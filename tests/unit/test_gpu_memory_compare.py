"""benchmarks/gpu_memory/compare.py on the checked-in SAMPLE input (not a measurement).

compare.py needs only the standard library and vramopt, so this runs in CI (no torch, no
GPU). The sample's weight, gradient and optimizer sizes follow the 2 + 2 + 12 (bf16) and
4 + 4 + 8 (fp32) layouts exactly, so matching them checks how compare.py maps a CSV row onto
a vramopt plan; its GPU memory columns are synthetic (benchmarks/gpu_memory/sample/README.md).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPARE = REPO_ROOT / "benchmarks" / "gpu_memory" / "compare.py"
SAMPLE = REPO_ROOT / "benchmarks" / "gpu_memory" / "sample"
SAMPLE_LABEL = "SAMPLE, not a measurement"
TERM_CELL = re.compile(r"^(-|[\d,.]+) / [\d,.]+ (KiB|MiB|GiB) \(([+-]\d+\.\d)%\)$")


def run_compare(*arguments: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(COMPARE), *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def compare_module():
    """compare.py imported by path under a name no other test uses."""
    spec = importlib.util.spec_from_file_location("gpu_memory_compare", COMPARE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def sample_rows() -> list[dict[str, str]]:
    with open(SAMPLE / "measurements.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    output = tmp_path_factory.mktemp("validation") / "validation.md"
    result = run_compare("--input", str(SAMPLE), "--output", str(output))
    assert result.returncode == 0, result.stdout + result.stderr
    return output.read_text(encoding="utf-8")


def row_cells(markdown: str, run_id: str) -> list[str]:
    """The cells of the one table line of ``run_id`` (the run cell first)."""
    lines = [line for line in markdown.splitlines() if line.startswith(f"| `{run_id}` |")]
    assert len(lines) == 1, f"{run_id}: {len(lines)} table lines"
    return [cell.strip() for cell in lines[0].strip("|").split(" | ")]


def cell_error_percent(cell: str) -> float:
    match = TERM_CELL.match(cell)
    assert match, cell
    return float(match.group(3))


def test_the_sample_is_labelled_in_every_file(sample_rows: list[dict[str, str]]) -> None:
    assert (SAMPLE / "README.md").read_text(encoding="utf-8").startswith(f"# {SAMPLE_LABEL}")
    environment = json.loads((SAMPLE / "environment.json").read_text(encoding="utf-8"))
    assert environment["sample"] is True
    assert SAMPLE_LABEL in environment["sample_note"]
    assert {row["sample_note"] for row in sample_rows} == {SAMPLE_LABEL}
    assert 10 <= len(sample_rows) <= 20
    assert {row["kind"] for row in sample_rows} == {"train", "infer"}


def test_report_says_sample_at_the_top(report: str) -> None:
    top = "\n".join(report.splitlines()[:5])
    assert f"**{SAMPLE_LABEL}.**" in top
    assert f"| data | **{SAMPLE_LABEL}** (synthetic)" in report
    assert "## What changed in the cost model as a result" in report
    assert "Nothing yet: the measurement is pending" in report


def test_one_row_per_ok_training_run_with_error_columns(report: str, sample_rows: list[dict[str, str]]) -> None:
    header = "| run | weights | gradients | optimizer | activations + logits | reserve | total vs peak | total - reserve vs allocated |"
    assert header in report
    training = [row for row in sample_rows if row["kind"] == "train" and row["status"] == "ok"]
    assert len(training) >= 10
    for row in training:
        cells = row_cells(report, row["run_id"])
        assert len(cells) == 8, cells
        for cell in cells[1:]:
            cell_error_percent(cell)  # every term has measured, predicted and an error
    assert "| **all** | 15 |" in report
    for technique in ("bf16, checkpointing none, flash attention", "bf16, checkpointing selective, math attention",
                      "bf16, checkpointing every:1, flash attention", "fp32, checkpointing none, flash attention"):  # fmt: skip
        assert f"### {technique}" in report


def test_bf16_model_states_match_within_one_percent(
    report: str, sample_rows: list[dict[str, str]], compare_module
) -> None:
    bf16 = [row for row in sample_rows if row["kind"] == "train" and row["precision"] == "bf16"]
    assert bf16
    for row in bf16:
        cells = row_cells(report, row["run_id"])
        for cell in cells[1:4]:  # weights, gradients, optimizer
            assert abs(cell_error_percent(cell)) <= 1.0, (row["run_id"], cell)
    comparisons = compare_module.build_report(SAMPLE, None).training
    for comparison in comparisons:
        params = int(comparison.row["params_total"])
        layout = (2, 2, 12) if comparison.row["precision"] == "bf16" else (4, 4, 8)
        for term, per_parameter in zip(("weights", "gradients", "optimizer"), layout):
            assert comparison.terms[term].predicted == per_parameter * params
            assert abs(comparison.terms[term].error) < 0.01, (comparison.row["run_id"], term)


def test_inference_rows_compare_the_kv_cache(report: str, sample_rows: list[dict[str, str]]) -> None:
    section = report.split("## Inference: KV cache only", 1)[1].split("\n## ", 1)[0]
    assert "vramopt has no inference memory estimate yet" in section
    inference = [row for row in sample_rows if row["kind"] == "infer"]
    assert inference
    for row in inference:
        cells = row_cells(section, row["run_id"])
        assert cells[1:3] == [row["kv_cache_len"], row["micro_batch"]]
        assert cell_error_percent(cells[3]) == 0.0


def test_suggest_calibration_prints_reserve_and_fragmentation(tmp_path: Path) -> None:
    result = run_compare("--input", str(SAMPLE), "--suggest-calibration", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert SAMPLE_LABEL in result.stdout
    assert "framework reserve implied by the totals" in result.stdout
    # The sample's synthetic rule: 1.5 GiB context, reserved = 1.07 x allocated.
    assert "of which CUDA context: 1,610,612,736 bytes" in result.stdout
    assert "median 1.070" in result.stdout
    assert " -> " not in result.stdout  # --suggest-calibration alone writes no report


def test_a_missing_column_is_one_line_and_exit_2(tmp_path: Path, sample_rows: list[dict[str, str]]) -> None:
    folder = tmp_path / "broken"
    shutil.copytree(SAMPLE, folder)
    columns = [column for column in sample_rows[0] if column != "weights_bytes"]
    with open(folder / "measurements.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(sample_rows)
    output = tmp_path / "validation.md"
    result = run_compare("--input", str(folder), "--output", str(output))
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("compare.py: ") and "weights_bytes" in result.stderr
    assert not output.exists()


def test_device_names_map_to_catalog_gpus(compare_module) -> None:
    expected = {
        "NVIDIA H200": "h200",
        "NVIDIA H100 80GB HBM3": "h100",
        "NVIDIA H100 PCIe": "h100-pcie",
        "NVIDIA A100-SXM4-40GB": "a100-40gb",
        "NVIDIA A100-SXM4-80GB": "a100-80gb",
        "NVIDIA GeForce RTX 4090": "rtx4090",
    }
    for device_name, catalog_name in expected.items():
        assert compare_module.resolve_gpu(device_name, None).name == catalog_name
    assert compare_module.resolve_gpu("cpu (dry run)", "h200").name == "h200"
    with pytest.raises(compare_module.InputProblem, match="--gpu"):
        compare_module.resolve_gpu("cpu (dry run)", None)
