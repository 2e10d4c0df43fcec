"""The examples of docs/api.md, docs/pack.md, docs/pareto.md and docs/exports.md, run.

- the request files in docs/examples/ validate against docs/schema/vramopt-request-v1.schema.json
  (a small validator for the subset of JSON Schema 2020-12 the file uses; jsonschema
  cross-checks when installed) and are accepted by the library and by `vramopt solve --request`;
- the schema's fields are the request dataclasses' fields;
- the pycon blocks of docs/api.md and docs/exports.md run as doctests;
- the pack worked example admits and denies what docs/pack.md says, and running.json is
  the first answer's placements;
- docs/examples/scheduler.py runs and admits what docs/api.md shows;
- the export commands write the configurations docs/exports.md shows;
- the Pareto example's front size, chosen plan and CSV columns are those of docs/pareto.md.

The tests marked ``docs_snapshot`` compare numbers and rows the docs show with what the
code prints now: change detectors, not validation (a shown number is whatever the code
printed when the page was written). Regenerate the pages with
``python benchmarks/regenerate_docs_outputs.py`` and review the diff; deselect them with
``-m "not docs_snapshot"``. The schema and request tests here are not snapshots: they
check that the schema, the parser and the CLI agree.
"""

from __future__ import annotations

import dataclasses
import doctest
import json
import math
import re
import runpy
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

import vramopt
from vramopt import cli
from vramopt.api import EstimateRequest, PackRequest, ParetoRequest, SolveRequest
from vramopt.errors import InputError
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
SCHEMA = json.loads((DOCS / "schema" / "vramopt-request-v1.schema.json").read_text())
REQUEST_FILES = sorted(EXAMPLES.glob("request-*.json"))


def invoke(args, stdin=None):
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()  # click >= 8.2 keeps stderr apart by default
    result = runner.invoke(cli.main, args, input=stdin)
    assert "Traceback" not in result.output
    return result


def without_timing(data):
    data = json.loads(json.dumps(data))
    for section in (data, data.get("summary", {})):
        (section.get("solver") or {}).pop("wall_time_s", None)
    return data


def console_block(document: str, command: str) -> str:
    """The output that follows ``$ command`` inside a console block of the document."""
    text = (DOCS / document).read_text()
    match = re.search(r"^\$ " + re.escape(command) + r"\n(.*?)(?=^\$ |^```)", text, re.S | re.M)
    assert match, f"{document} has no console block for: {command}"
    return match.group(1)


# ---------------------------------------------------------------------------------------
# The request schema

ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "default"}
ASSERTIONS = {"type", "required", "properties", "additionalProperties", "enum", "const", "minimum", "maximum",
              "exclusiveMinimum", "exclusiveMaximum", "pattern", "$ref", "items", "anyOf", "minItems", "minLength"}
TYPES = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
}


