"""Prices per GPU-hour, by GPU type (a node profile of a hardware file is a GPU type too).

Prices come from the user: a price file (``--prices FILE.toml``)

    [prices]
    h100 = { usd_per_gpu_hour = 2.5, source = "our cloud contract, 2026-11" }

and ``--price GPU=USD`` flags, which win over the file for the GPUs they name. One
built-in price, labelled as such in every ``usd_source``: the H800's $2 per GPU-hour of
DeepSeek-V3's technical report (arXiv 2412.19437, section 1 and Table 1, training costs
"assuming the rental price of the H800 is $2 per GPU hour"), the one public figure the
project trusts; cloud list prices change month to month and are not built in. A plan whose
GPU has no price gets ``usd: null``, never a made-up figure.

GPU names are resolved through the active catalog (aliases allowed), so an unknown GPU is
an error; a price must be a finite number at least 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from vramopt.catalog_files import TableReader, read_toml
from vramopt.errors import CatalogError, InputError, UnknownNameError
from vramopt.hardware import load_gpu
from vramopt.input_files import display_path

BUILTIN_DEEPSEEK_H800_SOURCE = ("built-in: DeepSeek-V3 technical report (arXiv 2412.19437) Table 1, 'assuming the rental "
                                "price of the H800 is $2 per GPU hour' (December 2024)")

MAX_USD_PER_GPU_HOUR = 1e6
"""Far above any GPU's hourly price; a larger figure is a typo (cents for dollars)."""


@dataclass(frozen=True, slots=True)
class Price:
    usd_per_gpu_hour: float
    source: str


BUILTIN_PRICES: Mapping[str, Price] = {"h800": Price(2.0, BUILTIN_DEEPSEEK_H800_SOURCE)}
"""The only GPU with a dated public price the project can cite (module docstring); a price
file or flag wins over it."""


@dataclass(frozen=True, slots=True)
class PriceTable:
    """Catalog GPU name -> its price; built from a file and flags by ``build_prices``."""

    by_gpu: Mapping[str, Price]

    def get(self, gpu_name: str) -> Price | None:
        return self.by_gpu.get(load_gpu(gpu_name).name)


def _checked(value: object, what: str, fail) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"{what} must be a number of US dollars per GPU-hour, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise fail(f"{what} must be a finite number at least 0, got {value!r}")
    if value > MAX_USD_PER_GPU_HOUR:
        raise fail(f"{what} is {value:g} US dollars per GPU-hour, more than {MAX_USD_PER_GPU_HOUR:g}: check the unit")
    return value


def _canonical(name: str, fail) -> str:
    try:
        return load_gpu(name).name
    except UnknownNameError as error:
        raise fail(str(error)) from None


def read_price_file(path: Path | str) -> dict[str, Price]:
    """A price file read strictly: a ``[prices]`` table of ``GPU = { usd_per_gpu_hour, source }``."""
    path = Path(path)
    shown = display_path(path)
    reader = TableReader(read_toml(path), path)
    table = reader.sub("prices")
    reader.finish()
    prices: dict[str, Price] = {}
    for name in table.table:
        entry = table.sub(name)
        where = f"{shown}: key 'prices.{name}'"

        def fail(detail: str, where: str = where) -> CatalogError:
            return CatalogError(f"{where}: {detail}")

        gpu = _canonical(name, fail)
        if gpu in prices:
            raise fail(f"prices GPU '{gpu}' a second time (through an alias)")
        value = _checked(entry.raw("usd_per_gpu_hour", ..., (int, float, str, bool)), "usd_per_gpu_hour", fail)
        source = entry.text("source")
        entry.finish()
        prices[gpu] = Price(value, f"{source} (price file {shown})")
    table.finish()
    return prices


def parse_price_flag(text: str) -> tuple[str, Price]:
    """``GPU=USD`` of a ``--price`` flag."""

    def fail(detail: str) -> InputError:
        return InputError(f"--price {text}: {detail}")

    name, sep, number = text.partition("=")
    if not sep or not name.strip() or not number.strip():
        raise fail("write GPU=USD_PER_GPU_HOUR, e.g. --price h100=2.5")
    try:
        value = float(number)
    except ValueError:
        raise fail(f"'{number}' is not a number") from None
    return _canonical(name.strip(), fail), Price(_checked(value, "the price", fail), "--price flag")


def space_prices(usd_per_gpu_hour: Mapping[str, float], source: str = "request space.usd_per_gpu_hour") -> PriceTable:
    """A search space's prices (already checked by ``cost_objective.check_cost_space``) as a
    table, over the built-in ones."""
    return PriceTable({**BUILTIN_PRICES,
                       **{load_gpu(name).name: Price(float(value), source) for name, value in usd_per_gpu_hour.items()}})


def build_prices(price_file: Path | str | None, flags: Iterable[str]) -> PriceTable:
    """Built-in prices (none), then the file's, then the flags' (a flag wins for its GPU;
    the same GPU in two flags is refused)."""
    prices: dict[str, Price] = dict(BUILTIN_PRICES)
    if price_file is not None:
        prices.update(read_price_file(price_file))
    flagged: set[str] = set()
    for text in flags:
        gpu, price = parse_price_flag(text)
        if gpu in flagged:
            raise InputError(f"--price {text}: GPU '{gpu}' already has a --price flag")
        flagged.add(gpu)
        prices[gpu] = price
    return PriceTable(prices)
