"""``vramopt sweep``: the command's body (vramopt/cli.py registers it with ``add_sweep_command``).

The CSV is written as the rows come, one flushed line per cell in cell order, so a run
stopped by Ctrl-C (exit 130) or killed leaves a valid CSV of the cells done so far, which
``--resume`` completes into exactly the file an uninterrupted run writes. The progress
bar goes to stderr, only while stdout and stderr are terminals and --quiet is not given.
"""

from __future__ import annotations

import csv
import io
import os
import sys
import time
from typing import Any, Callable, TextIO

import click

from vramopt.errors import InputError
from vramopt.input_files import display_path
from vramopt.output_files import resolve_target, same_file, write_files_atomically
from vramopt.sweep import COLUMNS, DEFAULT_SEQ_LEN, MAX_GPUS_LIMIT, SweepGrid, cells, run_sweep
from vramopt.sweep_files import HEADER_LINE, parquet_bytes, read_done_rows, read_grid, row_key, row_line
from vramopt.types import MAX_COUNT, WORKLOADS

AXIS_FLAGS = {"models": "--model", "workloads": "--workload", "gpus": "--gpu", "max_gpus": "--max-gpus", "seq_lens": "--seq-len"}


class ProgressBar:
    """``[#####-----] 120/504 cells  3.9 cells/s  ETA 1m38s`` redrawn in place on a
    terminal, at most ten times a second; the rate counts the cells solved in this run."""

    WIDTH = 30

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.clock = stream, clock
        self.started = clock()
        self.drawn_at = -1.0
        self.shown = False

    def update(self, done: int, total: int) -> None:
        now = self.clock()
        if done < total and now - self.drawn_at < 0.1:
            return
        self.drawn_at = now
        self.stream.write("\r" + progress_line(done, total, now - self.started))
        self.stream.flush()
        self.shown = True

    def finish(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False


def progress_line(done: int, total: int, elapsed_s: float) -> str:
    filled = int(ProgressBar.WIDTH * done / total) if total else ProgressBar.WIDTH
    bar = "#" * filled + "-" * (ProgressBar.WIDTH - filled)
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    if done >= total:
        eta = "done"
    elif rate > 0:
        remaining_s = round((total - done) / rate)
        eta = f"ETA {remaining_s // 60}m{remaining_s % 60:02d}s"
    else:
        eta = "ETA --"
    return f"[{bar}] {done}/{total} cells  {rate:.1f} cells/s  {eta}"


def _is_terminal(stream: Any) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def add_sweep_command(group: click.Group) -> None:
    from vramopt.cli import TIME_LIMIT, HeadroomType, echo, given

    @group.command()
    @click.option("--model", "models", multiple=True, help="Catalog model (repeat for several; see `vramopt models`).")
    @click.option("--workload", "workloads", multiple=True, type=click.Choice(WORKLOADS),
                  help="Workload kind (repeat for several).  [default: train]")
    @click.option("--gpu", "gpus", multiple=True, help="GPU type (repeat for several; see `vramopt gpus`).")
    @click.option("--max-gpus", "max_gpus", multiple=True, type=click.IntRange(1, MAX_GPUS_LIMIT),
                  help="Most GPUs a plan may use (repeat for several).  [default: 8]")
    @click.option("--seq-len", "seq_lens", multiple=True, type=click.IntRange(1, MAX_COUNT),
                  help="Tokens per sequence; for infer the context (repeat for several).  [default: 4096 train, 8192 infer, at most the model's context]")
    @click.option("--grid", "grid_path", type=str, default=None,
                  help="Read the axes from a TOML or CSV grid file (docs/sweep.md) instead of the axis flags.")
    @click.option("--headroom", type=HeadroomType(), default=0.10, show_default=True,
                  help="Fraction of each GPU's memory that must stay free, every cell.")
    @click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=10.0, show_default=True,
                  help="Solver time limit per cell, seconds.")
    @click.option("--output", "output_path", type=str, default=None, help="Write the rows as CSV here (default: stdout).")
    @click.option("--parquet", "parquet_path", type=str, default=None,
                  help="Also write the rows as Parquet here at the end (needs the 'sweep' extra: pyarrow).")
    @click.option("--workers", type=click.IntRange(1, 1024), default=None,
                  help="Local processes solving cells (1: in this process).  [default: CPU count]")
    @click.option("--ray", "ray_address", type=str, default=None,
                  help="Send the cells to Ray instead: local (start one here), auto (the running cluster) or an address.")
    @click.option("--resume", is_flag=True, help="Keep the rows already in --output and solve only the missing cells.")
    @click.option("--quiet", is_flag=True, help="No progress bar.")
    def sweep(grid_path: str | None, headroom: float, time_limit_s: float, output_path: str | None, parquet_path: str | None,
              workers: int | None, ray_address: str | None, resume: bool, quiet: bool, **axes: tuple) -> None:
        """Solve every cell of a grid of models x workloads x GPU types x max-GPU values x
        sequence lengths; one CSV row per cell, infeasible cells included (docs/sweep.md)."""
        if grid_path is not None:
            flags = [AXIS_FLAGS[axis] for axis in axes if axes[axis]] + [
                flag for name, flag in (("headroom", "--headroom"), ("time_limit_s", "--time-limit")) if given(name)]
            if flags:
                raise click.UsageError(f"--grid gives the whole grid; {flags[0]} cannot be given with it")
            grid = read_grid(grid_path)
        else:
            for axis in ("models", "gpus"):
                if not axes[axis]:
                    raise click.UsageError(f"{AXIS_FLAGS[axis]} is required (or --grid)")
            grid = SweepGrid(models=axes["models"], gpus=axes["gpus"], workloads=axes["workloads"] or ("train",),
                             max_gpus=axes["max_gpus"] or (8,), seq_lens=axes["seq_lens"] or (DEFAULT_SEQ_LEN,),
                             headroom_fraction=headroom, time_limit_s=time_limit_s)
        if ray_address is not None and workers is not None:
            raise click.UsageError("--workers sets the local processes; with --ray the cluster's CPUs solve the cells")
        if ray_address is not None and not ray_address.strip():
            raise click.UsageError("--ray needs local, auto or a cluster address")
        if resume and output_path is None:
            raise click.UsageError("--resume needs --output, the CSV to complete")
        for flag, path in (("--output", output_path), ("--parquet", parquet_path)):
            if path is not None and not path.strip():
                raise click.UsageError(f"{flag} needs a file name")
            if path is not None:
                resolve_target(path)
        if output_path and parquet_path and same_file(output_path, parquet_path):
            raise click.UsageError(f"--output and --parquet name the same file {display_path(output_path)}")
        if parquet_path is not None:
            parquet_bytes(HEADER_LINE)  # pyarrow missing: say so before the work, not after it
        grid_cells = list(cells(grid))
        done_lines: dict[tuple[str, ...], str] = {}
        if output_path is not None and os.path.exists(output_path) and os.path.getsize(output_path) > 0:
            if not resume:
                raise InputError(f"{display_path(output_path)} exists; give --resume to complete it, or remove it")
            done_lines, complete_bytes = read_done_rows(output_path, grid_cells)
            os.truncate(output_path, complete_bytes)  # drop a last line a killed run cut short
        in_order = [cell.key for cell in grid_cells[: len(done_lines)]] == list(done_lines)
        # No bar when the CSV itself goes to the terminal: the two would garble each other.
        terminals = _is_terminal(sys.stdout) and _is_terminal(sys.stderr)
        bar = ProgressBar(sys.stderr) if not quiet and terminals and output_path is not None else None
        rows = run_sweep(grid, workers=workers or _cpu_count(), ray_address=ray_address,
                         on_progress=bar.update if bar else None, done_keys=done_lines)
        new_lines: dict[tuple[str, ...], str] = {}
        try:
            if output_path is None:
                echo(HEADER_LINE.rstrip("\n"))
                for row in rows:
                    line = row_line(row)
                    new_lines[row_key(row)] = line
                    echo(line.rstrip("\n"))
            else:
                _write_rows(output_path, rows, new_lines, header=not done_lines)
        finally:
            rows.close()
            if bar is not None:
                bar.finish()
        lines = {**done_lines, **new_lines}
        text = HEADER_LINE + "".join(lines[cell.key] for cell in grid_cells)
        outputs: dict[str, str | bytes] = {}
        if output_path is not None and not in_order:
            outputs[output_path] = text  # resumed from rows out of cell order: rewrite in order
        if parquet_path is not None:
            outputs[parquet_path] = parquet_bytes(text)
        write_files_atomically(outputs)
        if output_path is not None:
            feasible = sum(1 for record in csv.reader(io.StringIO(text, newline="")) if record[COLUMNS.index("feasible")] == "true")
            written = " and ".join(display_path(path) for path in (output_path, parquet_path) if path)
            echo(f"{len(grid_cells)} cells: {feasible} with a plan, {len(grid_cells) - feasible} without "
                 f"({len(done_lines)} kept from the earlier run); wrote {written}")


def _cpu_count() -> int:
    """The CPUs this process may run on (a container's or taskset's limit, where known)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _write_rows(path: str, rows: Any, new_lines: dict[tuple[str, ...], str], header: bool) -> None:
    """Append each row as one line, flushed, so the file is a valid CSV at every moment.
    The file is opened when the first row is there: a backend that fails to start (a Ray
    cluster out of reach) leaves no file behind."""
    stream = None
    try:
        for row in rows:
            if stream is None:
                stream = open(resolve_target(path), "a" if not header else "w", encoding="utf-8", newline="")
                if header:
                    stream.write(HEADER_LINE)
            line = row_line(row)
            new_lines[row_key(row)] = line
            stream.write(line)
            stream.flush()
    except OSError as error:
        raise InputError(f"cannot write {display_path(path)}: {error.strerror or error}") from None
    finally:
        if stream is not None:
            stream.close()
