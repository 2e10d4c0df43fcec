"""Mutation test of the cost model: does the test suite notice when a cost term is wrong?

Run: python benchmarks/mutation_test.py [--source head|worktree] [--only NAME,...]
                                         [--tests PATH ...] [--no-baseline] [--timeout-s 1800]

Each mutation below changes one line of vramopt/costs/ the way a plausible bug would (a
term dropped, a coefficient scaled, a divisor swapped). It is defined by its file, an exact
piece of source text and its replacement, not by a line number, so it survives edits
elsewhere in the file; a piece of text that no longer occurs exactly once stops the script
before anything runs, naming the mutation.

The repository is copied to a temporary directory (``--source head``: the last commit, via
``git archive``; ``worktree``: the files on disk, tracked and untracked-but-not-ignored), and
only the copy is ever mutated. For each mutation the suite runs in the copy with
``python -m pytest -x -q -m "not docs_snapshot" -p no:cacheprovider`` (PYTHONPATH = the
copy), unit tests first so that a caught mutation stops early. The docs-snapshot tests are
left out: they are change detectors that fail for any change of a printed number, so they
would "catch" every mutation without saying anything about the cost model.

First the unmutated copy runs once (``--no-baseline`` skips it): a test that already fails
there is reported and deselected from the mutation runs. Output: one row per mutation with
the first failing test (caught) or SURVIVED, and the seconds the run took. A catch is
confirmed by running that test alone twice: it must fail with the mutation and pass without
it (otherwise the row says UNCONFIRMED: an order-dependent or flaky failure caught nothing).
Exit status 1 if a mutation survived, was unconfirmed or timed out, 2 if a mutation's text
is not found.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_ORDER = ("tests/unit", "tests/golden", "tests/regression", "tests/property", "tests/cli", "tests/fuzz")
"""Fast, formula-level tests first: with -x the run stops at the first test that notices."""
FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+)(?: - (.*))?$", re.M)


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    find: str
    replace: str


COSTS = "vramopt/costs/"
MUTATIONS = (
    Mutation("KV cache not divided by tp", COSTS + "inference.py",
             "kv_shards = p * kv_split", "kv_shards = p"),
    Mutation("offload time dropped from the step", COSTS + "training.py",
             "step_time = pipeline_seconds + data_parallel_seconds + offload_seconds",
             "step_time = pipeline_seconds + data_parallel_seconds"),
    Mutation("pipeline bubble deleted", COSTS + "training.py",
             "slots = micro_batches + (columns.pipeline_parallel - 1.0) / columns.virtual_stages",
             "slots = micro_batches + 0.0 * (columns.pipeline_parallel - 1.0) / columns.virtual_stages"),
    Mutation("ZeRO-3 weights not divided by dp", COSTS + "memory.py",
             "weights = params * stored_bytes / np.where(zero >= 3, dp, 1.0)", "weights = params * stored_bytes"),
    Mutation("Adam K = 12 -> 8", COSTS + "precision.py",
             "ADAM_STATE_BYTES_MIXED = 12.0", "ADAM_STATE_BYTES_MIXED = 8.0"),
    Mutation("activations 34 -> 24 sbh (replicated 10 dropped)", COSTS + "activations.py",
             "REPLICATED_SBH = 10.0", "REPLICATED_SBH = 0.0"),
    Mutation("flash attention keeps the s^2 scores", COSTS + "memory.py",
             "keep_scores = (columns.flash_attention == 0) & (columns.checkpoint_kind == CHECKPOINT_NONE)",
             "keep_scores = columns.checkpoint_kind == CHECKPOINT_NONE"),
    Mutation("logits 4 bytes -> 2", COSTS + "memory.py",
             "return 4.0 * seq_len * columns.micro_batch * model.vocab_size / columns.tensor_parallel",
             "return 2.0 * seq_len * columns.micro_batch * model.vocab_size / columns.tensor_parallel"),
    Mutation("TP all-reduce volume halved", COSTS + "communication.py",
             "per_all_reduce = 2.0 * (t - 1.0) / t * message / bandwidth",
             "per_all_reduce = 1.0 * (t - 1.0) / t * message / bandwidth"),
    Mutation("gradient all-reduce 2(dp-1)/dp -> (dp-1)/dp", COSTS + "communication.py",
             "replicated = 2.0 * fraction * gradient_bytes", "replicated = 1.0 * fraction * gradient_bytes"),
    Mutation("ZeRO-3 parameter gathers: forward only", COSTS + "communication.py",
             "sharded = micro_batches * fraction * (2.0 * weight_bytes + gradient_bytes)",
             "sharded = micro_batches * fraction * (1.0 * weight_bytes + gradient_bytes)"),
    Mutation("recompute extra forward dropped", COSTS + "compute.py",
             "linear = np.where(checkpoint_kind == CHECKPOINT_EVERY, 2.0 * non_embedding_active_parameters(model), 0.0)",
             "linear = np.where(checkpoint_kind == CHECKPOINT_EVERY, 0.0 * non_embedding_active_parameters(model), 0.0)"),
    Mutation("fp8 peak used for bf16", COSTS + "compute.py",
             "table = np.array([gpu.peak_flops_per_s.get(name, 0.0) * base * ratios[name] for name in PRECISIONS])",
             "table = np.array([gpu.peak_flops_per_s.get('fp8' if name == 'bf16' and 'fp8' in gpu.peak_flops_per_s else name, 0.0)"
             " * base * ratios[name] for name in PRECISIONS])"),
    Mutation("host RAM usable fraction ignored (all of it usable)", COSTS + "training.py",
             'fits_host = host_per_node <= gpu.node.host_ram_bytes * coefficient("host_ram_usable_fraction")',
             "fits_host = host_per_node <= gpu.node.host_ram_bytes"),
    Mutation("LoRA trainable parameters doubled", COSTS + "lora.py",
             "return int(model.layers * per_layer_attention + per_layer_mlp_total)",
             "return int(2 * (model.layers * per_layer_attention + per_layer_mlp_total))"),
    Mutation("MIG bandwidth slice dropped", COSTS + "inference.py",
             'bandwidth = gpu.hbm_bandwidth_bytes_per_s * bandwidth_share * coefficient("hbm_bandwidth_efficiency")',
             'bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")'),
    Mutation("speculative acceptance ignored (every draft accepted)", COSTS + "inference.py",
             "tokens_per_step = np.where(speculative, (1.0 - alpha ** (case.speculative_tokens + 1)) / (1.0 - alpha), 1.0)",
             "tokens_per_step = np.where(speculative, case.speculative_tokens + 1.0, 1.0)"),
    Mutation("paged KV waste dropped", COSTS + "kv_cache.py",
             'tokens_held = np.where(paged, in_use * (1.0 + coefficient("paged_kv_waste_fraction")), float(context))',
             "tokens_held = np.where(paged, in_use, float(context))"),
    Mutation("full recomputation keeps 1 sbh, not 2", COSTS + "activations.py",
             "FULL_RECOMPUTE_SBH = 2.0", "FULL_RECOMPUTE_SBH = 1.0"),
    Mutation("interleaved schedule holds no extra activations", COSTS + "memory.py",
             "interleave_factor = np.where(v > 1, 1.0 + (p - 1.0) / (p * v), 1.0)", "interleave_factor = np.ones_like(p)"),
    Mutation("data-parallel overlap dropped", COSTS + "overlap.py",
             "    if not overlap:\n        return communication_s\n    tail",
             "    if True:\n        return communication_s\n    tail"),
    Mutation("QLoRA NF4 4.127 -> 4 bits", COSTS + "lora.py",
             "NF4_BYTES_PER_PARAM = (4 + 0.127) / 8", "NF4_BYTES_PER_PARAM = 4 / 8"),
)


def copy_repository(source: str, target: Path) -> None:
    """The repository's files, never its .git, into ``target``."""
    if source == "head":
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "HEAD"], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(target, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        return
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        path = ROOT / name
        if path.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / name)


