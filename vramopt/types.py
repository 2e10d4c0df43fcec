"""Frozen dataclasses shared by every layer: catalog entries, plans and results.

Quantities are stored in internal units (bytes, seconds, FLOP/s, bytes/s); the unit is in
the field name. Each catalog value keeps its source in ``sources`` under the field name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from vramopt.model_spec import CheckpointQuantization, MlaSpec, ModelSpec, MoeSpec, ParameterCount  # noqa: F401 (re-exported)

PRECISIONS = ("fp32", "bf16", "fp16", "fp8", "fp4")
"""Compute precisions of training, widest first."""

MAX_COUNT = 2**31 - 1
"""Largest value of any integer plan field or workload size (GPUs, parallel degrees,
micro-batch, slots, tokens, sequences): the plan tables are int64 numpy arrays, and a
larger number is a typo, not a plan (assumption: no real deployment comes near it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MigProfile:
    """One MIG GPU-instance profile of a GPU (NVIDIA MIG user guide)."""

    name: str
    """Profile name as nvidia-smi prints it, e.g. '1g.10gb'."""
    memory_bytes: int
    compute_slices: int
    """Number of the GPU's 7 compute slices the instance owns."""
    memory_slices: int
    """Number of the GPU's 8 memory slices the instance owns (its width in placements)."""
    max_instances: int
    """Most instances of this profile on one GPU."""
    placement_starts: tuple[int, ...]
    """Memory-slice indices where an instance of this profile may start (valid geometry)."""
    source: str


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeSpec:
    """Defaults for a server that holds this GPU."""

    gpus_per_node: int
    """GPUs in one NVLink domain / server."""
    network_bandwidth_bytes_per_s_per_gpu: float
    """Inter-node bandwidth per GPU, one direction (e.g. 400 Gb/s NIC = 50e9 bytes/s)."""
    host_ram_bytes: int
    nvme_capacity_bytes: int
    nvme_bandwidth_bytes_per_s: float
    """Aggregate NVMe read bandwidth of the node, bytes/s."""
    framework_reserve_bytes: int
    """Per-GPU memory the framework takes before the model: CUDA context, NCCL buffers,
    allocator fragmentation."""
    sources: Mapping[str, str]


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """One GPU of the hardware catalog (vramopt/hardware/gpus/*.toml)."""

    name: str
    display_name: str
    aliases: tuple[str, ...]
    memory_bytes: int
    """The capacity the planner fills: device memory as the CUDA/HIP runtime reports it
    (cudaDeviceProp::totalGlobalMem = torch.cuda.get_device_properties().total_memory),
    which excludes what the driver reserves (nvidia-smi's memory.total includes it). The
    headroom rule applies to this figure."""
    datasheet_memory_bytes: int
    """The datasheet's memory figure (decimal GB), for display only."""
    hbm_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]
    """Dense (no sparsity) peak FLOP/s per precision it supports: fp32, bf16, fp16, fp8,
    fp4, int8. A precision missing here is not supported by the GPU's tensor cores."""
    nvlink_bandwidth_bytes_per_s: float
    """NVLink (or Infinity Fabric) bandwidth per GPU, one direction, all links added up; 0
    when none."""
    intra_node_topology: str
    """'switch' (NVSwitch: full bandwidth towards any group), 'full_mesh' (one link to each
    peer: k-1 links in a group of k) or 'pcie' (no GPU-to-GPU fabric)."""
    mesh_link_bandwidth_bytes_per_s: float
    """One mesh link, one direction ('full_mesh' only; 0 otherwise)."""
    pcie_generation: int
    pcie_bandwidth_bytes_per_s: float
    """Host link bandwidth per GPU, one direction."""
    mig_profiles: tuple[MigProfile, ...]
    node: NodeSpec
    sources: Mapping[str, str]
    """Source of each value, keyed by field name (peak flops as 'peak_flops_per_s.bf16')."""
    notes: str = ""

    def supports(self, precision: str) -> bool:
        return precision in self.peak_flops_per_s

    def mig_profile(self, name: str) -> MigProfile | None:
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingWorkload:
    """What the user trains: the model and the batch shape, and the headroom rule."""

    model: str
    seq_len: int = 4096
    """Tokens per sequence. Default 4,096 (Llama 2's pretraining context, Touvron et al. 2023)."""
    global_batch: int = 1024
    """Sequences per optimizer step. Default 1,024 x 4,096 = 4.2M tokens (Llama 2 used 4M
    tokens per batch, Touvron et al. 2023 section 2.2)."""
    headroom_fraction: float = 0.10
    kind: str = "train"
    """'train' (pretraining), 'finetune' (full fine-tuning), 'lora' (frozen bf16 base +
    adapters), 'qlora' (frozen 4-bit NF4 base + adapters, Dettmers et al. 2023)."""
    lora_rank: int = 16
    """LoRA rank r (Hu et al. 2021; 16 is a common default, e.g. in PEFT examples)."""
    lora_targets: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
    """Matrices that get adapters: every linear layer, as QLoRA recommends (Dettmers et al.
    2023 section 4: adapters on all linear layers match full fine-tuning)."""


