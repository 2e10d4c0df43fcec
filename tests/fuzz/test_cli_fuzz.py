"""Fuzz the command line (click's runner): random and adversarial flags, values, files.

Every run must end in exit 0 with well-formed output, or exit 2 with exactly one line
``error: ...`` on stderr -- no traceback, no ``internal error``, no output file left by a
failing run, no temporary file left by any run (fuzz_support.check_cli).
Each example runs in a fresh temporary working directory, so a relative path an option
writes to never lands in the repository.
"""

from __future__ import annotations

import contextlib
import json

import pytest
import os
import tempfile
from pathlib import Path

import click
from hypothesis import given
from hypothesis import strategies as st

from fuzz_support import (
    ADVERSARIAL_JSON,
    CLUSTERS,
    JOBS,
    RUNNING,
    SOLVE_REQUESTS,
    UNKNOWN_KEYS,
    check_cli,
    fuzz_settings,
    json_scalars,
    mutate,
    random_json,
    run,
    text_values,
    to_toml,
    write,
)
from vramopt import cli
from vramopt.catalog_files import MAX_CATALOG_FILE_BYTES
from vramopt.api import MAX_REQUEST_BYTES
from vramopt.constraints import registry
from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATIONS
from vramopt.types import PRECISIONS, WORKLOADS

HF_CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
DIR = "@DIR@"
"""Placeholder for the example's temporary directory in generated arguments."""


@contextlib.contextmanager
def scratch_directory():
    """A fresh temporary directory, also the working directory while the example runs."""
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="vramopt-fuzz-") as directory:
        os.chdir(directory)
        try:
            yield directory
        finally:
            os.chdir(previous)


def resolve(args: list[str], directory: str) -> list[str]:
    return [arg.replace(DIR, directory) for arg in args]


# ---------------------------------------------------------------------------------------
# Values for each option of estimate / solve / pareto (valid ones kept cheap)

PLAN_FIELD_VALUES = {
    "gpu": ("b200", "h100", "a100-40gb", "rtx4090", "H100", "t4"),
    "gpus": ("1", "2", "3", "8", "0"),
    "tensor_parallel": ("1", "2", "8", "3", "64"),
    "pipeline_parallel": ("1", "2", "4", "3", "33"),
    "data_parallel": ("1", "2", "7"),
    "sequence_parallel": ("true", "false", "yes", "maybe"),
    "virtual_stages": ("1", "2", "5"),
    "precision": PRECISIONS + ("fp6",),
    "grad_comm_precision": PRECISIONS + ("same",),
    "micro_batch": ("1", "2", "8", "1024", "99999999999999999999"),
    "zero_stage": ("0", "1", "2", "3", "4"),
    "offload": ("none", "cpu", "nvme", "disk"),
    "checkpointing": ("none", "selective", "full", "every:1", "every:4", "every:0", "every:99999999999999999999"),
    "flash_attention": ("true", "false", "2"),
    "quantization": QUANTIZATIONS + ("int2",),
    "mig_profile": ("none", "1g.10gb", "3g.40gb", "7g.80gb", "1g.23gb"),
    "kv_cache_dtype": KV_CACHE_DTYPES + ("int4",),
    "paged_kv": ("true", "false"),
    "slots": ("1", "16", "0", "99999999999999999999"),
    "speculative_decoding": ("true", "false"),
}


@st.composite
def choice_list(draw) -> str:
    """A KEY=V1,V2 value for --allow / --forbid / --pin."""
    key = draw(st.one_of(st.sampled_from([technique.field for technique in registry.TECHNIQUES]),
                         st.sampled_from(UNKNOWN_KEYS), st.text(max_size=6)))
    known = PLAN_FIELD_VALUES.get(key, ("1",))
    values = draw(st.lists(st.one_of(st.sampled_from(known), text_values), min_size=0, max_size=3))
    separator = draw(st.sampled_from(["=", "=", "=", "", "==", ":"]))
    return f"{key}{separator}{','.join(values)}"


OUTPUT_PATHS = (f"{DIR}/out.csv", f"{DIR}/out.csv", f"{DIR}/missing/out.csv", DIR, f"{DIR}/ü💥.csv", f"{DIR}/existing.txt",
                "relative.png", "")
