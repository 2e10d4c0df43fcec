"""`vramopt validate` (issue 13 item 5): the report per source and quantity, samples marked."""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import invoke


@pytest.fixture(scope="module")
def rows():
    result = invoke(["validate", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_group_is_marked_and_counted(rows):
    samples = {(row["source"].split(" (")[0], row["sample"].split(" (")[0]): row["cases"] for row in rows}
    assert samples[("Narayanan et al. 2021 Table 1", "in-sample")] == 10
    assert samples[("Narayanan et al. 2021 Table 1", "leave-one-out")] == 10
    assert samples[("Megatron-LM README weak scaling", "leave-one-out")] == 9
    assert samples[("Korthikanti et al. 2022 Table 5", "out-of-sample")] == 8
    for row in rows:
        errors = [abs(value) for value in row["case_errors_pct"].values()]
        assert row["cases"] == len(errors)
        assert row["max_abs_error_pct"] == pytest.approx(max(errors), abs=0.011)
        assert row["mean_abs_error_pct"] == pytest.approx(sum(errors) / len(errors), abs=0.011)


def test_no_run_is_both_fitted_and_out_of_sample(rows):
    fitted = {case for row in rows if row["sample"] != "out-of-sample" for case in row["case_errors_pct"]}
    held = {case for row in rows if row["sample"] == "out-of-sample" for case in row["case_errors_pct"]}
    assert fitted and held and not fitted & held


def test_csv_and_table_formats():
    csv_result = invoke(["validate", "--format", "csv"])
    assert csv_result.exit_code == 0
    assert csv_result.stdout.splitlines()[0] == "source,quantity,sample,cases,mean_abs_error_pct,max_abs_error_pct"
    table = invoke(["validate"])
    assert table.exit_code == 0 and "leave-one-out" in table.stdout and "out-of-sample" in table.stdout


@pytest.mark.docs_snapshot
def test_the_docs_page_shows_the_current_report(rows):
    """docs/published-runs-validation.md is generated from this report
    (python benchmarks/write_validation_docs.py)."""
    from pathlib import Path

    from vramopt.cli_validate import render_markdown

    page = (Path(__file__).resolve().parents[2] / "docs" / "published-runs-validation.md").read_text()
    assert render_markdown(rows) in page