TRAINING_KINDS = ("train", "finetune", "lora", "qlora")
LORA_KINDS = ("lora", "qlora")
LORA_TARGET_NAMES = ("q", "k", "v", "o", "gate", "up", "down")
"""The linear layers that may get adapters (attention q/k/v/o, MLP gate/up/down)."""
MAX_LORA_RANK = 65_536
"""Largest adapter rank accepted, as the CLI's --lora-rank and the request schema bound it
(assumption: ranks in use are far smaller -- Hu et al. 2021 study r = 1 to 64, QLoRA
(Dettmers et al. 2023) uses 64 -- so a larger one is a typo)."""


def lora_field_error(workload: TrainingWorkload) -> tuple[str, str] | None:
    """(field, what is wrong) for a LoRA field out of range, or set on a kind that trains no
    adapters (where it would be silently ignored); None when the LoRA fields are fine.
    A field at its default value is accepted on every kind: a request's ``to_dict`` writes
    every field, and the default changes nothing."""
    rank, targets = workload.lora_rank, workload.lora_targets
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= MAX_LORA_RANK:
        return "lora_rank", f"must be an integer from 1 to {MAX_LORA_RANK:,}, got {rank!r}"
    if not isinstance(targets, (tuple, list)) or not targets or any(not isinstance(name, str) for name in targets):
        return "lora_targets", f"must be a non-empty list of {', '.join(LORA_TARGET_NAMES)}, got {targets!r}"
    unknown = [name for name in targets if name not in LORA_TARGET_NAMES]
    if unknown:
        return "lora_targets", f"'{unknown[0]}' is not one of {', '.join(LORA_TARGET_NAMES)}"
    repeated = [name for index, name in enumerate(targets) if name in targets[:index]]
    if repeated:
        return "lora_targets", f"lists '{repeated[0]}' twice"
    if workload.kind not in LORA_KINDS:
        defaults = TrainingWorkload(model=workload.model)
        for name, value, default in (("lora_rank", rank, defaults.lora_rank), ("lora_targets", tuple(targets), defaults.lora_targets)):
            if value != default:
                return name, (f"applies only to workload kinds {' and '.join(LORA_KINDS)} (adapters), not {workload.kind}; "
                              f"drop it or use kind lora")
    return None
WORKLOADS = TRAINING_KINDS + ("infer",)


