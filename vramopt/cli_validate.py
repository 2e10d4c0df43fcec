"""The ``validate`` command: prints ``vramopt.validate.validation_report``."""

from __future__ import annotations

import click

from vramopt.display_formats import to_csv, to_json


def render_validation(rows) -> str:
    header = f"{'source':<48} {'quantity':<26} {'sample':<44} {'cases':>5} {'mean':>7} {'max':>7}"
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(f"{row['source']:<48} {row['quantity']:<26} {row['sample']:<44} {row['cases']:>5} "
                     f"{row['mean_abs_error_pct']:>6.1f}% {row['max_abs_error_pct']:>6.1f}%")
    lines.append("errors: |vramopt / published - 1|; data and sources in vramopt/validation/data/")
    return "\n".join(lines)


def render_markdown(rows) -> str:
    lines = ["| source | quantity | sample | cases | mean error | max error |", "| --- | --- | --- | ---: | ---: | ---: |"]
    for row in rows:
        lines.append(f"| {row['source']} | {row['quantity']} | {row['sample']} | {row['cases']} | "
                     f"{row['mean_abs_error_pct']:.1f}% | {row['max_abs_error_pct']:.1f}% |")
    return "\n".join(lines)


def add_validate_command(group: click.Group) -> None:
    from vramopt.cli import echo

    @group.command()
    @click.option("--format", "output_format", type=click.Choice(("table", "json", "csv", "markdown")), default="table",
                  show_default=True, help="Output format (markdown: the table of docs/validation.md).")
    def validate(output_format: str) -> None:
        """Compare the cost model with every published run shipped with vramopt: per source and
        quantity, cases and mean/max error, in-sample / leave-one-out / out-of-sample marked."""
        from vramopt.validate import validation_report

        rows = [row.to_dict() for row in validation_report()]
        if output_format == "json":
            echo(to_json(rows))
        elif output_format == "csv":
            flat = [{key: value for key, value in row.items() if key != "case_errors_pct"} for row in rows]
            echo(to_csv(flat).rstrip("\n"))
        elif output_format == "markdown":
            echo(render_markdown(rows))
        else:
            echo(render_validation(rows))
