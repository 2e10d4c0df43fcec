"""`vramopt sweep` (issue 17 item 4): grid validation, cell order, rows, resume, interruption,
the progress bar and bad input."""

from __future__ import annotations

import csv
import io
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_runner import invoke
from vramopt.api import SolveRequest, solve
from vramopt.errors import InputError
from vramopt.sweep import COLUMNS, Cell, SweepGrid, cells, run_sweep, solve_cell
from vramopt.sweep_files import HEADER_LINE, read_grid, row_line
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

REPOSITORY = Path(__file__).resolve().parents[2]
SMALL_AXES = ["--model", "8b", "--model", "70b", "--workload", "train", "--workload", "infer",
              "--gpu", "h100", "--max-gpus", "1", "--max-gpus", "8"]
"""8 cells, each solved in well under a second."""


def run_cli(args: list[str], **options) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", "from vramopt.cli import main; main()", *args],
                          env=environment, capture_output=True, text=True, timeout=300, **options)


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory) -> str:
    """The CSV of an uninterrupted run of SMALL_AXES (in this process, one worker)."""
    path = tmp_path_factory.mktemp("sweep") / "full.csv"
    result = invoke(["sweep", *SMALL_AXES, "--workers", "1", "--output", str(path)])
    assert result.exit_code == 0, result.stderr
    return path.read_text()


# ---------------------------------------------------------------------------------------
# The grid


def test_grid_names_are_the_catalog_spellings_and_the_order_is_the_product_in_axis_order():
    grid = SweepGrid(models=("70b", "llama-3.1-8b"), gpus=("H100",), workloads=("infer", "train"), max_gpus=(8, 1),
                     seq_lens=(0, 2048))
    assert grid.models == ("llama-3.1-70b", "llama-3.1-8b") and grid.gpus == ("h100",)
    keys = [cell.key for cell in cells(grid)]
    assert len(keys) == grid.size == 16
    # models outermost, then workloads, gpus, max_gpus, seq_lens; 0 = the workload's default
    assert keys[:5] == [
        ("llama-3.1-70b", "infer", "h100", "8", "8192", "0.1"),
        ("llama-3.1-70b", "infer", "h100", "8", "2048", "0.1"),
        ("llama-3.1-70b", "infer", "h100", "1", "8192", "0.1"),
        ("llama-3.1-70b", "infer", "h100", "1", "2048", "0.1"),
        ("llama-3.1-70b", "train", "h100", "8", "4096", "0.1"),
    ]
    assert keys[-1] == ("llama-3.1-8b", "train", "h100", "1", "2048", "0.1")
    # the default length stops at the model's context (OPT-13B: 2,048 tokens)
    short = SweepGrid(models=("opt-13b",), gpus=("h100",), workloads=("train", "infer"))
    assert [cell.seq_len for cell in cells(short)] == [2048, 2048]


@pytest.mark.parametrize(("axes", "message"), [
    ({"gpus": ()}, "sweep axis gpus is empty"),
    ({"models": ()}, "sweep axis models is empty"),
    ({"max_gpus": ()}, "sweep axis max_gpus is empty"),
    ({"gpus": ("h10",)}, "sweep axis gpus: unknown GPU 'h10'; did you mean"),
    ({"models": ("lama-3.1-8b",)}, "sweep axis models: unknown model 'lama-3.1-8b'; did you mean llama-3.1-8b"),
    ({"workloads": ("serve",)}, "sweep axis workloads: 'serve' is not one of train, finetune, lora, qlora, infer"),
    ({"models": ("8b", "llama-3.1-8b")}, "sweep axis models lists llama-3.1-8b twice"),
    ({"max_gpus": (0,)}, "sweep axis max_gpus: 0 is not an integer from 1"),
    ({"seq_lens": (-4,)}, "sweep axis seq_lens: -4 is not an integer from 0"),
])
def test_a_bad_grid_is_an_input_error_naming_the_axis_and_the_value(axes, message):
    values = {"models": ("8b",), "gpus": ("h100",), **axes}
    with pytest.raises(InputError) as raised:
        SweepGrid(**values)
    assert str(raised.value).startswith(message), str(raised.value)


def test_a_toml_and_a_csv_grid_file_give_the_grid_of_the_flags(tmp_path):
    toml_file = tmp_path / "grid.toml"
    toml_file.write_text('models = ["8b", "70b"]\nworkloads = ["train", "infer"]\ngpus = ["h100"]\nmax_gpus = [1, 8]\n')
    csv_file = tmp_path / "grid.csv"
    csv_file.write_text("models,workloads,gpus,max_gpus\n8b,train,h100,1\n70b,infer,,8\n")
    expected = SweepGrid(models=("8b", "70b"), workloads=("train", "infer"), gpus=("h100",), max_gpus=(1, 8))
    assert read_grid(str(toml_file)) == expected
    assert read_grid(str(csv_file)) == expected


# ---------------------------------------------------------------------------------------
# Rows


