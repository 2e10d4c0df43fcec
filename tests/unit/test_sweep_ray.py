"""`vramopt sweep` through Ray (issue 17 item 4): the same cells on a local Ray cluster give
the local backend's rows byte for byte. Needs the 'sweep' extra (ray, pyarrow)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (the 'sweep' extra: pip install 'vramopt[sweep]')")

from vramopt.sweep import SweepGrid, run_sweep  # noqa: E402
from vramopt.sweep_files import HEADER_LINE, parquet_bytes, row_line  # noqa: E402

GRID = SweepGrid(models=("8b", "70b", "405b"), workloads=("train", "infer"), gpus=("h100", "h200"), max_gpus=(1, 8))
"""24 cells, feasible and infeasible ones (405b on one GPU)."""


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def csv_text(rows) -> str:
    return HEADER_LINE + "".join(row_line(row) for row in rows)


def test_ray_rows_equal_the_local_backends_byte_for_byte(ray_cluster):
    local = csv_text(run_sweep(GRID, workers=1))
    through_ray = csv_text(run_sweep(GRID, ray_address="auto"))
    assert through_ray == local
    assert local.count("\n") == 25 and ",false,infeasible," in local and ",true,optimal," in local
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (the 'sweep' extra)")
    assert parquet_bytes(through_ray) == parquet_bytes(local)


def test_ray_skips_the_cells_already_done(ray_cluster):
    keys = [tuple(line.split(",")[:6]) for line in csv_text(run_sweep(GRID, workers=1)).splitlines()[1:]]
    rows = list(run_sweep(GRID, ray_address="auto", done_keys=keys[:20]))
    assert [tuple(row_line(row).split(",")[:6]) for row in rows] == keys[20:]
