"""What every fuzz test shares: adversarial values, valid documents to mutate, the checks a
run must pass, and the tally of generated inputs printed at the end of the session.

The rule under test (vramopt/cli.py, vramopt/errors.py): a bad input ends in exactly one
line ``error: ...`` on stderr and exit status 2 -- never a traceback, never ``internal
error`` (exit 70, a bug), never a hang, never a partially written output file; the API
raises a ``VramoptError`` subclass and nothing else.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import faulthandler
import io
import json
import math
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from click.testing import CliRunner
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from vramopt import cli

# ---------------------------------------------------------------------------------------
# Hypothesis settings: the 'ci' profile (tests/conftest.py) is derandomized with 200
# examples per property; fuzz tests set their own counts, scaled by the profile's.

PROFILE_EXAMPLES = 200
"""max_examples of the 'ci' profile; the 'long' profile multiplies every count by 10."""


def fuzz_settings(examples: int) -> settings:
    scale = max(settings.default.max_examples / PROFILE_EXAMPLES, 1.0)
    return settings(
        max_examples=int(examples * scale),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                               HealthCheck.function_scoped_fixture],
    )


# ---------------------------------------------------------------------------------------
# The tally: how many inputs were generated, how many were refused, how many tracebacks


@dataclass
class Tally:
    generated: int = 0
    rejected: int = 0
    """Inputs refused with exit status 2 (CLI) or a VramoptError (API): the bad inputs."""
    accepted: int = 0
    """Inputs answered (exit 0, a response): the valid ones among the generated. A tally with
    none accepted means every input was refused, which a vramopt refusing everything would
    also produce (tests/fuzz/test_zz_tally.py fails then)."""
    tracebacks: int = 0
    internal_errors: int = 0
    by_test: Counter = field(default_factory=Counter)
    accepted_by_test: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, test: str, rejected: bool, traceback: bool = False, internal: bool = False) -> None:
        with self.lock:
            self.generated += 1
            self.by_test[test] += 1
            if rejected:
                self.rejected += 1
            else:
                self.accepted += 1
                self.accepted_by_test[test] += 1
            self.tracebacks += int(traceback)
            self.internal_errors += int(internal)

    def accepted_fraction(self) -> float:
        return self.accepted / self.generated if self.generated else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"generated": self.generated, "rejected": self.rejected, "accepted": self.accepted,
                "tracebacks": self.tracebacks, "internal_errors": self.internal_errors,
                "by_test": dict(sorted(self.by_test.items())),
                "accepted_by_test": dict(sorted(self.accepted_by_test.items()))}

    def line(self) -> str:
        return (f"vramopt fuzz: {self.generated} generated inputs, {self.rejected} bad inputs refused with a "
                f"one-line error, {self.accepted} accepted ({self.accepted_fraction():.1%}), {self.tracebacks} tracebacks, "
                f"{self.internal_errors} internal errors")


TALLY = Tally()
"""One per test session (the fuzz conftest prints it and stores it in the pytest cache)."""


# ---------------------------------------------------------------------------------------
# Adversarial values

ADVERSARIAL_TEXT = (
    "-1", "0", "-0", "1e308", "-1e308", "1e-320", "nan", "NaN", "inf", "-inf", "Infinity", "", " ", "ü", "💥",
    "x" * 5000, "0x10", "1e3", "3.5", "99999999999999999999", "9" * 5000, "1_0", "١٢", "\t", "10%", "-", "--",
    "none", "null", "true", "\x00", "a\nb", "%s", "{}", "[]", "=", "==", ",", "every:", "../..", "/", "\ud800",
)
"""Command-line values that are wrong for (nearly) every option."""

ADVERSARIAL_JSON = (
    None, True, False, 0, -1, 2**63, 10**30, -(10**30), 1.5, 1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf,
    "", " ", "ü", "💥", "\ud800", "x" * 2000, "8", "1e3", "none", [], {}, [1, 2], [None], {"a": 1}, {"": None}, [[[[[]]]]],
)
"""JSON values that are wrong for (nearly) every field (NaN and infinities included:
Python's json module reads and writes them)."""

NON_JSON_PYTHON = ((1, 2), frozenset({1}), b"8", 1j)
"""Python values a caller of the API could pass in a dict that JSON cannot hold."""

UNKNOWN_KEYS = ("", "ü", "💥", "unknown", "Model", "model ", "zero", "x" * 300, "__class__", "0")

text_values = st.one_of(st.sampled_from(ADVERSARIAL_TEXT), st.text(max_size=16))
json_scalars = st.one_of(st.sampled_from(ADVERSARIAL_JSON), st.integers(), st.floats(), st.text(max_size=12))
random_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=12,
)


# ---------------------------------------------------------------------------------------
# Mutation of a valid document: the most useful bad inputs are almost right


