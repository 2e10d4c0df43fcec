"""`vramopt gpus` and `vramopt models`: the catalogs as tables and as JSON with sources."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from vramopt import cli
from vramopt.hardware import gpu_names
from vramopt.models import model_names


def invoke(args):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(cli.main, args)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "Traceback" not in result.output
    return result.output


def test_gpus_table_lists_every_gpu_with_its_columns():
    output = invoke(["gpus"])
    header = output.splitlines()[0]
    for column in ("gpu", "datasheet GB", "usable GiB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "NVLink GB/s", "GPUs/node", "MIG"):
        assert column in header
    rows = {line.split()[0]: line.split() for line in output.splitlines()[2:] if line and not line.startswith("Dense")}
    assert set(gpu_names()) <= set(rows)
    b200 = rows["b200"]
    # Datasheet 180 GB; usable 182642 MiB = 178.36 GiB as the CUDA runtime reports it.
    assert b200[1] == "180" and b200[2] == "178.36" and b200[4] == "2,250" and b200[-1] == "yes"
    assert rows["a100-40gb"][5] == "-"  # no fp8 tensor cores on Ampere
    assert rows["mi300x"][6:8] == ["448", "(7x64"]  # seven 64 GB/s Infinity Fabric links


def test_gpus_json_has_every_field_and_its_sources():
    gpus = {gpu["name"]: gpu for gpu in json.loads(invoke(["gpus", "--format", "json"]))}
    assert set(gpus) == set(gpu_names())
    b200 = gpus["b200"]
    assert b200["memory_bytes"] == 182_642 * 2**20  # CUDA runtime total (catalog source)
    assert b200["datasheet_memory_bytes"] == 180_000_000_000
    assert b200["peak_flops_per_s"]["bf16"] == pytest.approx(2.25e15)
    assert "b200-180gb" in b200["aliases"]
    for field in ("hbm_bandwidth_bytes_per_s", "nvlink_bandwidth_bytes_per_s", "pcie_bandwidth_bytes_per_s",
                  "mig_profiles", "node", "sources"):
        assert field in b200
    assert b200["sources"]["memory_bytes"]
    assert b200["node"]["sources"]
    assert all(profile["source"] for profile in b200["mig_profiles"])


def test_models_table_lists_every_model_with_aliases():
    output = invoke(["models"])
    header = output.splitlines()[0]
    for column in ("model", "aliases", "layers", "hidden", "heads/kv", "params B", "active B", "MoE"):
        assert column in header
    lines = {line.split()[0]: line for line in output.splitlines()[2:] if line and not line.startswith("Parameters")}
    assert set(model_names()) <= set(lines)
    assert "70b" in lines["llama-3.1-70b"] and "llama3.1-70b" in lines["llama-3.1-70b"]
    assert lines["llama-3.1-70b"].split()[-1] == "no"
    assert lines["mixtral-8x7b"].split()[-1] == "yes"
    assert "64/8" in lines["llama-3.1-70b"]


def test_models_json_has_sources_and_parameter_counts():
    models = {model["name"]: model for model in json.loads(invoke(["models", "--format", "json"]))}
    assert set(models) == set(model_names())
    llama = models["llama-3.1-70b"]
    assert "70b" in llama["aliases"]
    assert llama["layers"] == 80 and llama["heads"] == 64 and llama["kv_heads"] == 8
    assert llama["params_total"] == llama["parameters"]["total"] == pytest.approx(70.55e9, rel=0.01)
    assert llama["moe"] is None
    assert llama["sources"]
    assert models["mixtral-8x7b"]["moe"]["experts"] == 8
    assert models["mixtral-8x7b"]["params_active"] < models["mixtral-8x7b"]["params_total"]


def test_catalog_commands_refuse_csv():
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(cli.main, ["gpus", "--format", "csv"])
    assert result.exit_code == 2
