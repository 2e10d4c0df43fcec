"""`vramopt estimate`: table, JSON and CSV of the README's walk-through, and the v1 schema.

The JSON response is checked against docs/schema/vramopt-v1.schema.json with a small
validator for the subset of JSON Schema 2020-12 the file uses, so the test needs no
jsonschema install; when jsonschema is installed anyway it cross-checks the schema file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import vramopt
from vramopt import cli

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "schema" / "vramopt-v1.schema.json"

README_ARGS = [
    "estimate", "--model", "70b", "--gpu", "b200", "--gpus", "4", "--zero", "3", "--checkpoint", "every:4",
    "--precision", "bf16", "--flash-attention", "--seq-len", "8192", "--global-batch", "32",
]
MEMORY_TERMS = (
    "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes",
    "kv_cache_bytes", "reserve_bytes",
)


def make_runner() -> CliRunner:
    """stderr apart from stdout: click < 8.2 needs mix_stderr=False, 8.2+ separates by default."""
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


def run(args):
    result = make_runner().invoke(cli.main, args)
    assert "Traceback" not in result.output
    return result


def run_ok(args):
    result = run(args)
    assert result.exit_code == 0, (result.output, result.stderr, result.exception)
    assert result.stderr == ""
    return result


def estimate_json(args):
    return json.loads(run_ok([*args, "--format", "json"]).stdout)


# ---------------------------------------------------------------------------------------
# A validator for the JSON Schema subset the contract uses. Unknown keywords are an error,
# so the schema file cannot grow a keyword that this test would silently ignore.

ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description"}
ASSERTIONS = {"type", "required", "properties", "additionalProperties", "enum", "const", "minimum", "maximum",
              "exclusiveMaximum", "pattern", "$ref", "items"}
TYPES = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "integer": lambda value: (isinstance(value, int) and not isinstance(value, bool))
    or (isinstance(value, float) and value.is_integer()),
}


def resolve(root: dict, reference: str) -> dict:
    assert reference.startswith("#/"), f"only local references are supported: {reference}"
    node = root
    for part in reference[2:].split("/"):
        node = node[part]
    return node


def schema_errors(value, schema: dict, root: dict, where: str = "$") -> list[str]:
    unknown = set(schema) - ANNOTATIONS - ASSERTIONS
    assert not unknown, f"schema keyword(s) outside the tested subset at {where}: {sorted(unknown)}"
    errors: list[str] = []
    if "$ref" in schema:
        errors += schema_errors(value, resolve(root, schema["$ref"]), root, where)
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[kind](value) for kind in kinds):
            return errors + [f"{where}: {value!r} is not of type {schema['type']}"]
    if "const" in schema and (value != schema["const"] or type(value) is not type(schema["const"])):
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and not any(value == item and isinstance(value, bool) == isinstance(item, bool) for item in schema["enum"]):
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if TYPES["number"](value):
        if not math.isfinite(value):
            errors.append(f"{where}: {value!r} is not a finite number")
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value!r} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value!r} > maximum {schema['maximum']}")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            errors.append(f"{where}: {value!r} >= exclusiveMaximum {schema['exclusiveMaximum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += schema_errors(item, schema["items"], root, f"{where}[{index}]")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: missing required key '{key}'")
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                errors += schema_errors(item, properties[key], root, f"{where}.{key}")
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{where}: unexpected key '{key}'")
    return errors


def validate(response: dict) -> list[str]:
    schema = json.loads(SCHEMA_PATH.read_text())
    return schema_errors(response, schema, schema)


# ---------------------------------------------------------------------------------------


def test_json_is_the_v1_contract_for_the_readme_command():
    data = estimate_json(README_ARGS)
    assert data["schema"] == "vramopt/v1" == vramopt.SCHEMA
    assert data["workload"] == "train"
    assert data["model"]["name"] == "llama-3.1-70b"
    plan = data["plan"]
    expected = {
        "gpu": "b200", "gpus": 4, "nodes": 1, "tensor_parallel": 1, "context_parallel": 1, "expert_parallel": 1, "expert_tensor_parallel": 1,
        "pipeline_parallel": 1, "first_stage_layers": 0, "last_stage_layers": 0,
        "data_parallel": 4,
        "sequence_parallel": False, "virtual_stages": 1, "zero_stage": 3, "data_parallel_shard": 0, "checkpointing": "every:4",
        "precision": "bf16", "grad_comm_precision": "bf16", "offload": "none", "optimizer": "adam", "flash_attention": True, "expert_comm_overlap": False,
        "seq_len": 8192, "micro_batch": 1, "grad_accumulation": 8, "global_batch": 32,
    }
    assert plan == expected
    memory = data["memory"]
    assert memory["total_bytes"] == pytest.approx(sum(memory[term] for term in MEMORY_TERMS), rel=1e-12)
    assert memory["capacity_bytes"] == 182_642 * 2**20  # B200 as the CUDA runtime reports it (catalog source)
    assert memory["fits"] is False
    # 16 bytes per parameter (bf16 weights and gradients + 12 bytes of Adam state) over 4 GPUs.
    model_state = memory["weights_bytes"] + memory["gradients_bytes"] + memory["optimizer_bytes"]
    assert model_state >= 16 * data["model"]["params_total"] / 4
    assert memory["headroom_fraction"] == pytest.approx(1 - memory["total_bytes"] / memory["capacity_bytes"])
    assert data["throughput"]["tokens_per_s"] > 0


def test_json_matches_the_library_exactly():
    workload = vramopt.TrainingWorkload(model="70b", seq_len=8192, global_batch=32)
    plan = vramopt.TrainingPlan(gpu="b200", gpus=4, zero_stage=3, checkpointing="every:4")
    assert estimate_json(README_ARGS) == json.loads(json.dumps(vramopt.estimate_training(workload, plan).to_dict()))


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--gpus", "8", "--tp", "2", "--sequence-parallel"],
        ["--offload", "cpu"],
        ["--gpus", "8", "--pp", "2", "--virtual-stages", "2", "--no-flash-attention", "--checkpoint", "selective"],
        ["--gpus", "16", "--precision", "fp8", "--grad-comm-precision", "fp8", "--offload", "nvme"],
        ["--gpus", "16", "--tp", "4", "--cp", "4", "--seq-len", "65536"],
    ],
    ids=["readme", "tp-sp", "cpu-offload", "interleaved", "fp8-nvme", "context-parallel"],
)
def test_json_validates_against_the_schema(extra):
    errors = validate(estimate_json(readme_args_with(extra)))
    assert errors == []


def readme_args_with(extra):
    """README_ARGS with the flags ``extra`` gives replaced (a flag may be given only once)."""
    flags = {token for token in extra if token.startswith("--")}
    if "--no-flash-attention" in flags:
        flags.add("--flash-attention")
    args, index = [], 0
    while index < len(README_ARGS):
        token = README_ARGS[index]
        if token in flags:
            index += 1 if token == "--flash-attention" else 2
            continue
        args.append(token)
        index += 1
    return args + list(extra)


def test_the_validator_rejects_what_the_schema_forbids():
    data = estimate_json(README_ARGS)
    broken = json.loads(json.dumps(data))
    broken["plan"]["zero_stage"] = 5
    broken["memory"]["surprise_bytes"] = 1.0
    del broken["throughput"]["mfu"]
    broken["schema"] = "vramopt/v2"
    errors = validate(broken)
    assert any("zero_stage" in error for error in errors)
    assert any("surprise_bytes" in error for error in errors)
    assert any("'mfu'" in error for error in errors)
    assert any("vramopt/v2" in error for error in errors)


def test_the_schema_file_is_valid_draft_2020_12_when_jsonschema_is_installed():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(estimate_json(README_ARGS))


def test_csv_is_one_header_and_one_row_of_dotted_columns():
    output = run_ok([*README_ARGS, "--format", "csv"]).stdout
    rows = list(csv.reader(io.StringIO(output)))
    assert len(rows) == 2
    header, values = rows
    assert len(header) == len(values) == len(set(header))
    assert all(name.split(".")[0] in {"plan", "memory", "throughput"} for name in header)
    row = dict(zip(header, values))
    assert row["plan.gpus"] == "4"
    assert row["plan.checkpointing"] == "every:4"
    assert row["memory.fits"] == "false"
    data = estimate_json(README_ARGS)
    assert float(row["memory.total_bytes"]) == data["memory"]["total_bytes"]
    assert float(row["throughput.tokens_per_s"]) == data["throughput"]["tokens_per_s"]


def test_table_explains_why_it_does_not_fit():
    # The limit is 90% of the B200's runtime-reported 182642 MiB (191.51e9 bytes): 172.4 GB.
    output = run_ok(README_ARGS).stdout
    for text in ("llama-3.1-70b", "4 x b200", "ZeRO-3", "every:4", "GB = 1e9 bytes", "optimizer states",
                 "DOES NOT FIT", "GPU memory", "172.4 GB limit", "tokens/s", "step time", "MFU",
                 "achieved TFLOP/s per GPU", "data-parallel communication (exposed)", "offload transfers"):
        assert text in output, text
    assert "FAIL" in output


def test_table_of_a_plan_that_fits_shows_host_ram_use():
    output = run_ok([*README_ARGS, "--offload", "cpu"]).stdout
    assert "\nFITS\n" in output
    assert "host RAM per node" in output
    assert "FAIL" not in output


def test_table_names_host_ram_and_nvme_when_they_overflow():
    host = run_ok(["estimate", "--model", "405b", "--gpus", "8", "--zero", "1", "--offload", "cpu",
                   "--checkpoint", "full", "--global-batch", "8"]).stdout
    assert re.search(r"host RAM per node\s+FAIL", host)
    nvme = run_ok(["estimate", "--model", "2t", "--gpus", "8", "--zero", "3", "--offload", "nvme",
                   "--checkpoint", "full", "--global-batch", "8"]).stdout
    assert re.search(r"NVMe per node\s+FAIL", nvme)


def test_defaults_and_percent_headroom():
    data = estimate_json(["estimate", "--headroom", "15%"])
    assert data["plan"]["gpu"] == "b200" and data["plan"]["gpus"] == 1
    assert data["plan"]["seq_len"] == 4096 and data["plan"]["global_batch"] == 1024
    assert data["memory"]["required_headroom_fraction"] == pytest.approx(0.15)
    assert data["plan"]["grad_comm_precision"] == data["plan"]["precision"] == "bf16"


def test_full_checkpointing_is_every_1_and_aliases_resolve():
    data = estimate_json(["estimate", "--gpu", "dgx-b200", "--checkpoint", "full", "--precision", "fp8"])
    assert data["plan"]["checkpointing"] == "every:1"
    assert data["plan"]["gpu"] == "b200"
    assert data["plan"]["grad_comm_precision"] == "fp8"


def test_a_hugging_face_config_is_accepted_as_the_model():
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs" / "llama-3.1-8b"
    by_file = estimate_json(["estimate", "--model", str(folder / "config.json"), "--seq-len", "2048"])
    by_folder = estimate_json(["estimate", "--model", str(folder), "--seq-len", "2048"])
    catalog = estimate_json(["estimate", "--model", "8b", "--seq-len", "2048"])
    assert by_file["model"]["params_total"] == by_folder["model"]["params_total"] == catalog["model"]["params_total"]


def test_version():
    result = run_ok(["--version"])
    assert vramopt.__version__ in result.output


def test_an_internal_error_is_one_line_and_exit_70(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(cli, "estimate_training", broken)
    result = run(["estimate"])
    assert result.exit_code == cli.EXIT_INTERNAL == 70
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: internal error: RuntimeError: boom second line")
    assert "Traceback" not in result.stderr


def test_debug_reraises_internal_errors(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "estimate_training", broken)
    result = make_runner().invoke(cli.main, ["--debug", "estimate"])
    assert isinstance(result.exception, RuntimeError)