def schema_errors(value, schema: dict, where: str = "$") -> list[str]:
    unknown = set(schema) - ANNOTATIONS - ASSERTIONS
    assert not unknown, f"schema keyword(s) outside the tested subset at {where}: {sorted(unknown)}"
    errors: list[str] = []
    if "$ref" in schema:
        node = SCHEMA
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        errors += schema_errors(value, node, where)
    if "anyOf" in schema:
        branches = [schema_errors(value, branch, where) for branch in schema["anyOf"]]
        if all(branches):
            errors.append(f"{where}: matches none of anyOf: {min(branches, key=len)}")
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[kind](value) for kind in kinds):
            return errors + [f"{where}: {value!r} is not of type {schema['type']}"]
    if "const" in schema and (value != schema["const"] or type(value) is not type(schema["const"])):
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and not any(value == item and type(value) is type(item) for item in schema["enum"]):
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if TYPES["number"](value):
        if not math.isfinite(value):
            errors.append(f"{where}: {value!r} is not finite")
        for keyword, fails in (("minimum", lambda bound: value < bound), ("maximum", lambda bound: value > bound),
                               ("exclusiveMinimum", lambda bound: value <= bound), ("exclusiveMaximum", lambda bound: value >= bound)):
            if keyword in schema and fails(schema[keyword]):
                errors.append(f"{where}: {value!r} violates {keyword} {schema[keyword]}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: {value!r} is shorter than {schema['minLength']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for index, item in enumerate(value):
                errors += schema_errors(item, schema["items"], f"{where}[{index}]")
    if isinstance(value, dict):
        errors += [f"{where}: missing required key '{key}'" for key in schema.get("required", []) if key not in value]
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                errors += schema_errors(item, properties[key], f"{where}.{key}")
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{where}: unexpected key '{key}'")
    return errors


def validate(request, definition: str | None = None) -> list[str]:
    schema = {"$ref": f"#/$defs/{definition}"} if definition else SCHEMA
    errors = schema_errors(request, schema)
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - the small validator above is the test
        return errors
    full = {**SCHEMA, **({"$ref": f"#/$defs/{definition}"} if definition else {})}
    if definition:
        full.pop("anyOf")
    official = list(jsonschema.Draft202012Validator(full).iter_errors(request))
    assert bool(official) == bool(errors), (errors, [error.message for error in official])
    return errors


def kind_of(path: Path) -> str:
    return path.stem.split("-")[1]  # request-solve-train.json -> solve


def test_the_request_schema_is_a_valid_draft_2020_12_schema():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_there_are_request_examples_of_every_kind():
    assert {kind_of(path) for path in REQUEST_FILES} == {"solve", "pareto", "estimate"}
    assert len(REQUEST_FILES) >= 5


@pytest.mark.parametrize("path", REQUEST_FILES, ids=lambda path: path.name)
def test_example_requests_validate_and_are_accepted(path):
    request = json.loads(path.read_text())
    kind = kind_of(path)
    assert validate(request) == []
    assert validate(request, f"{kind}_request") == []
    cls = {"solve": SolveRequest, "pareto": ParetoRequest, "estimate": EstimateRequest}[kind]
    parsed = cls.from_dict(request)
    # The full form, every default filled in, is valid too and reads back the same.
    assert validate(parsed.to_dict(), f"{kind}_request") == []
    assert cls.from_dict(parsed.to_dict()) == parsed


@pytest.mark.parametrize("path", [path for path in REQUEST_FILES if kind_of(path) == "solve"], ids=lambda path: path.name)
def test_solve_request_files_run_through_vramopt_solve_request(path):
    result = invoke(["solve", "--request", str(path), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "vramopt/v1" and data["plan"] is not None


def test_stdin_request_equals_the_api():
    path = EXAMPLES / "request-solve-train.json"
    result = invoke(["solve", "--request", "-", "--format", "json"], stdin=path.read_text())
    assert result.exit_code == 0, result.stderr
    assert without_timing(json.loads(result.stdout)) == without_timing(vramopt.solve(path.read_text()).to_dict())


@pytest.mark.docs_snapshot
def test_estimate_and_pareto_request_files_run():
    estimate = vramopt.estimate(json.loads((EXAMPLES / "request-estimate.json").read_text())).to_dict()
    assert estimate["memory"]["fits"] and round(estimate["memory"]["total_bytes"] / 1e9, 1) == 92.5  # the README's variant
    front = vramopt.pareto(json.loads((EXAMPLES / "request-pareto.json").read_text()))
    assert front.feasible and sum(point["chosen"] for point in front.to_dict()["front"]) == 1


def test_the_schema_fields_are_the_dataclass_fields():
    definitions = SCHEMA["$defs"]
    for name, cls in (("training_workload", TrainingWorkload), ("serving_workload", ServingWorkload), ("space", SearchSpace),
                      ("training_plan", TrainingPlan), ("serving_plan", ServingPlan)):
        assert set(definitions[name]["properties"]) == {item.name for item in dataclasses.fields(cls)}, name
    from vramopt.optimizer.domains import PINNABLE_FIELDS
    from vramopt.types import OBJECTIVES, TRAINING_KINDS

    assert set(definitions["plan_choice_lists"]["properties"]) == set(PINNABLE_FIELDS)
    assert definitions["training_workload"]["properties"]["kind"]["enum"] == list(TRAINING_KINDS)
    assert definitions["space"]["properties"]["objective"]["enum"] == list(OBJECTIVES)


def test_requests_built_from_dataclasses_validate():
    requests = {
        "solve_request": [SolveRequest(TrainingWorkload(model="70b", kind="qlora")),
                          SolveRequest(ServingWorkload(model="8b", max_latency_ms=20.0),
                                       SearchSpace(pin={"quantization": "fp8"}, allow={"slots": ("64", "128")}), engine="exhaustive")],
        "pareto_request": [ParetoRequest(TrainingWorkload(model="8b"), SearchSpace(gpus=("h100", "a100-80gb"), max_gpus=16))],
        "estimate_request": [EstimateRequest(TrainingWorkload(model="70b"), TrainingPlan(gpu="b200", gpus=8, checkpointing="every:4")),
                             EstimateRequest(ServingWorkload(model="8b"), ServingPlan(gpu="h100", gpus=1, mig_profile="3g.40gb"))],
    }
    for definition, items in requests.items():
        for request in items:
            assert validate(request.to_dict(), definition) == [], request


BAD_REQUESTS = [
    ("solve", {"workload": {"model": "70b"}, "extra": 1}),
    ("solve", {"schema": "vramopt/v2", "workload": {"model": "70b"}}),
    ("solve", {"space": {"max_gpus": 8}}),
    ("solve", {"workload": {"model": "70b", "seqlen": 8192}}),
    ("solve", {"workload": {"model": "70b", "seq_len": "8192"}}),
    ("solve", {"workload": {"kind": "infer", "model": "8b", "seq_len": 4096}}),
    ("solve", {"workload": {"kind": "serve", "model": "8b"}}),
    ("solve", {"workload": {"model": "70b"}, "space": {"max_gpus": 8.5}}),
    ("solve", {"workload": {"model": "70b"}, "space": {"gpus": "b200"}}),
    ("solve", {"workload": {"model": "70b"}, "space": {"pin": {"zero_stage": [2, 3]}}}),
    ("solve", {"workload": {"model": "70b"}, "engine": "gurobi"}),
    ("estimate", {"workload": {"model": "70b"}}),
    ("estimate", {"workload": {"model": "70b"}, "plan": {"gpu": "b200", "gpus": 8, "data_parallel": 8}}),
    ("estimate", {"workload": {"kind": "infer", "model": "8b"}, "plan": {"gpu": "h100", "gpus": 1, "zero_stage": 1}}),
    ("pareto", {"workload": {"model": "70b"}, "engine": "cp-sat"}),
]


@pytest.mark.parametrize("kind, request_dict", BAD_REQUESTS)
def test_the_schema_and_vramopt_refuse_the_same_malformed_requests(kind, request_dict):
    assert validate(request_dict, f"{kind}_request") != []
    cls = {"solve": SolveRequest, "pareto": ParetoRequest, "estimate": EstimateRequest}[kind]
    with pytest.raises(InputError):
        cls.from_dict(request_dict)


# ---------------------------------------------------------------------------------------
# docs/api.md and docs/exports.md: the Python examples are doctests


@pytest.mark.docs_snapshot
@pytest.mark.parametrize("document", ["api.md", "exports.md"])
def test_python_examples_in_the_docs_run(document, monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```pycon\n(.*?)```", (DOCS / document).read_text(), re.S)
    assert blocks
    test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, document, str(DOCS / document), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


@pytest.mark.docs_snapshot
def test_api_md_request_command_outputs():
    documented = console_block("api.md", "vramopt solve --request docs/examples/request-solve-train.json | grep -E "
                               "'^(hardware|parallel|memory +ZeRO|precision|tokens/s)'").strip().splitlines()
    result = invoke(["solve", "--request", str(EXAMPLES / "request-solve-train.json")])
    assert result.exit_code == 0
    assert documented == [line for line in result.stdout.splitlines() if re.match(r"(hardware|parallel|memory +ZeRO|precision|tokens/s)", line)]
    rejected = invoke(["solve", "--request", str(EXAMPLES / "request-solve-train.json"), "--max-gpus", "4"])
    assert rejected.exit_code == 2 and "--max-gpus cannot be given with it" in rejected.stderr
    bad = invoke(["solve", "--request", "-"], stdin='{"workload": {"model": "70b", "seq_len": "8192"}}')
    assert bad.exit_code == 2 and bad.stderr.strip() == 'error: request workload.seq_len: must be an integer, got "8192"'


# ---------------------------------------------------------------------------------------
# The scheduler example


def admitted_rows(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^(\S+)\s+(?:\d+\s+)?(yes|no)\s", text, re.M)


@pytest.mark.docs_snapshot
def test_the_scheduler_example_runs_and_admits_what_api_md_shows(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(EXAMPLES / "scheduler.py"), run_name="__main__")
    output = capsys.readouterr().out
    documented = console_block("api.md", "python docs/examples/scheduler.py")
    greedy, _, joint = output.partition("jointly (vramopt.pack")
    documented_greedy, _, documented_joint = documented.partition("jointly (vramopt.pack")
    assert admitted_rows(greedy) == admitted_rows(documented_greedy)
    assert admitted_rows(joint) == admitted_rows(documented_joint)
    assert len(admitted_rows(greedy)) == len(admitted_rows(joint)) == 6
    assert re.findall(r"^not admitted: (\S+):", output, re.M) == re.findall(r"^not admitted: (\S+):", documented, re.M)
    assert re.search(r"^admitted \d+ of 6; .*solver optimal$", output, re.M)


# ---------------------------------------------------------------------------------------
# The pack worked example

PACK_COMMANDS = [
    "vramopt pack --cluster docs/examples/cluster.json --jobs docs/examples/jobs.json",
    "vramopt pack --cluster docs/examples/cluster.json --jobs docs/examples/jobs-urgent.json",
    "vramopt pack --cluster docs/examples/cluster.json --jobs docs/examples/jobs-new.json --running docs/examples/running.json",
]


def pack_json(command: str) -> dict:
    args = [str(ROOT / arg) if arg.startswith("docs/") else arg for arg in shlex.split(command)[1:]]
    result = invoke([*args, "--format", "json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.docs_snapshot
@pytest.mark.parametrize("command", PACK_COMMANDS, ids=["queue", "urgent", "running"])
def test_the_pack_worked_example_admits_what_pack_md_says(command):
    documented = console_block("pack.md", command)
    rows = dict(admitted_rows(documented))
    data = pack_json(command)
    assert {item["job"]: "yes" if item["admitted"] else "no" for item in data["placements"]} == rows
    on_mig = {line.split()[0] for line in documented.splitlines() if re.search(r"\d:\dg\.\d+gb#\d", line)}
    assert {item["job"] for item in data["placements"]
            if any(isinstance(gpu, str) for gpus in item["gpus_by_node"].values() for gpu in gpus)} == on_mig
    summary = data["summary"]
    assert f"admitted {summary['jobs_admitted']} of {summary['jobs']} jobs" in documented
    assert f"weighted normalized throughput {summary['weighted_normalized_throughput']:.3f}" in documented
    assert summary["solver"]["status"] == "optimal"


@pytest.mark.docs_snapshot
def test_running_json_is_the_first_answers_placements():
    data = pack_json(PACK_COMMANDS[0])
    running = json.loads((EXAMPLES / "running.json").read_text())
    assert running == [{"job": item["job"], "gpus_by_node": item["gpus_by_node"]} for item in data["placements"] if item["admitted"]]
    urgent = json.loads((EXAMPLES / "jobs-urgent.json").read_text())
    assert urgent[:-1] == json.loads((EXAMPLES / "jobs.json").read_text()) and urgent[-1]["weight"] == 10
    assert vramopt.pack(PackRequest.from_dict({"cluster": json.loads((EXAMPLES / "cluster.json").read_text()),
                                               "jobs": json.loads((EXAMPLES / "jobs-new.json").read_text()),
                                               "running": running})).feasible


# ---------------------------------------------------------------------------------------
# Exports


def documented_json(document: str, name: str) -> dict:
    return json.loads(console_block(document, f"cat {name}"))


def note_topics(text: str, target: str) -> list[str]:
    return re.findall(r"^note \(" + target + r"\): ([^:]+):", text, re.M)


@pytest.mark.docs_snapshot
@pytest.mark.parametrize("target, args", [
    ("deepspeed", ["--model", "70b", "--seq-len", "8192", "--global-batch", "32", "--max-gpus", "8"]),
    ("vllm", ["--workload", "infer", "--model", "70b", "--context", "8192", "--min-slots", "64", "--max-gpus", "8"]),
])
def test_export_commands_write_what_exports_md_shows(target, args, tmp_path):
    name = "ds.json" if target == "deepspeed" else "vllm.yaml"  # vLLM's --config reads YAML only
    result = invoke(["solve", *args, "--export", target, str(tmp_path / name)])
    assert result.exit_code == 0, result.stderr
    written = (tmp_path / name).read_text()
    if name.endswith(".json"):
        assert json.loads(written) == documented_json("exports.md", name)
    else:
        assert written.strip() == console_block("exports.md", f"cat {name}").strip()
    command = f"vramopt solve {' '.join(args)} --export {target} {name} > /dev/null"
    assert note_topics(result.stderr, target) == note_topics(console_block("exports.md", command), target)
    assert note_topics(result.stderr, target)


def test_export_of_the_wrong_workload_writes_nothing(tmp_path):
    result = invoke(["solve", "--workload", "infer", "--model", "8b", "--gpu", "h100", "--max-gpus", "1",
                     "--export", "deepspeed", str(tmp_path / "ds.json")])
    assert result.exit_code == 2 and not (tmp_path / "ds.json").exists()


# ---------------------------------------------------------------------------------------
# The Pareto example


@pytest.mark.docs_snapshot
def test_the_pareto_example_is_what_pareto_md_says():
    png = EXAMPLES / "front-70b.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (DOCS / "pareto.md").read_text()
    front = vramopt.pareto({"workload": {"model": "70b"}, "space": {"max_gpus": 64}}).to_dict()
    assert f"{len(front['front'])} non-dominated plans" in text
    (chosen,) = [point for point in front["front"] if point["chosen"]]
    assert chosen["plan"]["gpus"] == 64 and f"{chosen['throughput']['tokens_per_s']:,.0f} tokens/s" in text.replace("\n", " ")
    counts = sorted({point["plan"]["gpus"] for point in front["front"]})
    assert "points at " + ", ".join(str(count) for count in counts[:-1]) + f" and {counts[-1]} GPUs" in text
    columns = re.findall(r"`(chosen|(?:plan|memory|throughput)\.[a-z_]+)`", text.split("## The CSV")[1].split("Units are")[0])
    from vramopt.optimizer.front import front_rows_for_csv

    assert columns == list(front_rows_for_csv(front)[0])
    assert f"{len(columns)} columns" in text