def check_patterns(copy: Path, mutations) -> list[str]:
    problems = []
    for mutation in mutations:
        path = copy / mutation.path
        count = path.read_text(encoding="utf-8").count(mutation.find) if path.is_file() else 0
        if count != 1:
            problems.append(f"{mutation.name}: {mutation.path} holds its text {count} times (must be once): {mutation.find!r}")
    return problems


def run_suite(copy: Path, tests: list[str], deselect: list[str], stop_at_first: bool, timeout_s: float):
    """(failing test ids, timed out, seconds, pytest's last line) of one pytest run in the copy."""
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-m", "not docs_snapshot", "-p", "no:cacheprovider",
               *(["-x"] if stop_at_first else []), *tests, *[f"--deselect={item}" for item in deselect]]
    environment = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    started = time.perf_counter()
    try:
        completed = subprocess.run(command, cwd=copy, env=environment, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [], True, time.perf_counter() - started, "timed out"
    failing = [test for test, _ in FAILED_LINE.findall(completed.stdout)]
    last = (completed.stdout.strip().splitlines() or [""])[-1]
    messages = [message for _, message in FAILED_LINE.findall(completed.stdout)]
    if failing and messages[0]:
        last = messages[0][:160]
    if completed.returncode not in (0, 1) and not failing:  # collection error, usage error, crash
        failing = [f"(pytest exit {completed.returncode}: {last})"]
    return failing, False, time.perf_counter() - started, last


def uses_the_copy(copy: Path) -> bool:
    probe = subprocess.run([sys.executable, "-c", "import vramopt; print(vramopt.__file__)"], cwd=copy, capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=str(copy)), check=False)
    return probe.stdout.strip().startswith(str(copy))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("head", "worktree"), default="head",
                        help="copy the last commit (default) or the files as they are on disk")
    parser.add_argument("--only", help="comma-separated mutation names (or unique prefixes) to run")
    parser.add_argument("--tests", nargs="+", default=list(TEST_ORDER), help="test paths, in the order to run them")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--deselect", action="append", default=[], help="a test id to leave out (repeatable)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="hang guard per pytest run")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    arguments = parser.parse_args()
    mutations = MUTATIONS
    if arguments.only:
        wanted = [item.strip() for item in arguments.only.split(",") if item.strip()]
        mutations = tuple(mutation for mutation in MUTATIONS if any(mutation.name.startswith(item) for item in wanted))
        if len(mutations) == 0:
            parser.error(f"no mutation matches {arguments.only!r}; --list shows them")
    if arguments.list:
        for mutation in mutations:
            print(f"{mutation.name}  ({mutation.path})")
        return 0
    with tempfile.TemporaryDirectory(prefix="vramopt-mutation-") as scratch:
        copy = Path(scratch)
        copy_repository(arguments.source, copy)
        problems = check_patterns(copy, mutations)
        if problems:
            print("error: mutation text not found (the source changed; update MUTATIONS):", *problems, sep="\n  ", file=sys.stderr)
            return 2
        if not uses_the_copy(copy):
            print(f"error: with PYTHONPATH={copy}, {sys.executable} does not import vramopt from the copy", file=sys.stderr)
            return 2
        deselect = list(arguments.deselect)
        if not arguments.no_baseline:
            failing, timed_out, seconds, last = run_suite(copy, arguments.tests, deselect, False, arguments.timeout_s)
            print(f"baseline (unmutated, {arguments.source}): {len(failing)} failing test(s) in {seconds:.0f} s: {last}")
            for item in failing:
                print(f"  deselected, fails without any mutation: {item}")
            if timed_out or any(item.startswith("(pytest exit") for item in failing):
                print("error: the unmutated suite does not run to the end; fix that first", file=sys.stderr)
                return 2
            deselect += failing
        rows = []
        for mutation in mutations:
            path = copy / mutation.path
            original = path.read_text(encoding="utf-8")
            path.write_text(original.replace(mutation.find, mutation.replace), encoding="utf-8")
            try:
                failing, timed_out, seconds, last = run_suite(copy, arguments.tests, deselect, True, arguments.timeout_s)
                # A catch counts when the failing test, run alone, fails with the mutation ...
                alone_mutated = bool(failing) and bool(run_suite(copy, [failing[0]], [], True, arguments.timeout_s)[0])
            finally:
                path.write_text(original, encoding="utf-8")
            # ... and passes without it (not an order-dependent or flaky failure).
            alone_clean = bool(failing) and not run_suite(copy, [failing[0]], [], True, arguments.timeout_s)[0]
            if timed_out:
                verdict = "TIMEOUT"
            elif not failing:
                verdict = "SURVIVED"
            elif alone_mutated and alone_clean:
                verdict = failing[0]
            else:
                verdict = f"UNCONFIRMED ({failing[0]} alone: {'fails' if alone_mutated else 'passes'} mutated, " \
                          f"{'passes' if alone_clean else 'fails'} unmutated)"
            rows.append((mutation, verdict, seconds))
            print(f"{mutation.name}: {verdict} ({seconds:.0f} s; {last})", flush=True)
    print()
    width = max(len(mutation.name) for mutation, _, _ in rows)
    files = max(len(mutation.path.removeprefix(COSTS)) for mutation, _, _ in rows)
    print(f"{'mutation':<{width}}  {'file':<{files}}  {'s':>5}  caught by")
    print(f"{'-' * width}  {'-' * files}  {'-' * 5}  {'-' * 9}")
    for mutation, verdict, seconds in rows:
        print(f"{mutation.name:<{width}}  {mutation.path.removeprefix(COSTS):<{files}}  {seconds:>5.0f}  {verdict}")
    survived = [mutation.name for mutation, verdict, _ in rows if verdict.startswith(("SURVIVED", "TIMEOUT", "UNCONFIRMED"))]
    print(f"\n{len(rows) - len(survived)} of {len(rows)} mutations caught" + (f"; not caught: {', '.join(survived)}" if survived else ""))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