EXPORT_PATHS = (f"{DIR}/ds.json", f"{DIR}/missing/ds.json", DIR, "relative.json", "")

VALUES = {
    "workload_kind": WORKLOADS + ("inference", "TRAIN"),
    "model": ("7b", "8b", "llama-3.1-8b", "LLAMA-2-7B", "llama-3.1-7b", "x.json", f"{DIR}/config.json", f"{DIR}",
              f"{DIR}/missing", str(HF_CONFIGS / "gpt2"), str(HF_CONFIGS / "llama-3.1-8b" / "config.json")),
    "context": ("1", "512", "4096", "131072", "131073"),
    "min_slots": ("1", "4", "1000000"),
    "max_latency_ms": ("0.001", "50", "10000000", "10000001", "1e-300"),
    "lora_rank": ("1", "16", "65536", "65537"),
    "seq_len": ("1", "2048", "4096", "131072", "131073"),
    "global_batch": ("1", "3", "16", "1024"),
    "headroom": ("0.1", "10%", "0", "0.5", "0.99", "0.999999", "1", "100%", "-0.1", "1e-300", "5e-324", "99.9999%"),
    "gpu": PLAN_FIELD_VALUES["gpu"],
    "gpu_types": PLAN_FIELD_VALUES["gpu"],
    "gpus": PLAN_FIELD_VALUES["gpus"],
    "tensor_parallel": PLAN_FIELD_VALUES["tensor_parallel"],
    "pipeline_parallel": PLAN_FIELD_VALUES["pipeline_parallel"],
    "virtual_stages": PLAN_FIELD_VALUES["virtual_stages"],
    "zero_stage": PLAN_FIELD_VALUES["zero_stage"],
    "checkpointing": PLAN_FIELD_VALUES["checkpointing"],
    "precision": PRECISIONS,
    "grad_comm_precision": PRECISIONS,
    "offload": ("none", "cpu", "nvme"),
    "micro_batch": ("1", "2", "8", "4096"),
    "quantization": QUANTIZATIONS,
    "kv_cache_dtype": KV_CACHE_DTYPES,
    "slots": ("1", "16", "4096"),
    "mig_profile": PLAN_FIELD_VALUES["mig_profile"],
    "output_format": ("table", "json", "csv", "xml"),
    "max_gpus": ("1", "2", "4", "1048577"),
    "objective": ("throughput", "min-gpus", "per-gpu", "max"),
    "min_tokens_per_s": ("1", "1000", "1e15", "1e16", "1e-300"),
    "time_limit_s": ("0.001", "0.05", "0.5", "3601"),
    "workers": ("1", "2", "64", "65"),
    "engine": ("cp-sat", "exhaustive", "gurobi"),
    "request_path": (f"{DIR}/request.json", f"{DIR}/request.json", "-", f"{DIR}/missing.json", DIR),
    "output_path": OUTPUT_PATHS,
    "plot_path": OUTPUT_PATHS,
}
PATH_OPTIONS = {"output_path", "plot_path", "export", "request_path"}
"""Options whose values are files: only curated paths inside the example's directory."""


def options_of(command: str) -> list[click.Option]:
    return [param for param in cli.main.commands[command].params if isinstance(param, click.Option)]


@st.composite
def option_group(draw, command: str) -> list[str]:
    """One real option of ``command`` with a valid-or-adversarial value."""
    param = draw(st.sampled_from(options_of(command)))
    flag = draw(st.sampled_from(param.opts + param.secondary_opts))
    if param.is_flag:
        return [flag]
    if param.name == "export":
        target = draw(st.sampled_from(("deepspeed", "vllm", "megatron", "")))
        return [flag, target, draw(st.sampled_from(EXPORT_PATHS))]
    if param.name in ("allow", "forbid", "pin"):
        return [flag, draw(st.one_of(choice_list(), text_values))]
    known = VALUES.get(param.name, ("1",))
    if param.name in PATH_OPTIONS:
        return [flag, draw(st.sampled_from(known))]
    # Mostly real values, so that most runs get past click into the library's own checks.
    return [flag, draw(st.one_of(st.sampled_from(known), st.sampled_from(known), st.sampled_from(known), text_values))]


