"""Prices per GPU-hour from a file and flags (issue 17 item 2): never built in without a
source, bad input refused naming the file and key."""

from __future__ import annotations

import pytest

from vramopt.errors import CatalogError, InputError
from vramopt.hardware import load_hardware_file, using_hardware
from vramopt.prices import BUILTIN_PRICES, build_prices, read_price_file


def write(tmp_path, text, name="prices.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_file_and_flags(tmp_path):
    path = write(tmp_path, '[prices]\nh100-sxm = { usd_per_gpu_hour = 2.5, source = "our contract, 2026-11" }\n'
                           'b200 = { usd_per_gpu_hour = 5, source = "quote" }\n')
    prices = build_prices(path, ["b200=4.25", "a100-80gb=1"])
    assert prices.get("h100").usd_per_gpu_hour == 2.5  # the alias resolved to the catalog name
    assert prices.get("h100").source == f"our contract, 2026-11 (price file {path})"
    assert prices.get("b200").usd_per_gpu_hour == 4.25 and prices.get("b200").source == "--price flag"
    assert prices.get("a100-80gb").usd_per_gpu_hour == 1.0
    assert prices.get("h200") is None


def test_the_one_builtin_price_is_deepseeks_h800_and_says_so():
    """issue 17 item 2: built-in prices only where a public source exists, labelled: the
    H800 at $2 per GPU-hour (DeepSeek-V3 report, Table 1); a flag wins over it."""
    assert set(BUILTIN_PRICES) == {"h800"}
    builtin = build_prices(None, []).get("h800-sxm")
    assert builtin.usd_per_gpu_hour == 2.0
    assert builtin.source.startswith("built-in: DeepSeek-V3 technical report (arXiv 2412.19437) Table 1")
    assert build_prices(None, []).get("h100") is None
    assert build_prices(None, ["h800=1.5"]).get("h800").usd_per_gpu_hour == 1.5


def test_a_profile_of_a_hardware_file_can_be_priced(tmp_path):
    hardware = write(tmp_path, '[gpu.h100-lab]\nbased_on = "h100"\n', "hardware.toml")
    with using_hardware(load_hardware_file(hardware)):
        assert build_prices(None, ["h100-lab=1.5"]).get("h100-lab").usd_per_gpu_hour == 1.5
    with pytest.raises(InputError, match="unknown GPU 'h100-lab'"):
        build_prices(None, ["h100-lab=1.5"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[prices]\nh999 = { usd_per_gpu_hour = 2, source = "x" }\n', "key 'prices.h999': unknown GPU 'h999'"),
        ('[prices]\nh100 = { usd_per_gpu_hour = -1, source = "x" }\n', "must be a finite number at least 0"),
        ('[prices]\nh100 = { usd_per_gpu_hour = nan, source = "x" }\n', "must be a finite number at least 0"),
        ('[prices]\nh100 = { usd_per_gpu_hour = inf, source = "x" }\n', "must be a finite number at least 0"),
        ('[prices]\nh100 = { usd_per_gpu_hour = "2", source = "x" }\n', "must be a number"),
        ('[prices]\nh100 = { usd_per_gpu_hour = 2 }\n', "key 'prices.h100.source' is missing"),
        ('[prices]\nh100 = { usd_per_gpu_hour = 2, source = "x", per = "h" }\n', "key 'prices.h100.per' is not a known key"),
        ('[prices]\nh100 = 2.5\n', "key 'prices.h100' has the wrong type"),
        ('[price]\n', "key 'prices' is missing"),
        ('[prices]\nh100 = { usd_per_gpu_hour = 2, source = "x" }\nh100-sxm = { usd_per_gpu_hour = 3, source = "x" }\n',
         "a second time"),
    ],
)
def test_bad_price_files(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(CatalogError) as caught:
        read_price_file(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


@pytest.mark.parametrize(
    ("flag", "message"),
    [("h100", "write GPU=USD"), ("h100=", "write GPU=USD"), ("h100=abc", "not a number"), ("h100=-2", "at least 0"),
     ("h100=nan", "at least 0"), ("nope=2", "unknown GPU 'nope'"), ("h100=2e7", "check the unit")],
)
def test_bad_price_flags(flag, message):
    with pytest.raises(InputError, match=message):
        build_prices(None, [flag])


def test_the_same_gpu_in_two_flags_is_refused():
    with pytest.raises(InputError, match="already has a --price flag"):
        build_prices(None, ["h100=2", "h100-sxm=3"])