def test_a_feasible_row_holds_the_solve_of_its_cell():
    row = solve_cell(Cell("llama-3.1-70b", "train", "h100", 8, 4096))
    data = solve(SolveRequest(TrainingWorkload(model="70b"), SearchSpace(gpus=("h100",), max_gpus=8, workers=1))).to_dict()
    assert list(row) == list(COLUMNS)
    assert row["feasible"] is True and row["status"] == "optimal"
    assert (row["gpus"], row["tensor_parallel"], row["pipeline_parallel"], row["data_parallel"], row["zero_stage"]) == (
        data["plan"]["gpus"], data["plan"]["tensor_parallel"], data["plan"]["pipeline_parallel"],
        data["plan"]["data_parallel"], data["plan"]["zero_stage"])
    assert row["tokens_per_s"] == data["throughput"]["tokens_per_s"]
    assert row["tokens_per_s_per_gpu"] == pytest.approx(data["throughput"]["tokens_per_s"] / data["plan"]["gpus"])
    assert row["memory_per_gpu_bytes"] == data["memory"]["total_bytes"] <= row["capacity_bytes"] * 0.9
    assert row["quantization"] is None and row["reason"] is None


def test_an_infeasible_row_carries_the_binding_reason_and_an_invalid_cell_is_a_row_too():
    row = solve_cell(Cell("llama-3.1-405b", "infer", "h100", 1, 8192))
    data = solve(SolveRequest(ServingWorkload(model="405b"), SearchSpace(gpus=("h100",), max_gpus=1, workers=1))).to_dict()
    assert row["feasible"] is False and row["status"] == "infeasible" and row["gpus"] is None
    assert row["binding_constraint"] == "gpu_memory" and row["reason"] == data["explanation"]["reason"]
    invalid = solve_cell(Cell("opt-13b", "train", "h100", 8, 4096))
    assert invalid["feasible"] is False and invalid["status"] == "invalid"
    assert "longer than opt-13b's context of 2048 tokens" in invalid["reason"]


def test_rows_come_in_cell_order_from_the_pool_and_skip_the_cells_already_done(small_csv):
    grid = SweepGrid(models=("8b", "70b"), workloads=("train", "infer"), gpus=("h100",), max_gpus=(1, 8))
    keys = [cell.key for cell in cells(grid)]
    progress = []
    rows = list(run_sweep(grid, workers=2, done_keys=keys[:3], on_progress=lambda done, total: progress.append((done, total))))
    assert [tuple(row_line(row).split(",")[:6]) for row in rows] == keys[3:]
    assert progress == [(done, 5) for done in range(1, 6)]
    assert HEADER_LINE + "".join(row_line(row) for row in rows) == HEADER_LINE + "".join(small_csv.splitlines(True)[4:])


# ---------------------------------------------------------------------------------------
# Resume and interruption


def test_resume_completes_a_partial_csv_into_the_uninterrupted_runs_bytes(tmp_path, small_csv):
    lines = small_csv.splitlines(keepends=True)
    cases = {
        "prefix": "".join(lines[:4]),
        "prefix and a line cut short": "".join(lines[:4]) + lines[4][:17],
        "rows out of order": "".join([lines[0], lines[6], lines[2]]),
        "the header only": lines[0],
    }
    for name, partial in cases.items():
        path = tmp_path / f"{name}.csv"
        path.write_text(partial)
        result = invoke(["sweep", *SMALL_AXES, "--workers", "1", "--output", str(path), "--resume"])
        assert result.exit_code == 0, (name, result.stderr)
        assert path.read_text() == small_csv, name


def test_ctrl_c_leaves_a_valid_partial_csv_that_resume_completes(tmp_path, small_csv):
    path = tmp_path / "out.csv"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", "from vramopt.cli import main; main()", "sweep", *SMALL_AXES,
                                "--workers", "2", "--output", str(path)],
                               env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not path.exists() or path.read_text().count("\n") < 3):
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    partial = path.read_text()
    if process.returncode == 0:
        pytest.skip("the sweep finished before the interrupt arrived")
    assert process.returncode == 130 and stderr == "interrupted\n", stderr
    assert partial.endswith("\n") and small_csv.startswith(partial) and partial.count("\n") >= 3
    result = invoke(["sweep", *SMALL_AXES, "--workers", "1", "--output", str(path), "--resume"])
    assert result.exit_code == 0, result.stderr
    assert path.read_text() == small_csv


# ---------------------------------------------------------------------------------------
# Output files and the progress bar


def test_parquet_holds_the_csv_rows_with_typed_columns(tmp_path, small_csv):
    pyarrow_parquet = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed (the 'sweep' extra)")
    output, parquet = tmp_path / "out.csv", tmp_path / "out.parquet"
    result = invoke(["sweep", *SMALL_AXES, "--workers", "1", "--output", str(output), "--parquet", str(parquet)])
    assert result.exit_code == 0, result.stderr
    assert output.read_text() == small_csv
    table = pyarrow_parquet.read_table(parquet)
    assert table.column_names == list(COLUMNS) and table.num_rows == 8
    records = list(csv.DictReader(io.StringIO(small_csv)))
    assert table.column("tokens_per_s").to_pylist() == [float(record["tokens_per_s"]) for record in records]
    assert table.column("feasible").to_pylist() == [record["feasible"] == "true" for record in records]
    assert table.column("zero_stage").to_pylist() == [int(record["zero_stage"]) if record["zero_stage"] else None
                                                      for record in records]


