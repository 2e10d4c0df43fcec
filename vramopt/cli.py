"""The ``vramopt`` command line: parse flags, call the library, display. Nothing else.

Commands: ``solve`` (the search), ``estimate`` (one training plan), ``gpus`` and
``models`` (the catalogs).
A new command is three steps: declare it with ``@main.command()``, stack the shared option
decorators it needs (``workload_options``, ``plan_options``, ``format_option``, from
vramopt/cli_options.py), and end with ``emit(result_dict, output_format, render_table)``.

Exit statuses: 0 success; 1 the output could not be written to stdout (closed, a full
device, an I/O error: one line ``error: ...``; a reader that stops early, as ``| head``
does, ends the run silently); 2 bad input of any kind or no plan (every ``VramoptError`` and
every usage error becomes one line ``error: ...`` on stderr); 70 (EX_SOFTWARE) an internal
error, ``error: internal error: ...`` without a traceback unless ``--debug`` is given; 130
interrupted (Ctrl-C: the line ``interrupted``, no output file written, no status claimed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from vramopt import __version__
from vramopt.display import (
    flatten,
    gpus_json,
    models_json,
    render_gpus,
    render_models,
    pack_rows,
    render_pack,
    render_infeasible,
    render_serving,
    render_solve,
    render_training,
    to_csv,
)
from vramopt.errors import InputError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.hardware import active_hardware, all_gpus, builtin_gpus
from vramopt.cli_hardware import hardware_note, hardware_option, use_request_hardware
from vramopt.cli_cost import add_time_and_cost, cost_options, pack_money_line, price_options, space_cost_fields, with_cost_lines
from vramopt.cli_framework import EXPORT_TARGETS, framework_option, resolve_framework
from vramopt.cli_fronts import AXES, front_response, front_views
from vramopt.cli_stages import check_per_stage, check_stage_checkpointing, per_stage_option, stage_checkpointing_option
from vramopt.display_stages import render_stages
from vramopt.frameworks import DEFAULT_FRAMEWORK
# The error handling and the shared options live in these two modules; their names stay
# importable from here (vramopt.cli.main, cli.EXIT_INTERNAL, cli.TRAINING_ONLY, ...).
from vramopt.cli_group import (  # noqa: F401 - re-exported
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT,
    EXIT_USAGE,
    SingleValueOptions,
    StdoutUnwritable,
    VramoptCommand,
    VramoptGroup,
    echo,
    fail_line,
    interrupt_watch,
    one_line,
)
from vramopt.cli_options import (  # noqa: F401 - re-exported
    DEFAULT_HEADROOM_FRACTION,
    POSITIVE,
    SERVING_ONLY,
    TIME_LIMIT,
    TRAINING_ONLY,
    ChoiceListType,
    HeadroomType,
    apply_options,
    build_plan,
    build_space,
    build_workload,
    collect_choices,
    emit,
    format_option,
    given,
    offload_limits,
    plan_options,
    reject_unused_options,
    with_plan_fields,
    space_options,
    workload_options,
)
from vramopt.models import all_models, load_model
from vramopt.models.checkpoint_quantization import checkpoint_format
from vramopt.api import MAX_REQUEST_BYTES, SolveRequest
from vramopt.cluster import parse_cluster, parse_jobs, parse_running, read_document
from vramopt.input_files import display_path, parse_json, read_bounded
from vramopt.output_files import resolve_target, same_file, write_files_atomically, write_text_atomically
from vramopt.optimizer.search import ENGINES
from vramopt.optimizer.search import solve as solve_request
from vramopt.types import MAX_COUNT, OBJECTIVES, ServingWorkload


# ---------------------------------------------------------------------------------------
# Commands


@click.group(cls=VramoptGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="vramopt")
@click.option("--debug", is_flag=True, hidden=True, help="Show the traceback of internal errors.")
def main(debug: bool) -> None:
    """Find the highest-throughput combination of GPU memory techniques that keeps every
    GPU within its memory headroom. GB = 1e9 bytes throughout.

    Exit statuses: 0 success, 1 stdout cannot take the output, 2 bad input or no plan,
    70 a bug in vramopt (please report it), 130 interrupted.
    """


@main.command()
@workload_options
@plan_options
@click.option("--prefill-replicas", type=click.IntRange(1, MAX_COUNT), default=None,
              help="infer: a disaggregated plan's prefill replicas (with --prefill-tp, --decode-replicas, --decode-tp; docs/serving.md).")
@click.option("--prefill-tp", "prefill_tensor_parallel", type=click.IntRange(1, MAX_COUNT), default=None,
              help="infer: tensor-parallel degree of each prefill replica.")
@click.option("--decode-replicas", type=click.IntRange(1, MAX_COUNT), default=None, help="infer: the decode replicas.")
@click.option("--decode-tp", "decode_tensor_parallel", type=click.IntRange(1, MAX_COUNT), default=None,
              help="infer: tensor-parallel degree of each decode replica (--slots: its max-num-seqs).")
@stage_checkpointing_option
@framework_option
@hardware_option
@cost_options
@format_option()
def estimate(output_format: str, framework: str | None, stage_checkpointing: str | None, **options: Any) -> None:
    """Evaluate one plan (training, fine-tuning, LoRA/QLoRA or serving): memory per GPU,
    whether it fits, and throughput."""
    from vramopt.disaggregated_estimate import disaggregated_estimate, disaggregated_plan, render_disaggregated_estimate

    disaggregated = disaggregated_plan(options, given)
    workload = build_workload(options)
    check_stage_checkpointing(stage_checkpointing, output_format, disaggregated is None and not isinstance(workload, ServingWorkload))
    if disaggregated is not None:
        if not given("quantization"):  # a quantized checkpoint is served in its own format
            disaggregated = replace(disaggregated, quantization=checkpoint_format(load_model(workload.model)) or disaggregated.quantization)
        emit(disaggregated_estimate(workload, disaggregated), output_format, render_disaggregated_estimate)
        return
    if isinstance(workload, ServingWorkload):
        if framework not in (None, DEFAULT_FRAMEWORK):
            raise InputError(f"--framework {framework} applies to training workloads; serving plans export to vLLM or SGLang")
        if not given("quantization"):  # a quantized checkpoint is served in its own format
            options["quantization"] = checkpoint_format(load_model(workload.model)) or options["quantization"]
        result = estimate_serving(workload, build_plan(options)).to_dict()
        add_time_and_cost(result)
        emit(result, output_format, with_cost_lines(render_serving))
        return
    estimate_result = estimate_training(workload, build_plan(options), framework=framework or DEFAULT_FRAMEWORK)
    result = estimate_result.to_dict()
    if stage_checkpointing is not None:
        from vramopt.stage_checkpointing import add_stage_plan

        add_stage_plan(result, workload, estimate_result.plan, stage_checkpointing, framework or DEFAULT_FRAMEWORK)
    add_time_and_cost(result)
    host_limit, nvme_limit = offload_limits(result["plan"]["gpu"])
    emit(result, output_format, with_cost_lines(lambda data: render_training(data, host_limit, nvme_limit) + render_stages(data)))


@main.command()
@hardware_option
@format_option(("table", "json"))
def gpus(output_format: str) -> None:
    """List the hardware catalog (every value's source is in --format json); with --hardware, merged with that file."""
    catalog = all_gpus()
    note = hardware_note(active_hardware(), {gpu.name for gpu in builtin_gpus()})
    emit(gpus_json(catalog) if output_format == "json" else catalog, output_format,
         lambda rows: render_gpus(rows) + (f"\n{note}" if note else ""))


@main.command()
@format_option(("table", "json"))
def models(output_format: str) -> None:
    """List the model catalog (every value's source is in --format json)."""
    catalog = all_models()
    emit(models_json(catalog) if output_format == "json" else catalog, output_format, render_models)



@main.command()
@workload_options
@space_options(default_max_gpus=8)
@click.option("--objective", type=click.Choice(OBJECTIVES), default="throughput", show_default=True,
              help="throughput: max tokens/s; min-gpus: fewest GPUs reaching --min-tokens-per-s; per-gpu: max tokens/s per GPU; "
                   "cost: least money for --total-tokens (needs prices); cost-per-token: least money per output token (serving).")
@click.option("--deadline-days", type=click.FloatRange(min=0.0, min_open=True, max=36_525.0), default=None,
              help="With --objective cost: the run must end within this many days of wall clock.")
@click.option("--min-tokens-per-s", type=click.FloatRange(min=0.0, min_open=True, max=1e15), default=None,
              help="Throughput target for --objective min-gpus.")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=10.0, show_default=True, help="Solver time limit, seconds.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True, help="CP-SAT worker threads.")
@click.option("--engine", type=click.Choice(ENGINES), default="cp-sat", show_default=True,
              help="cp-sat, or the exhaustive reference enumerator over the same tables.")
@per_stage_option
@click.option("--request", "request_path", type=str, default=None,
              help="Read the whole request from a JSON file ('-' for stdin; docs/api.md); no other flag may be given.")
@hardware_option
@cost_options
@click.option("--export", "export", type=(click.Choice(EXPORT_TARGETS), str), default=None,
              help="Also write a framework config of the plan: --export deepspeed ds.json, --export megatron train.sh, "
                   "--export torchtitan train.sh, --export vllm vllm.yaml or --export sglang sglang.yaml.")
@framework_option
@format_option()
@with_plan_fields
def solve(output_format: str, request_path: str | None, export: tuple[str, str] | None, framework: str | None,
          **options: Any) -> None:
    """Find the highest-throughput plan that fits every GPU with its headroom.

    Plan fields for --allow/--forbid/--pin. Training: {training_fields}.
    Serving (--workload infer): {serving_fields}.
    Exit status: 0 with a plan, 2 when the request is invalid or infeasible (the reason
    and the smallest fix are printed).
    """
    if export is not None:
        resolve_target(export[1])  # a device, a directory or a link to one: refused before the work
    if request_path is not None:
        given_flags = [name for name in options if given(name)]
        if given_flags:
            raise click.UsageError(f"--request carries the whole request; --{given_flags[0].replace('_', '-')} cannot be given with it")
        if framework is not None:
            raise click.UsageError("--request carries the whole request; --framework cannot be given with it (set space.framework)")
        request = SolveRequest.from_dict(read_json_request(request_path))
        workload, space, engine, per_stage = request.workload, request.space, request.engine, request.per_stage
        if export is not None:
            space = replace(space, framework=resolve_framework(None if space.framework == DEFAULT_FRAMEWORK else space.framework, export[0]))
        use_request_hardware(request.hardware)
    else:
        space = build_space(
            options,
            **space_cost_fields(options["objective"], options["deadline_days"]),
            min_tokens_per_s=options["min_tokens_per_s"],
            time_limit_s=options["time_limit_s"],
            workers=options["workers"],
            framework=resolve_framework(framework, export[0] if export else None),
        )
        workload, engine, per_stage = build_workload(options), options["engine"], options["per_stage"]
    check_per_stage(per_stage, engine, output_format, workload, space)
    result = solve_request(workload, space, engine=engine)
    data = result.to_dict()
    if per_stage:
        from vramopt.stage_checkpointing import add_searched_stages

        add_searched_stages(data, workload, space)
    add_time_and_cost(data, space)
    if result.estimate is None and per_stage:  # no uniform plan fits, a per-stage one does
        if export is not None:
            export_plan(data, *export)
        emit(data, output_format, lambda response: render_infeasible(response) + render_stages(response))
        return
    if result.estimate is None:
        if output_format == "json":
            emit(data, "json")
        elif output_format == "csv":
            emit([{"solver.status": data["solver"]["status"], "explanation.reason": (data["explanation"] or {}).get("reason", "")}], "csv")
        else:
            echo(render_infeasible(data) if data["explanation"] else f"no plan: solver status {data['solver']['status']}")
        if data["explanation"]:
            fail_line(result.explanation.one_line())
        else:
            fail_line(f"no plan found within the {space.time_limit_s:g} s time limit (status {data['solver']['status']}); raise --time-limit")
        raise SystemExit(EXIT_USAGE)
    if export is not None:
        export_plan(data, *export)
    host_limit, nvme_limit = offload_limits(data["plan"]["gpu"]) if data["workload"] != "infer" else (None, None)
    if output_format == "csv":
        row = flatten(data)
        row.update({f"solver.{key}": value for key, value in data["solver"].items() if key != "objective_value"})
        emit([row], "csv")
        return
    emit(data, output_format, with_cost_lines(lambda response: render_solve(response, host_limit, nvme_limit) + render_stages(response)))


@main.command()
@workload_options
@space_options(default_max_gpus=64)
@click.option("--output", "output_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the front as CSV here (one row per plan).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also draw the front as a PNG (needs the 'plot' extra: matplotlib).")
@click.option("--verify", is_flag=True, help="Certify every front point, and per GPU count a pinned solve's best plan, with CP-SAT (slower).")
@click.option("--axes", type=click.Choice(AXES), default="throughput", show_default=True,
              help="throughput: tokens/s, GPUs, memory; time,cost: days (or tokens/s serving) against dollars (needs prices; "
                   "training needs --total-tokens); tpot: serving, output tokens/s per GPU against time per output token.")
@framework_option
@hardware_option
@cost_options
@format_option()
def pareto(output_format: str, output_path: str | None, plot_path: str | None, verify: bool, axes: str, framework: str | None,
           **options: Any) -> None:
    """Every non-dominated plan over tokens/s (up), GPUs (down) and memory per GPU (down).

    The front is exact: it is the non-dominated subset of the whole candidate table, the
    same integer tables the solver and its exhaustive oracle read (docs/pareto.md).
    """
    if output_path and plot_path and same_file(output_path, plot_path):
        raise click.UsageError(f"--output and --plot name the same file {display_path(output_path)}")
    for flag, path in (("--output", output_path), ("--plot", plot_path)):
        if path is not None and not path.strip():
            raise click.UsageError(f"{flag} needs a file name")
        if path is not None:
            resolve_target(path)  # a device, a directory or a link to one: refused before the work
    workload = build_workload(options)
    response = front_response(axes, workload, options, framework, verify)
    views = front_views(axes)
    rows = views.rows_for_csv(response)
    if not response["front"]:
        # As solve: no plan is a failure, and no output file is written or truncated.
        if output_format == "json":
            emit(response, "json")
        fail_line("no plan fits, so the Pareto front is empty; `vramopt solve` with the same flags explains why "
                  "and names the smallest change that fits")
        raise SystemExit(EXIT_USAGE)
    outputs: dict[str, str | bytes] = {}
    if output_path:
        outputs[output_path] = to_csv(rows)
    if plot_path:
        outputs[plot_path] = views.png(response)
    write_files_atomically(outputs)  # both or neither
    if output_format == "json":
        emit(response, "json")
    elif output_format == "csv":
        emit(rows, "csv")
    else:
        echo(views.render(response, rows, output_path, plot_path))


@main.command()
@click.option("--cluster", "cluster_path", required=True, type=str, help="Cluster inventory, JSON or TOML (docs/pack.md).")
@click.option("--jobs", "jobs_path", required=True, type=str, help="Job queue, JSON or TOML.")
@click.option("--running", "running_path", type=str, default=None, help="Jobs already running: their GPUs and MIG instances stay theirs.")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=10.0, show_default=True, help="Solver time limit, seconds.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True, help="CP-SAT worker threads.")
@click.option("--objective", "pack_objective", type=click.Choice(("throughput", "cost")), default="throughput", show_default=True,
              help="throughput: the most weighted normalized throughput; cost (needs prices): admit the most job weight "
                   "at the least money per hour.")
@framework_option
@hardware_option
@price_options
@format_option()
def pack(output_format: str, cluster_path: str, jobs_path: str, running_path: str | None, time_limit_s: float, workers: int,
         pack_objective: str = "throughput", usd_per_gpu_hour: dict | None = None, framework: str | None = None) -> None:
    """Admit and place a queue of jobs on a shared cluster: one plan and one placement per
    admitted job, maximizing the weighted normalized throughput, every GPU in its headroom."""
    from vramopt.optimizer.pack import solve_pack  # OR-Tools is imported only by the commands that solve

    nodes = parse_cluster(read_document(cluster_path), cluster_path)
    jobs = parse_jobs(read_document(jobs_path), jobs_path)
    running = parse_running(read_document(running_path), nodes, running_path) if running_path else ()
    if pack_objective == "cost" and usd_per_gpu_hour is None:
        raise click.UsageError("--objective cost needs prices: give --prices FILE or --price GPU=USD")
    response = solve_pack(jobs, nodes, running, time_limit_s=time_limit_s, workers=workers, usd_per_gpu_hour=usd_per_gpu_hour,
                          objective=pack_objective, framework=framework or DEFAULT_FRAMEWORK)
    if output_format == "json":
        emit(response, "json")
    elif output_format == "csv":
        emit(pack_rows(response), "csv")
    else:
        money = pack_money_line(response)
        echo(render_pack(response) + (f"\n{money}" if money else ""))


def read_json_request(path: str) -> Any:
    """A request from a file or stdin ('-'), bounded in size, as parsed JSON (a key given
    twice and oversized integers refused)."""

    def fail(detail: str) -> InputError:
        return InputError(f"the request {display_path(path)}: {detail}")

    return parse_json(read_bounded(path, MAX_REQUEST_BYTES, fail, stdin=path == "-"), fail)


def export_plan(response: dict, target: str, path: str) -> None:
    """Write the framework config and print its companion notes (what it cannot express)."""
    from vramopt.exporters import export

    result = export(target, response)
    write_text_atomically(path, result.file_text(path))
    for note in result.notes:
        echo(f"note ({target}): {note}", err=True)


from vramopt.cli_sweep import add_sweep_command  # noqa: E402 - the sweep command's body lives there

add_sweep_command(main)

from vramopt.cli_validate import add_validate_command  # noqa: E402 - the validate command lives there

add_validate_command(main)


if __name__ == "__main__":  # pragma: no cover
    main()
