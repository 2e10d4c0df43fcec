"""Issue 11 item 13: ``pareto`` with an empty front (nothing fits) used to exit 0 and
truncate an existing ``--output`` file to a header-less CSV. Like ``solve`` it must exit 2
with one line and leave the file untouched.
"""

from __future__ import annotations

import json

from tests.cli_runner import invoke

NOTHING_FITS = ["pareto", "--model", "405b", "--gpu", "rtx4090", "--max-gpus", "1"]
"""Llama 3.1 405B on one 32 GB RTX 4090: nothing fits (its bf16 weights alone are ~810 GB)."""


def test_empty_front_exits_2_and_keeps_the_output_file(tmp_path):
    """issue 11 item 13: --output (and --plot) of an existing file, table output."""
    output = tmp_path / "front.csv"
    output.write_text("previous front\n")
    plot = tmp_path / "front.png"
    plot.write_bytes(b"previous plot")
    for args in (["--output", str(output)], ["--output", str(output), "--plot", str(plot)], []):
        result = invoke(NOTHING_FITS + args)
        context = (args, result.exit_code, result.stdout[-500:], result.stderr[-500:])
        assert result.exit_code == 2, context
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, context
        assert "front is empty" in result.stderr, context
        assert "written" not in result.stdout, context
    assert output.read_text() == "previous front\n"
    assert plot.read_bytes() == b"previous plot"
    assert [path.name for path in tmp_path.iterdir()] and not [p for p in tmp_path.iterdir() if p.name.startswith(".vramopt-")]


def test_empty_front_json_keeps_the_contract_and_exits_2(tmp_path):
    """issue 11 item 13: --format json still prints the (empty) v1 response, with status 2."""
    output = tmp_path / "front.csv"
    output.write_text("previous front\n")
    result = invoke(NOTHING_FITS + ["--format", "json", "--output", str(output)])
    assert result.exit_code == 2, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "vramopt/v1" and data["front"] == []
    assert output.read_text() == "previous front\n"


def test_a_front_that_is_not_empty_still_exits_0(tmp_path):
    output = tmp_path / "front.csv"
    result = invoke(["pareto", "--model", "8b", "--max-gpus", "2", "--output", str(output)])
    assert result.exit_code == 0, result.stderr
    assert output.read_text().startswith("chosen,")
