"""Optimizer-state format: adam (fp32 states), adam8bit, adafactor or sgd (issue 12 item 5).

The first technique whose every part lives in its own module(s): this declaration and the
physics with its validity rules, memory term and time term in ``costs/optimizer_states.py``
(costs/ imports nothing from constraints/, so the terms live there and are named here). The cost model asks it for the optimizer-state
bytes per trainable parameter and for the optimizer-step time; ZeRO shards the states of
every format alike (``ParallelLayout.optimizer_zero_shards``).

Default domain: ``adam`` only, for every training kind. The format changes what training
computes (each entry's ``caveat``), and vramopt ranks plans by throughput alone, so it picks
a numerically different optimizer only when the user opts in: ``--allow
optimizer=adam,adam8bit``. (8-bit Adam is the common choice for QLoRA fine-tuning, but QLoRA
itself (Dettmers et al. 2023) trains with paged 32-bit AdamW, so even there it stays opt-in.)

Validity rules: CPU and NVMe offload need ``adam`` (DeepSpeed ZeRO-Offload and
ZeRO-Infinity run the step on the host with DeepSpeedCPUAdam, and vramopt's host-step rate
``cpu_adam_params_per_s_per_node`` is Adam's); Adafactor is not modelled on LoRA adapters
(their ``r x h`` matrices are far narrower than the hidden size its factored estimate
assumes).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, Gain
from vramopt.constraints.technique import PlanField, Technique, parse_choice
from vramopt.frameworks.megatron import ARGUMENTS as MEGATRON_ARGUMENTS
from vramopt.frameworks.rule import Rule
from vramopt.frameworks.torchtitan import VERSION as TORCHTITAN_VERSION
from vramopt.costs.optimizer_states import (
    BY_NAME,
    FORMATS,
    OPTIMIZER_NAMES,
    optimizer_invalid_reasons,
    optimizer_step_seconds,
    state_bytes_per_parameter,
)

MEGATRON_OPTIMIZERS = ("adam", "sgd")
"""The formats Megatron-LM's ``--optimizer`` accepts (its choices: adam, sgd, muon, dist_muon)."""

FRAMEWORK_RULES = {
    "megatron": (Rule(
        message="Megatron-LM: --optimizer takes adam or sgd (no 8-bit Adam or Adafactor)",
        group="state",
        refuses=lambda columns: ~np.isin(columns.optimizer, [OPTIMIZER_NAMES.index(name) for name in MEGATRON_OPTIMIZERS]),
        source=f"{MEGATRON_ARGUMENTS}, '--optimizer' choices",
    ),),
    "torchtitan": (Rule(
        message="torchtitan: the optimizer is Adam or AdamW (torch.optim)",
        group="state",
        refuses=lambda columns: columns.optimizer != OPTIMIZER_NAMES.index("adam"),
        source=f"torchtitan {TORCHTITAN_VERSION} components/optimizer/optimizer.py _resolve_optimizer_factory",
    ),),
}
"""The frameworks that refuse some formats, with their sources (Framework.all_rules joins them)."""


def display(plan: Mapping[str, Any]) -> str:
    """Shown only when the plan's optimizer is not Adam, the format every plan assumed before."""
    name = plan.get("optimizer", "adam")
    return "" if name == "adam" else f"optimizer {BY_NAME[name].label}"


def _deepspeed(draft: ExportDraft) -> list[str]:
    name = draft.plan.get("optimizer", "adam")
    if name == "adam":
        return ["optimizer: the plan's memory assumes Adam/AdamW (fp32 master weights, momentum and variance, "
                "12 bytes per parameter); configure it in the config's 'optimizer' section or in code"]
    if name == "adam8bit":
        return ["optimizer: 8-bit Adam is not a DeepSpeed built-in optimizer type; pass bitsandbytes.optim.AdamW8bit "
                "(block-wise, 2 bytes of states per parameter) to deepspeed.initialize(optimizer=...) as a client "
                "optimizer, and leave the config's 'optimizer' section out"]
    if name == "adafactor":
        return ["optimizer: Adafactor is not a DeepSpeed built-in optimizer type; pass transformers.Adafactor "
                "(beta1=None: no first moment) to deepspeed.initialize(optimizer=...) as a client optimizer"]
    return ["optimizer: the plan assumes SGD with momentum (one fp32 buffer per parameter); pass "
            "torch.optim.SGD(momentum=...) to deepspeed.initialize(optimizer=...) as a client optimizer"]


def _megatron(draft: ExportDraft) -> list[str]:
    draft.argument("--optimizer", draft.plan.get("optimizer", "adam"))  # Megatron's rule keeps adam or sgd
    return []