def run_on_terminal(args: list[str], stdout_terminal: bool) -> tuple[str, int]:
    """Run the CLI with stderr on a pseudo-terminal (and stdout too, or a pipe); what the
    terminal received and the exit status."""
    primary, secondary = pty.openpty()
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", "from vramopt.cli import main; main()", *args], env=environment,
                               stdout=secondary if stdout_terminal else subprocess.DEVNULL, stderr=secondary)
    os.close(secondary)
    received = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        received += chunk
    os.close(primary)
    return received.decode(), process.wait(timeout=60)


def test_the_progress_bar_shows_on_a_terminal_only_and_not_with_quiet(tmp_path):
    axes = ["sweep", "--model", "8b", "--gpu", "h100", "--max-gpus", "1", "--max-gpus", "8", "--workers", "1"]
    shown, status = run_on_terminal([*axes, "--output", str(tmp_path / "a.csv")], stdout_terminal=True)
    assert status == 0 and "2/2 cells" in shown and "cells/s  done" in shown, shown
    quiet, status = run_on_terminal([*axes, "--output", str(tmp_path / "b.csv"), "--quiet"], stdout_terminal=True)
    assert status == 0 and "cells/s" not in quiet and "2 cells: 2 with a plan" in quiet, quiet
    piped, status = run_on_terminal([*axes, "--output", str(tmp_path / "c.csv")], stdout_terminal=False)
    assert status == 0 and piped == "", piped
    # the CSV itself on the terminal: no bar to garble it
    on_stdout, status = run_on_terminal(axes, stdout_terminal=True)
    assert status == 0 and "cells/s" not in on_stdout and on_stdout.startswith("model,workload,gpu,"), on_stdout


# ---------------------------------------------------------------------------------------
# Bad input: one line, exit 2


@pytest.mark.parametrize(("grid", "message"), [
    ("grid.toml:models = [\"8b\"]\ngpus = []\n", "sweep axis gpus is empty"),
    ("grid.csv:models,gpus\n8b,\n", "sweep axis gpus is empty"),
    ("grid.toml:models = [\"8b\"]\ngpus = [\"h100\"]\nmodel = [\"70b\"]\n", "unknown key 'model'"),
    ("grid.toml:models = [\"8b\"]\n", "has no 'gpus' axis"),
])
def test_a_bad_grid_file_is_one_line_and_exit_2(tmp_path, grid, message):
    name, text = grid.split(":", 1)
    (tmp_path / name).write_text(text)
    result = invoke(["sweep", "--grid", str(tmp_path / name), "--output", str(tmp_path / "out.csv")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "out.csv").exists()


def test_bad_flags_are_one_line_and_exit_2(tmp_path):
    existing = tmp_path / "existing.csv"
    existing.write_text(small_header_only := HEADER_LINE.replace("reason", "why"))
    assert small_header_only
    cases = [
        (["--model", "8b"], "--gpu is required"),
        (["--model", "8b", "--gpu", "h1000"], "unknown GPU 'h1000'"),
        (["--grid", "g.toml", "--model", "8b"], "--model cannot be given with it"),
        (["--model", "8b", "--gpu", "h100", "--resume"], "--resume needs --output"),
        (["--model", "8b", "--gpu", "h100", "--ray", "auto", "--workers", "2"], "--workers sets the local processes"),
        (["--model", "8b", "--gpu", "h100", "--output", str(existing)], "exists; give --resume"),
        (["--model", "8b", "--gpu", "h100", "--output", str(existing), "--resume"], "its header is not the one"),
        (["--model", "8b", "--gpu", "h100", "--output", str(tmp_path)], "it is a directory"),
    ]
    for args, message in cases:
        result = invoke(["sweep", *args])
        assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr, (args, result.stderr)
    assert existing.read_text() == small_header_only


def test_resume_refuses_rows_of_another_grid_or_headroom(tmp_path, small_csv):
    path = tmp_path / "out.csv"
    partial = "".join(small_csv.splitlines(keepends=True)[:4])
    path.write_text(partial)
    other_max_gpus = ["--model", "8b", "--model", "70b", "--workload", "train", "--workload", "infer", "--gpu", "h100",
                      "--max-gpus", "1", "--max-gpus", "2"]  # the file's second row has max_gpus 8
    for axes, message in (([*SMALL_AXES, "--headroom", "0.2"], "required_headroom_fraction 0.1) is not a cell of this grid"),
                          (other_max_gpus, "max_gpus 8, seq_len 4096, required_headroom_fraction 0.1) is not a cell")):
        result = invoke(["sweep", *axes, "--workers", "1", "--output", str(path), "--resume"])
        assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert path.read_text() == partial
