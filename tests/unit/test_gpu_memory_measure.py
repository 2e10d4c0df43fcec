"""The GPU memory benchmark script (benchmarks/gpu_memory/measure.py), tested by its dry run.

The dry run builds the same models and runs the same code paths on tiny shapes on the
CPU. Skipped when PyTorch is absent: CI does not install it, and the script is not part of
the vramopt package.
"""

from __future__ import annotations

import csv
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BENCHMARK_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_memory"
BENCHMARK_MODULES = ("measure", "attention_backends", "decoder_model", "gpu_environment", "run_grid", "training_state")

# The columns the comparison step reads, in this order (more may follow them).
REQUIRED_COLUMNS = (
    "run_id", "kind", "model_shape", "layers", "hidden_size", "heads", "kv_heads", "head_dim",
    "ffn_hidden_size", "vocab_size", "experts", "experts_per_token", "params_total", "seq_len",
    "micro_batch", "precision", "checkpointing", "attention_backend", "kv_cache_len", "status",
    "step_time_s", "cuda_context_bytes", "memory_after_init_allocated_bytes",
    "max_memory_allocated_bytes", "max_memory_reserved_bytes", "weights_bytes", "gradients_bytes",
    "optimizer_bytes", "activations_peak_bytes", "kv_cache_bytes", "gpu_name", "driver_version",
    "torch_version", "cuda_version",
)  # fmt: skip


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Run the script as CI and a person would: a subprocess writing into a fresh folder."""
    output = tmp_path_factory.mktemp("gpu_memory")
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_DIR / "measure.py"), "--dry-run", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return output, result.stdout


@pytest.fixture(scope="module")
def rows(dry_run: tuple[Path, str]) -> list[dict[str, str]]:
    with open(dry_run[0] / "measurements.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture()
def benchmark_modules(monkeypatch: pytest.MonkeyPatch):
    """The benchmark folder's modules, imported by path and forgotten afterwards."""
    monkeypatch.syspath_prepend(str(BENCHMARK_DIR))
    for name in BENCHMARK_MODULES:
        sys.modules.pop(name, None)
    modules = {name: importlib.import_module(name) for name in BENCHMARK_MODULES}
    yield modules
    for name in BENCHMARK_MODULES:
        sys.modules.pop(name, None)


def test_csv_header_is_fixed_and_every_run_succeeds(dry_run: tuple[Path, str], rows: list[dict[str, str]]) -> None:
    output, stdout = dry_run
    with open(output / "measurements.csv", encoding="utf-8") as handle:
        header = handle.readline().strip().split(",")
    assert tuple(header[: len(REQUIRED_COLUMNS)]) == REQUIRED_COLUMNS
    assert len(rows) >= 10
    assert [row["run_id"] for row in rows if row["status"] != "ok"] == []
    assert "done in" in stdout


def test_dry_run_covers_every_technique(rows: list[dict[str, str]]) -> None:
    assert {row["kind"] for row in rows} == {"train", "infer"}
    assert {row["precision"] for row in rows} == {"fp32", "bf16"}
    assert {"none", "every:1", "every:2", "selective"} <= {row["checkpointing"] for row in rows}
    assert {row["attention_backend_requested"] for row in rows} == {"flash", "math"}
    assert {"0", "4"} <= {row["experts"] for row in rows}
    assert "native" in {row["gqa_kv_mode"] for row in rows}


def test_state_bytes_follow_each_precision_layout(rows: list[dict[str, str]]) -> None:
    """bf16 with fp32 masters: 2 + 2 + 12 bytes per parameter; fp32: 4 + 4 + 8."""
    layouts = {"bf16": (2, 2, 12), "fp32": (4, 4, 8)}
    for row in rows:
        if row["kind"] != "train":
            continue
        params = int(row["params_total"])
        weight, gradient, optimizer = layouts[row["precision"]]
        assert int(row["weights_bytes"]) == weight * params, row["run_id"]
        assert int(row["gradients_bytes"]) == gradient * params, row["run_id"]
        # Plus AdamW's one-element 'step' tensor per parameter tensor.
        assert 0 <= int(row["optimizer_bytes"]) - optimizer * params <= 8 * 1000, row["run_id"]
        assert float(row["step_time_s"]) > 0


def test_kv_cache_bytes_are_the_preallocated_buffers(rows: list[dict[str, str]]) -> None:
    for row in rows:
        if row["kind"] != "infer":
            continue
        expected = (
            2 * int(row["layers"]) * int(row["micro_batch"]) * int(row["kv_cache_len"])
            * int(row["kv_heads"]) * int(row["head_dim"]) * 2
        )  # fmt: skip
        assert int(row["kv_cache_bytes"]) == expected, row["run_id"]
        assert int(row["weights_bytes"]) == 2 * int(row["params_total"])