JUNK = st.one_of(
    st.sampled_from(["--no-such-flag", "--max-gpu", "-x", "extra", "--", "--model=8b", "--gpus=1", "--pin=zero_stage=1",
                     "--format=json", "--debug"]),
    st.text(max_size=8).map(lambda text: "--" + text),
)

BASELINE = {
    "estimate": ["--model", "8b", "--gpu", "h100"],
    "solve": ["--model", "8b", "--max-gpus", "2", "--time-limit", "2", "--workers", "2"],
    "pareto": ["--model", "7b", "--max-gpus", "2"],
}


def without_given(baseline: list[str], groups: list[list[str]]) -> list[str]:
    """The baseline's flags that the drawn options do not give (a single-value option given
    twice is refused, so the baseline must not supply a second one); the drawn options may
    still repeat among themselves, which tests that refusal."""
    given = {group[0] for group in groups if group}
    kept, index = [], 0
    while index < len(baseline):
        if baseline[index] in given:
            index += 2
            continue
        kept.append(baseline[index])
        index += 1
    return kept


def output_format_of(groups: list[list[str]]) -> str:
    formats = [group[1] for group in groups if group and group[0] == "--format"]
    return formats[-1] if formats else "table"


def written_files(groups: list[list[str]], directory: str) -> list[str]:
    """Fresh output files the run was asked to write (the last of each option wins)."""
    targets = {}
    for group in groups:
        if group[0] in ("--output", "--plot") and group[1]:
            targets[group[0]] = group[1]
        elif group[0] == "--export" and group[2]:
            targets[group[0]] = group[2]
    paths = []
    for path in targets.values():
        path = os.path.join(directory, path.replace(DIR, directory))
        if not os.path.exists(path):
            paths.append(path)
    return paths


def prepare_directory(directory: str, data) -> str:
    """Files the generated arguments may name: a request, a config.json, an existing file."""
    request = mutate(data.draw, data.draw(st.sampled_from(SOLVE_REQUESTS))) if data.draw(st.booleans()) else data.draw(st.sampled_from(SOLVE_REQUESTS))
    text = json.dumps(request)
    write(os.path.join(directory, "request.json"), text)
    write(os.path.join(directory, "existing.txt"), "keep me\n")
    config = json.loads((HF_CONFIGS / "llama-3.1-8b" / "config.json").read_text())
    write(os.path.join(directory, "config.json"), json.dumps(mutate(data.draw, config)))
    return text


def fuzz_command(command: str, data, test: str) -> None:
    groups = data.draw(st.lists(option_group(command), min_size=1, max_size=5), label="options")
    if data.draw(st.integers(0, 9)) == 0:
        groups.insert(data.draw(st.integers(0, len(groups))), [data.draw(JUNK)])
    args = [command] + without_given(BASELINE[command], groups) + [token for group in groups for token in group]
    with scratch_directory() as directory:
        stdin = prepare_directory(directory, data)
        files = written_files(groups, directory)
        result = run(resolve(args, directory), stdin=stdin)
        check_cli(result, test, output_format_of(groups), files, directory)
        if os.path.isdir(os.path.join(directory, "missing")):
            raise AssertionError("a run created a directory")


@fuzz_settings(800)
@given(data=st.data())
def test_estimate_with_random_flags(data):
    fuzz_command("estimate", data, "cli:estimate flags")


@fuzz_settings(600)
@given(data=st.data())
def test_solve_with_random_flags(data):
    fuzz_command("solve", data, "cli:solve flags")


@fuzz_settings(300)
@given(data=st.data())
def test_pareto_with_random_flags(data):
    fuzz_command("pareto", data, "cli:pareto flags")


@fuzz_settings(200)
@given(argv=st.lists(st.one_of(st.sampled_from(["estimate", "solve", "pareto", "pack", "gpus", "models", "--format",
                                                 "json", "--version", "estimat", "help"]), text_values, JUNK),
                     min_size=0, max_size=4))
def test_random_argument_vectors(argv):
    with scratch_directory() as directory:
        result = run(argv)
        if result.exit_code == 0:
            # --help and --version are valid anywhere; their output is text, not a result.
            check_cli(result, "cli:argv", "table", (), directory)
        else:
            check_cli(result, "cli:argv", None, (), directory)