def paths(document: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON-like document (the root included)."""
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found.extend(paths(value, prefix + (key,)))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found.extend(paths(value, prefix + (index,)))
    return found


def _parent(document: Any, path: tuple) -> Any:
    node = document
    for step in path[:-1]:
        node = node[step]
    return node


MUTATIONS = ("replace", "replace", "replace", "delete", "unknown_key", "wrap", "stringify", "duplicate")


def mutate(draw, document: Any, values=None, count: int | None = None) -> Any:
    """Apply 1-3 random mutations to a deep copy of ``document`` (``draw`` is hypothesis'
    ``data.draw``): replace a value, delete a key, add an unknown key, wrap a value in a
    list, turn it into a string, or duplicate a list item."""
    values = (values if values is not None else json_scalars).map(copy.deepcopy)  # never share a constant list
    document = copy.deepcopy(document)
    for _ in range(count if count is not None else draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(document)))
        kind = draw(st.sampled_from(MUTATIONS))
        if not path:
            if kind == "unknown_key" and isinstance(document, dict):
                document[draw(st.sampled_from(UNKNOWN_KEYS))] = draw(values)
            elif kind == "wrap":
                document = [document]
            continue
        parent, key = _parent(document, path), path[-1]
        if kind == "replace":
            parent[key] = draw(values)
        elif kind == "delete":
            del parent[key]
        elif kind == "unknown_key":
            target = parent[key] if isinstance(parent[key], dict) else parent
            if isinstance(target, dict):
                target[draw(st.sampled_from(UNKNOWN_KEYS))] = draw(values)
        elif kind == "wrap":
            parent[key] = [parent[key]]
        elif kind == "stringify":
            try:
                parent[key] = json.dumps(parent[key]) if not isinstance(parent[key], str) else parent[key] + "ü"
            except TypeError:  # a value JSON cannot hold (a set, bytes)
                parent[key] = repr(parent[key])
        elif kind == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
    return document


# ---------------------------------------------------------------------------------------
# Valid documents (small spaces: tiny models, few GPUs, short time limits); each is accepted
# as it stands (tests/fuzz/test_zz_tally.py), so that its mutations start from a valid input.
# The 7B model (Llama 2) has a 4,096-token context: its serving workloads say so.

SOLVE_REQUESTS = (
    {"workload": {"model": "8b"}, "space": {"max_gpus": 2, "time_limit_s": 2, "workers": 2}},
    {"schema": "vramopt/v1", "workload": {"kind": "infer", "model": "8b", "context": 4096, "min_slots": 2},
     "space": {"max_gpus": 2, "gpus": ["h100"], "time_limit_s": 2}},
    {"workload": {"kind": "lora", "model": "7b", "seq_len": 2048, "global_batch": 16, "lora_rank": 8},
     "space": {"gpus": ["h100"], "max_gpus": 1, "pin": {"zero_stage": "1"}, "allow": {"offload": ["none", "cpu"]},
               "forbid": {"precision": ["fp32"]}}, "engine": "exhaustive"},
    {"workload": {"model": "7b", "headroom_fraction": 0.2}, "space": {"max_gpus": 4, "objective": "min-gpus", "min_tokens_per_s": 1000}},
)
PARETO_REQUESTS = (
    {"workload": {"model": "8b"}, "space": {"max_gpus": 2}},
    {"workload": {"kind": "infer", "model": "7b", "context": 4096, "max_latency_ms": 50}, "space": {"max_gpus": 1, "gpus": ["a100-80gb"]}},
)
ESTIMATE_REQUESTS = (
    {"workload": {"model": "8b"}, "plan": {"gpu": "b200", "gpus": 1}},
    {"workload": {"kind": "infer", "model": "8b"}, "plan": {"gpu": "h100", "gpus": 1, "quantization": "fp8", "slots": 4}},
    {"workload": {"kind": "qlora", "model": "7b", "global_batch": 8},
     "plan": {"gpu": "a100-80gb", "gpus": 2, "zero_stage": 2, "checkpointing": "every:4", "micro_batch": 2}},
    {"workload": {"kind": "infer", "model": "7b", "context": 4096}, "plan": {"gpu": "h100", "gpus": 1, "mig_profile": "3g.40gb", "slots": 2}},
)
CLUSTERS = (
    {"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8, "free_gpus": [0, 1, 2, 3]}]},
    {"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8, "free_gpus": [0, 1], "mig": {"3": ["3g.40gb", "3g.40gb"]}},
               {"name": "n2", "gpu": "a100-80gb", "gpus": 2, "host_ram_bytes": 2e12, "nvme_bytes": 1e13}]},
)
JOBS = (
    [{"id": "train-8b", "model": "8b", "max_gpus": 2, "global_batch": 64}],
    [{"id": "chat", "model": "7b", "workload": "infer", "weight": 2.0, "max_gpus": 1, "context": 4096},
     {"id": "lora", "model": "7b", "workload": "lora", "max_gpus": 2, "global_batch": 16, "pin": {"zero_stage": 1},
      "min_tokens_per_s": 10}],
)
RUNNING = ([{"job": "old", "gpus_by_node": {"n1": [0]}}], [{"job": "old", "gpus_by_node": {"n1": ["3:3g.40gb"]}}])
PACK_REQUESTS = tuple(
    {"cluster": cluster, "jobs": jobs, "time_limit_s": 1, "workers": 2} for cluster in CLUSTERS for jobs in JOBS
) + ({"cluster": CLUSTERS[1], "jobs": JOBS[1], "running": RUNNING[1], "time_limit_s": 1, "workers": 1},)


# ---------------------------------------------------------------------------------------
# Writing documents: JSON, TOML (a small writer, enough for these shapes), garbage


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(key))} = {toml_value(item)}" for key, item in value.items()) + "}"
    return "null"  # not TOML: the file is invalid, which is the point


def to_toml(document: Any) -> str:
    """A TOML text of a dict (a list becomes ``jobs = [...]``, TOML has no top-level array)."""
    if not isinstance(document, dict):
        document = {"jobs": document}
    return "".join(f"{json.dumps(str(key))} = {toml_value(value)}\n" for key, value in document.items())


def write(path: str, text: str | bytes) -> str:
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(path, mode, **({} if isinstance(text, bytes) else {"encoding": "utf-8", "errors": "surrogatepass"})) as stream:
        stream.write(text)
    return path


# ---------------------------------------------------------------------------------------
# The checks


def leftover_temporaries(directory: str) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith(".vramopt-")]


def check_cli(result, test: str, output_format: str | None = None, files: Iterable[str] = (), directory: str | None = None) -> bool:
    """Assert the rule for one CLI run, record it in the tally, return whether it was refused.

    ``files``: output files the run was asked to write (they must exist with content after
    exit 0 and must not exist after a failure); ``directory``: where no temporary file may
    be left behind.
    """
    stdout, stderr = result.stdout, result.stderr
    traceback = "Traceback" in stdout or "Traceback" in stderr
    # The CLI's internal-error line (cli.py: "error: internal error: ..."), not any mention of
    # the words: `vramopt --help` lists exit status "70 internal error".
    internal = "error: internal error:" in stderr or "error: internal error:" in stdout
    refused = result.exit_code != 0
    TALLY.record(test, refused, traceback, internal)
    context = (result.exit_code, stderr[-2000:], repr(result.exception))
    assert not traceback, context
    assert not internal, context
    assert result.exception is None or isinstance(result.exception, SystemExit), context
    assert result.exit_code in (0, 2), context
    if directory is not None:
        assert leftover_temporaries(directory) == [], context
    if refused:
        assert stderr.endswith("\n") and stderr.count("\n") == 1, context
        assert stderr.startswith("error: ") and len(stderr.strip()) > len("error:"), context
        for path in files:
            assert not os.path.exists(path), (path, context)
        return True
    assert all(line.startswith("note (") for line in stderr.splitlines()), context
    check_output(stdout, output_format)
    for path in files:
        assert os.path.isfile(path) and os.path.getsize(path) > 0, (path, context)
    return False


def check_output(stdout: str, output_format: str | None) -> None:
    """Exit 0: the output must be well formed for its format."""
    assert stdout.strip(), "exit 0 with nothing on stdout"
    if output_format == "json":
        data = json.loads(stdout, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(f"{name} in JSON output")))
        items = data if isinstance(data, list) else [data]
        for item in items:
            assert isinstance(item, dict) and item.get("schema") == "vramopt/v1", str(item)[:300]
    elif output_format == "csv":
        rows = list(csv.reader(io.StringIO(stdout)))
        assert len(rows) >= 2, stdout[:300]
        assert all(len(row) == len(rows[0]) for row in rows), stdout[:300]


def check_api(call, request, test: str):
    """Call the API: a response must be plain JSON (no NaN), anything else a VramoptError."""
    from vramopt.errors import VramoptError

    try:
        with watchdog():
            response = call(request)
    except VramoptError as error:
        TALLY.record(test, True)
        message = str(error)
        assert message and "internal error" not in message, message
        return None
    except Exception:
        TALLY.record(test, True, traceback=True)
        raise
    TALLY.record(test, False)
    data = response.to_dict()
    assert data["schema"] == "vramopt/v1"
    json.dumps(data, allow_nan=False)
    return data


HANG_S = 120
"""One run still going after this long is a hang: the watchdog dumps every thread's stack
and ends the test session (a hang must fail CI, not stall it)."""


@contextlib.contextmanager
def watchdog(seconds: float = HANG_S):
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def run(args: list[str], stdin: str | None = None):
    """The CLI through click's runner, stderr kept apart from stdout."""
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()  # click >= 8.2 keeps stderr apart by default
    if isinstance(stdin, str):
        stdin = stdin.encode("utf-8", "surrogatepass")  # a lone surrogate becomes bytes that are not UTF-8
    with watchdog():
        return runner.invoke(cli.main, args, input=stdin)