def test_configs_and_environment_are_json(dry_run: tuple[Path, str], rows: list[dict[str, str]]) -> None:
    output = dry_run[0]
    for name in {row["model_shape"] for row in rows}:
        config = json.loads((output / "configs" / f"{name}.json").read_text(encoding="utf-8"))
        row = next(row for row in rows if row["model_shape"] == name)
        assert config["num_hidden_layers"] == int(row["layers"])
        assert config["num_key_value_heads"] == int(row["kv_heads"])
        assert config["tie_word_embeddings"] is False
        if int(row["experts"]):
            assert config["model_type"] == "mixtral"
            assert config["num_local_experts"] == int(row["experts"])
            assert config["num_experts_per_tok"] == int(row["experts_per_token"])
        else:
            assert config["model_type"] == "llama"
            assert "num_local_experts" not in config
    environment = json.loads((output / "environment.json").read_text(encoding="utf-8"))
    assert environment["finished"] is True
    assert environment["dry_run"] is True
    assert environment["runs_planned"] == len(rows)


def test_module_parameters_match_a_closed_form_count(benchmark_modules) -> None:
    decoder_model = benchmark_modules["decoder_model"]
    hidden, heads, kv_heads, head_dim, ffn, vocab, layers = 32, 4, 2, 8, 48, 100, 3
    dense = decoder_model.ModelShape(
        name="count-dense", layers=layers, hidden_size=hidden, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, ffn_hidden_size=ffn, vocab_size=vocab,
    )  # fmt: skip
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    layer = attention + 2 * hidden + 3 * hidden * ffn
    expected = 2 * vocab * hidden + hidden + layers * layer
    assert expected == 2 * 100 * 32 + 32 + 3 * (3072 + 64 + 4608)  # 29,664
    counted = decoder_model.module_parameters(decoder_model.Decoder(dense))
    assert counted == {"total": expected, "active": expected}

    moe = decoder_model.ModelShape(
        name="count-moe", layers=layers, hidden_size=hidden, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, ffn_hidden_size=ffn, vocab_size=vocab, experts=4, experts_per_token=2,
    )  # fmt: skip
    router = hidden * 4
    moe_total = 2 * vocab * hidden + hidden + layers * (attention + 2 * hidden + router + 4 * 3 * hidden * ffn)
    moe_active = moe_total - layers * 2 * 3 * hidden * ffn
    assert decoder_model.module_parameters(decoder_model.Decoder(moe)) == {"total": moe_total, "active": moe_active}
    assert decoder_model.closed_form_parameters(moe) == {"total": moe_total, "active": moe_active}


def test_grid_is_sized_for_the_time_budget(benchmark_modules) -> None:
    run_grid = benchmark_modules["run_grid"]
    runs = run_grid.build_grid(run_grid.GPU_PLANS)
    assert 60 <= len(runs) <= 120
    assert len({run.run_id for run in runs}) == len(runs)
    assert sum(run_grid.estimated_run_s(run) for run in runs) < 420
    # Baselines and single-technique points come first, so a cut-off loses the sweeps.
    assert [run.tier for run in runs] == sorted(run.tier for run in runs)


def test_failures_and_the_budget_become_rows(
    benchmark_modules, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measure = benchmark_modules["measure"]

    def out_of_memory(run, device, memory, row):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def broken(run, device, memory, row):
        raise ValueError("first line\nsecond line")

    monkeypatch.setattr(measure, "measure_training", out_of_memory)
    monkeypatch.setattr(measure, "measure_inference", broken)
    arguments = ["--dry-run", "--only", "tiny-moe", "--run-timeout-s", "0", "--output"]
    assert measure.main([*arguments, str(tmp_path / "failing")]) == 0
    with open(tmp_path / "failing" / "measurements.csv", newline="", encoding="utf-8") as handle:
        statuses = {row["kind"]: row["status"] for row in csv.DictReader(handle)}
    assert statuses == {"train": "oom", "infer": "error: ValueError: first line"}

    assert measure.main([*arguments, str(tmp_path / "late"), "--time-budget-s", "0"]) == 0
    with open(tmp_path / "late" / "measurements.csv", newline="", encoding="utf-8") as handle:
        assert {row["status"] for row in csv.DictReader(handle)} == {"skipped"}