# ---------------------------------------------------------------------------------------
# Hugging Face config.json files passed as --model


def config_documents():
    names = sorted(path.name for path in HF_CONFIGS.iterdir())
    fixtures = st.sampled_from(names).map(lambda name: json.loads((HF_CONFIGS / name / "config.json").read_text()))
    return fixtures


CONFIG_SIZES = st.sampled_from([0, -1, 1, 2, 3, 7, 64, 65536, 2**20, 2**30, 2**31 - 1, 2**31, 2**63, 10**30, 1.0, 4096.0,
                                True, None, "4096", float("nan"), "\ud800"])


@fuzz_settings(500)
@given(data=st.data())
def test_config_json_models(data):
    document = data.draw(config_documents(), label="fixture")
    choice = data.draw(st.integers(0, 9))
    if choice < 6:
        document = mutate(data.draw, document, st.one_of(json_scalars, CONFIG_SIZES))
    elif choice < 8:
        document = data.draw(random_json)
    text = json.dumps(document)
    if choice == 9:
        text = data.draw(st.sampled_from(["", "{", "[]", "null", "\ufeff{}", '{"model_type": "llama"}', "{'a': 1}",
                                          '{"model_type": NaN}', "[" * 5000, '{"a": 1e999}', text[: len(text) // 2]]))
    name = data.draw(st.sampled_from(["config.json", "model.JSON", "config", "ü💥.json"]))
    command = data.draw(st.sampled_from([
        ["estimate", "--gpu", "h100", "--seq-len", "512"],
        ["estimate", "--workload", "infer", "--gpu", "h100", "--context", "512"],
        ["estimate", "--format", "json", "--gpu", "b200", "--gpus", "2", "--zero", "3", "--seq-len", "512"],
        ["estimate", "--workload", "qlora", "--format", "csv", "--seq-len", "256", "--global-batch", "8"],
        ["solve", "--max-gpus", "1", "--time-limit", "1", "--workers", "1", "--format", "json", "--seq-len", "512"],
        ["solve", "--workload", "infer", "--max-gpus", "2", "--time-limit", "1", "--context", "512", "--format", "csv"],
    ]))
    with scratch_directory() as directory:
        path = write(os.path.join(directory, name), text)
        model = path if data.draw(st.booleans()) or name != "config.json" else directory
        result = run(command + ["--model", model])
        output_format = command[command.index("--format") + 1] if "--format" in command else "table"
        check_cli(result, "cli:config.json", output_format, (), directory)


# ---------------------------------------------------------------------------------------
# solve --request: random request structures, from a file and from stdin


@fuzz_settings(400)
@given(data=st.data())
def test_solve_request_files(data):
    base = data.draw(st.sampled_from(SOLVE_REQUESTS))
    choice = data.draw(st.integers(0, 9))
    if choice < 7:
        document = mutate(data.draw, base)
    elif choice < 9:
        document = data.draw(random_json)
    else:
        document = data.draw(st.sampled_from(ADVERSARIAL_JSON))
    text = json.dumps(document)
    if data.draw(st.integers(0, 9)) == 0:
        text = data.draw(st.sampled_from(["", "{", "\xff", "[" * 100_000, " " * 1000, text + "x", text[:-1], "\ud800"]))
    output_format = data.draw(st.sampled_from(["table", "json", "csv"]))
    extra = data.draw(st.sampled_from([[]] * 12 + [["--max-gpus", "2"], ["--model", "8b"], ["--format", "json"]]))
    if "--format" in extra:
        output_format = "json"
    with scratch_directory() as directory:
        use_stdin = data.draw(st.booleans())
        if use_stdin:
            path = "-"
        else:
            path = os.path.join(directory, "request.json")
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as stream:
                stream.write(text)
        result = run(["solve", "--request", path, "--format", output_format] + extra, stdin=text if use_stdin else None)
        check_cli(result, "cli:solve --request", output_format, (), directory)


# ---------------------------------------------------------------------------------------
# pack: cluster, jobs and running files (JSON, TOML, garbage)


@st.composite
def pack_document(draw, bases) -> tuple[str, str]:
    """(file name, text) of a cluster/jobs/running document, mostly almost valid."""
    base = draw(st.sampled_from(bases))
    choice = draw(st.integers(0, 9))
    if choice < 7:
        document = mutate(draw, base)
    elif choice < 9:
        document = draw(random_json)
    else:
        document = draw(st.sampled_from(ADVERSARIAL_JSON))
    extension = draw(st.sampled_from([".json", ".json", ".toml", ".TOML", ".txt", ""]))
    text = to_toml(document) if extension.lower() == ".toml" else json.dumps(document)
    if draw(st.integers(0, 14)) == 0:
        text = draw(st.sampled_from(["", "{", "\x00", "a = [" * 2000, "[[[", "nodes = 1\nnodes = 2", "[" * 100_000,
                                     "\ufeff{}", text[: len(text) // 2]]))
    return extension, text


@fuzz_settings(500)
@given(data=st.data())
def test_pack_files(data):
    cluster_extension, cluster_text = data.draw(pack_document(CLUSTERS), label="cluster")
    jobs_extension, jobs_text = data.draw(pack_document(JOBS), label="jobs")
    running = data.draw(st.one_of(st.none(), pack_document(RUNNING)), label="running")
    output_format = data.draw(st.sampled_from(["table", "json", "csv"]))
    flags = data.draw(st.sampled_from([[]] * 12 + [[["--time-limit", "0.001"]], [["--time-limit", "nan"]], [["--workers", "0"]],
                                                    [["--workers", "65"]], [["--format", "yaml"]], [["--cluster"]], [["--jobs", ""]],
                                                    [["--running", DIR]]]))
    with scratch_directory() as directory:
        args = ["pack", "--cluster", write(os.path.join(directory, "cluster" + cluster_extension), cluster_text),
                "--jobs", write(os.path.join(directory, "jobs" + jobs_extension), jobs_text),
                "--time-limit", "1", "--workers", "2", "--format", output_format]
        if running is not None:
            args += ["--running", write(os.path.join(directory, "running" + running[0]), running[1])]
        for group in flags:
            args += group
        if any(group[0] == "--format" for group in flags):
            output_format = "yaml"
        result = run(resolve(args, directory))
        check_cli(result, "cli:pack files", output_format, (), directory)


# ---------------------------------------------------------------------------------------
# Large files: every reader is bounded


def test_every_file_reader_is_bounded(tmp_path):
    """Requests (api.MAX_REQUEST_BYTES), config.json and catalog-sized files
    (catalog_files.MAX_CATALOG_FILE_BYTES) and cluster/jobs files (cluster.read_document)
    over the limit are refused with one line, without being parsed."""
    big_request = tmp_path / "request.json"
    big_request.write_text('{"workload": {"model": "8b"}, "space": {}}' + " " * MAX_REQUEST_BYTES)
    big_config = tmp_path / "config.json"
    big_config.write_text('{"model_type": "llama"' + ", " * (MAX_CATALOG_FILE_BYTES // 2) + "}")
    big_cluster = tmp_path / "cluster.json"
    big_cluster.write_text(json.dumps({"nodes": [CLUSTERS[0]["nodes"][0]] * 20_000}))
    big_toml = tmp_path / "jobs.toml"
    big_toml.write_text("# padding\n" * (MAX_CATALOG_FILE_BYTES // 10 + 1))
    small_jobs = tmp_path / "jobs.json"
    small_jobs.write_text(json.dumps(JOBS[0]))
    cases = [
        (["solve", "--request", str(big_request)], "larger than"),
        (["solve", "--request", "-"], "larger than"),
        (["estimate", "--model", str(big_config)], "larger than"),
        (["pack", "--cluster", str(big_cluster), "--jobs", str(small_jobs)], "more than"),
        (["pack", "--cluster", str(tmp_path / "c.json"), "--jobs", str(big_toml)], ""),
        (["pack", "--cluster", str(big_cluster), "--jobs", str(big_toml)], "more than"),
    ]
    (tmp_path / "c.json").write_text(json.dumps(CLUSTERS[0]))
    for args, fragment in cases:
        stdin = big_request.read_text() if "-" in args else None
        result = run(args, stdin=stdin)
        check_cli(result, "cli:large files", None, (), str(tmp_path))
        assert result.exit_code == 2 and fragment in result.stderr, (args, result.stderr)
    # Just under the request limit: read and parsed (whitespace), then refused or answered.
    near = tmp_path / "near.json"
    near.write_text(" " * (MAX_REQUEST_BYTES - 100) + json.dumps({"workload": {"model": "8b"}, "space": {"max_gpus": 1}}))
    check_cli(run(["solve", "--request", str(near), "--format", "json"]), "cli:large files", "json", (), str(tmp_path))
    # A large request of many pins, under the limit: refused quickly with one line.
    pins = {f"field{index}": "1" for index in range(20_000)}
    many = tmp_path / "many.json"
    many.write_text(json.dumps({"workload": {"model": "8b"}, "space": {"pin": pins}}))
    assert check_cli(run(["solve", "--request", str(many)]), "cli:large files", None, (), str(tmp_path))


# ---------------------------------------------------------------------------------------
# Output files: written atomically, never left behind by a failing run


def test_failing_runs_leave_no_output_and_no_temporary_file(tmp_path):
    missing = tmp_path / "missing"
    cases = [
        # pareto: the front is empty, so the plot fails; the CSV must not be left behind either.
        ["pareto", "--model", "405b", "--gpu", "rtx4090", "--max-gpus", "1", "--forbid", "offload=cpu,nvme",
         "--output", str(tmp_path / "front.csv"), "--plot", str(tmp_path / "front.png")],
        ["pareto", "--model", "8b", "--max-gpus", "1", "--output", str(missing / "front.csv")],
        ["pareto", "--model", "8b", "--max-gpus", "1", "--output", str(tmp_path / "front.csv"), "--plot", str(missing / "front.png")],
        ["pareto", "--model", "8b", "--max-gpus", "1", "--pin", "zero=1", "--output", str(tmp_path / "front.csv")],
        ["solve", "--model", "8b", "--max-gpus", "1", "--export", "vllm", str(tmp_path / "vllm.json")],
        ["solve", "--model", "8b", "--max-gpus", "1", "--export", "deepspeed", str(missing / "ds.json")],
        ["solve", "--model", "405b", "--gpu", "rtx4090", "--max-gpus", "1", "--forbid", "offload=cpu,nvme",
         "--export", "deepspeed", str(tmp_path / "ds.json")],
    ]
    for args in cases:
        result = run(args)
        written = [arg for arg in args if arg.startswith(str(tmp_path))]
        check_cli(result, "cli:atomic outputs", None, written, str(tmp_path))
        assert result.exit_code == 2, (args, result.stderr)
        assert sorted(os.listdir(tmp_path)) == [], (args, os.listdir(tmp_path))


def test_successful_runs_write_complete_files(tmp_path):
    pytest.importorskip("matplotlib")  # --plot needs the 'plot' extra, which CI does not install
    csv_path, png_path, ds_path = tmp_path / "front.csv", tmp_path / "front.png", tmp_path / "ds.json"
    result = run(["pareto", "--model", "8b", "--max-gpus", "2", "--output", str(csv_path), "--plot", str(png_path)])
    check_cli(result, "cli:atomic outputs", "table", [str(csv_path), str(png_path)], str(tmp_path))
    assert png_path.read_bytes().startswith(b"\x89PNG")
    assert csv_path.read_text().count("\n") >= 2
    result = run(["solve", "--model", "8b", "--max-gpus", "2", "--export", "deepspeed", str(ds_path), "--format", "json"])
    check_cli(result, "cli:atomic outputs", "json", [str(ds_path)], str(tmp_path))
    assert json.loads(ds_path.read_text())
    # Overwriting an existing file is atomic too: a failing run keeps the old content.
    result = run(["pareto", "--model", "8b", "--max-gpus", "1", "--pin", "zero=1", "--output", str(csv_path)])
    assert result.exit_code == 2 and csv_path.read_text().count("\n") >= 2
    assert sorted(os.listdir(tmp_path)) == ["ds.json", "front.csv", "front.png"]