OBJECTIVES = ("throughput", "min-gpus", "per-gpu", "cost", "cost-per-token")


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchSpace:
    """Which plans the search may consider, and what it optimizes."""

    gpus: tuple[str, ...] = ("b200",)
    """GPU types allowed (catalog names or aliases)."""
    max_gpus: int = 8
    whole_nodes: bool = True
    """Beyond one node, use whole nodes only (a GPU count that is a multiple of the node size)."""
    allow_tp_across_nodes: bool = False
    allow_fp4: bool = False
    """FP4 training is experimental (the seed: not production-ready); off unless asked."""
    allow: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Plan field -> the only values allowed (replaces the default domain)."""
    forbid: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    pin: Mapping[str, str] = field(default_factory=dict)
    objective: str = "throughput"
    """'throughput' (max tokens/s), 'min-gpus' (fewest GPUs reaching min_tokens_per_s),
    'per-gpu' (max tokens/s per GPU), 'cost' (training: least money for total_tokens),
    'cost-per-token' (serving: least money per output token)."""
    min_tokens_per_s: float | None = None
    time_limit_s: float = 10.0
    workers: int = 4
    total_tokens: int | None = None
    """Training tokens to process: objective 'cost' (least money for them) needs it; with any
    other training objective the response adds their time and cost (``time_and_cost``)."""
    deadline_days: float | None = None
    """Objective 'cost': the run must end within this many days of wall clock."""
    usd_per_gpu_hour: Mapping[str, float] = field(default_factory=dict)
    """US dollars per GPU-hour by GPU type; objectives 'cost' (training) and 'cost-per-token'
    (serving) need one for every GPU type searched (optimizer/cost_objective.py)."""
    framework: str = "generic"
    """The training framework whose rules restrict the plans (vramopt/frameworks/): 'generic'
    (every well-formed plan), 'deepspeed', 'megatron' or 'torchtitan'."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingWorkload:
    """What the user serves and the service's requirements."""

    model: str
    context: int = 8192
    """Maximum tokens per sequence, prompt plus output (vLLM max-model-len)."""
    headroom_fraction: float = 0.10
    min_slots: int = 1
    """Concurrent sequences the whole deployment must hold at least."""
    max_latency_ms: float | None = None
    """Upper bound of the time per output token of one sequence, milliseconds."""
    input_tokens: int | None = None
    """Prompt tokens of every request; with output_tokens, the request-level model
    (docs/serving.md): prefill and decode under continuous batching, TTFT and TPOT."""
    output_tokens: int | None = None
    """Generated tokens of every request."""
    length_samples: tuple[tuple[int, ...], ...] | None = None
    """Instead of fixed lengths: one [input_tokens, output_tokens] pair per sampled request
    (the CLI's --lengths CSV), the mix the model averages over."""
    rate_per_s: float | None = None
    """Poisson arrival rate of requests over the whole deployment, requests/s."""
    concurrency: int | None = None
    """Clients each keeping one request in flight (closed loop); neither rate nor
    concurrency: the deployment's capacity with every request queued at once."""
    ttft_p99_ms: float | None = None
    """Bound on the 99th-percentile time to first token, milliseconds."""
    tpot_ms: float | None = None
    """Bound on the mean time per output token, milliseconds."""
    input_tokens_p99: int | None = None
    """With input_tokens as the mean: the prompts' 99th percentile; the lengths are then a
    lognormal with that mean and p99 (costs/length_distribution.py; an assumption)."""
    output_tokens_p99: int | None = None
    """With output_tokens as the mean: the outputs' 99th percentile (lognormal likewise)."""
    shared_prefix_tokens: int | None = None
    """The first N tokens of every prompt are the same (a system prompt, a template): with
    vLLM's automatic prefix caching (``enable_prefix_caching``) their whole 16-token blocks
    are computed once per replica and every running request shares them (docs/serving.md)."""
    disaggregation: str = "auto"
    """'auto': solve also searches disaggregated prefill/decode plans (min-gpus and
    throughput at a request rate; optimizer/disaggregated_answer.py); 'off': colocated only."""
    kind: str = "infer"


def __getattr__(name: str):
    """``TrainingPlan`` and ``ServingPlan`` are generated from the techniques' plan-field declarations
    (``vramopt/plan_record.py``); the techniques import this module, so it is resolved on
    first use rather than at import."""
    if name in ("TrainingPlan", "ServingPlan"):
        from vramopt import plan_record

        return getattr(plan_record, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
