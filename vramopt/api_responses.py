"""The responses of the embedding API (``vramopt.api``): each wraps the v1 JSON object the
CLI prints with ``--format json``, with the plan, feasibility and pandas views."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Mapping

from vramopt.errors import InputError
from vramopt.input_files import parse_json
from vramopt.results import SCHEMA


@dataclass(frozen=True, slots=True)
class Response:
    """A v1 response: ``data`` is exactly the CLI's JSON output."""

    data: Mapping[str, Any]

    @classmethod
    def from_dict(cls, data: Any) -> "Response":
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise InputError(f"response: not a '{SCHEMA}' object")
        return cls(copy.deepcopy(data))

    @classmethod
    def from_json(cls, text: str) -> "Response":
        return cls.from_dict(parse_json(text, lambda detail: InputError(f"response: {detail}")))

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.data))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.data, indent=indent, allow_nan=False)

    @property
    def plan(self) -> Mapping[str, Any] | None:
        return self.data.get("plan")

    @property
    def feasible(self) -> bool:
        return self.data.get("plan") is not None

    def to_frame(self):
        """One row: the plan, memory and throughput as dotted columns (pandas)."""
        import pandas

        return pandas.DataFrame([_flatten(self.data)])


class EstimateResponse(Response):
    __slots__ = ()


class SolveResponse(Response):
    __slots__ = ()

    def runners_up_frame(self):
        import pandas

        rows = [{**_flatten({"plan": runner["plan"]}), "tokens_per_s": runner["tokens_per_s"],
                 "tokens_per_s_loss_fraction": runner["tokens_per_s_loss_fraction"], "changed_field": runner["changed_field"]}
                for runner in self.data.get("runners_up", [])]
        return pandas.DataFrame(rows)


class ParetoResponse(Response):
    __slots__ = ()

    @property
    def plan(self) -> None:
        return None

    @property
    def feasible(self) -> bool:
        return bool(self.data.get("front"))

    def to_frame(self):
        """One row per front point (the CSV of ``vramopt pareto``)."""
        import pandas

        from vramopt.optimizer.front import front_rows_for_csv

        return pandas.DataFrame(front_rows_for_csv(dict(self.data)))


def _flatten(data: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for section in ("plan", "memory", "throughput"):
        for key, value in (data.get(section) or {}).items():
            row[f"{section}.{key}"] = value
    return row