OPTIMIZER = Technique(
    field="optimizer",
    group="state",
    description="optimizer-state format: adam (fp32 states), adam8bit (bitsandbytes), adafactor, sgd (momentum)",
    parse=parse_choice("optimizer", OPTIMIZER_NAMES),
    default_values=lambda context: ("adam",),
    columns=lambda value: {"optimizer": OPTIMIZER_NAMES.index(value)},
    decode=lambda codes: OPTIMIZER_NAMES[int(codes["optimizer"])],
    neutral="adam",
    plan_field=PlanField(
        python_type=str, default="adam", choices=OPTIMIZER_NAMES, flags=("--optimizer",),
        doc="Optimizer-state format: 'adam' (fp32 states), 'adam8bit' (bitsandbytes block-wise), 'adafactor' "
            "(factored second moment), 'sgd' (momentum); costs/optimizer_states.py.",
        help="Optimizer-state format: adam (fp32 states), adam8bit (bitsandbytes), adafactor, sgd (momentum).",
    ),
    contribution=Contribution(
        memory_labels=lambda plan: ({"optimizer_bytes": f"optimizer states ({plan['optimizer']})"}
                                    if plan.get("optimizer", "adam") != "adam" else {}),
        validity=lambda case, columns: optimizer_invalid_reasons(case.trainable_fraction, columns),
        memory=state_bytes_per_parameter,
        time=optimizer_step_seconds,
        contract=ContractField(
            name="optimizer", json_type="string", enum=OPTIMIZER_NAMES,
            description="optimizer-state format: adam (fp32 momentum and variance), adam8bit (bitsandbytes "
                        "block-wise 8-bit), adafactor (factored second moment, no momentum), sgd (momentum)",
        ),
        display=display,
        display_line="memory",
        exports={
            "torchtitan": Export(not_exported="the optimizer is set in torchtitan's config function (AdamW); its rule keeps adam"),
            "megatron": Export(apply=_megatron),
            "deepspeed": Export(apply=_deepspeed),
            "vllm": Export(not_exported="serving runs no optimizer; a training plan has no vLLM export"),
        },
        framework_rules=FRAMEWORK_RULES,
        sources=tuple(entry.source for entry in FORMATS),
        gain=Gain(key="optimizer_gain", measure=lambda workload, estimate, framework: optimizer_gain(workload, estimate, framework),
                  sentence=lambda plan, gain, gb: why_line(plan, gain, gb)),
    ),
)

TECHNIQUES = (OPTIMIZER,)


def optimizer_gain(workload, estimate, framework: str = "generic") -> dict[str, Any] | None:
    """For a plan whose optimizer is not Adam: what the same plan would need with Adam, and
    the largest micro-batch it would then fit, so the why line can say what the format buys
    (the fit itself, a larger micro-batch, or memory and step time only). None for Adam."""
    from dataclasses import replace

    from vramopt.constraints.parallelism import divisors
    from vramopt.errors import InputError
    from vramopt.estimate import estimate_training
    from vramopt.parallel_layout import ParallelLayout

    plan = estimate.plan
    if plan.optimizer == "adam":
        return None
    with_adam = estimate_training(workload, replace(plan, optimizer="adam"), framework)
    per_replica = workload.global_batch // ParallelLayout.from_plan(plan).data_parallel
    largest = None
    for micro_batch in sorted((value for value in divisors(per_replica) if value <= plan.micro_batch), reverse=True):
        try:
            trial = with_adam if micro_batch == plan.micro_batch else estimate_training(
                workload, replace(plan, optimizer="adam", micro_batch=micro_batch), framework)
        except InputError:  # a micro-batch count the interleaved schedule cannot split
            continue
        if trial.fits:
            largest = micro_batch
            break
    return {
        "optimizer": plan.optimizer,
        "with_adam_total_bytes": with_adam.total_bytes,
        "with_adam_fits": bool(with_adam.fits),
        "largest_micro_batch_with_adam": largest,
        "limit_bytes": estimate.values["capacity_bytes"] * (1.0 - workload.headroom_fraction),
        "saved_bytes_per_gpu": with_adam.total_bytes - estimate.total_bytes,
        "saved_step_s": with_adam.values["step_time_s"] - estimate.values["step_time_s"],
        "speedup_factor": estimate.tokens_per_s / with_adam.tokens_per_s,
        "caveat": BY_NAME[plan.optimizer].caveat,
    }


def why_line(plan: Mapping[str, Any], gain: Mapping[str, Any], gb) -> str:
    """The why line's optimizer sentence (``gb`` formats bytes as the display does)."""
    label = BY_NAME[gain["optimizer"]].label
    largest = gain["largest_micro_batch_with_adam"]
    over = f"with adam it would need {gb(gain['with_adam_total_bytes'])} GB per GPU, over the {gb(gain['limit_bytes'])} GB limit"
    if largest is None:
        return f"optimizer {label} is what makes this plan fit: {over}"
    if largest < plan["micro_batch"]:
        return (f"optimizer {label} is what lets micro-batch {plan['micro_batch']} fit: {over}, "
                f"and it fits micro-batch {largest} at most")
    return (f"optimizer {label} saves {gb(gain['saved_bytes_per_gpu'])} GB per GPU and {gain['saved_step_s'] * 1e3:,.0f} ms "
            f"per step (a shorter optimizer step); adam fits this plan too")
