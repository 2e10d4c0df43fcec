"""Issue 11 item 16: a fully connected mesh gives a group of k GPUs k-1 links each.

Before the fix every MI300X collective inside the node ran at 448 GB/s, the seven
Infinity Fabric links added up, whatever the group; a pair of MI300X talks over one link.
AMD's MI300X platform (CDNA 3 white paper; Azure ND MI300X v5 docs) connects the 8 GPUs of
a baseboard in a full mesh, one link to each peer, each link 16 lanes at 32 Gb/s = 128 GB/s
bidirectional = 64 GB/s per direction. Figures here are per direction.
"""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs import communication
from vramopt.costs.columns import PlanColumns
from vramopt.costs.coefficients import coefficient
from vramopt.costs.inference import QUANTIZATIONS, ServingCase, ServingColumns, evaluate_serving
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import PRECISIONS

LINK_BYTES_PER_S = 64e9
"""One MI300X Infinity Fabric link, one direction (AMD CDNA 3 white paper / MI300X datasheet)."""
SEQ_LEN = 4096


def columns(**values) -> PlanColumns:
    """One bf16 training plan as PlanColumns, nothing else enabled."""
    plan = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, sequence_parallel=0, virtual_stages=1,
                zero_stage=0, checkpoint_kind=0, checkpoint_every=0, precision=PRECISIONS.index("bf16"),
                grad_comm_precision=PRECISIONS.index("bf16"), offload=0, flash_attention=1, micro_batch=1)
    plan.update(values)
    plan["gpus"] = plan["tensor_parallel"] * plan["pipeline_parallel"] * plan["data_parallel"]
    return PlanColumns.from_scalars(**plan)


def scalar(array) -> float:
    return float(np.asarray(array).reshape(-1)[0])


@pytest.fixture(scope="module")
def mi300x():
    return load_gpu("mi300x")


@pytest.fixture(scope="module")
def llama70():
    return load_model("llama-3.1-70b")


def efficiency() -> float:
    return coefficient("collective_bandwidth_efficiency")


@pytest.mark.parametrize("group", [2, 4, 8])
def test_tensor_parallel_group_uses_k_minus_1_links(mi300x, llama70, group):
    """issue 11 item 16: tp=k on MI300X all-reduces over k-1 links of 64 GB/s."""
    seconds = scalar(communication.tensor_parallel_seconds_per_micro_batch(
        llama70, mi300x, columns(tensor_parallel=group), SEQ_LEN))
    message = SEQ_LEN * llama70.hidden_size * 2  # bf16 activations, micro-batch 1
    per_all_reduce = 2 * (group - 1) / group * message / ((group - 1) * LINK_BYTES_PER_S * efficiency())
    expected = llama70.layers * 4 * per_all_reduce  # Shoeybi et al.: 4 all-reduces per layer
    assert seconds == pytest.approx(expected, rel=1e-9)


def test_a_pair_is_seven_times_slower_per_byte_than_the_old_aggregate(mi300x, llama70):
    """issue 11 item 16: tp=2 moves its bytes over one link, not seven."""
    tp2 = scalar(communication.tensor_parallel_seconds_per_micro_batch(llama70, mi300x, columns(tensor_parallel=2), SEQ_LEN))
    message = SEQ_LEN * llama70.hidden_size * 2
    at_aggregate = llama70.layers * 4 * (2 * 1 / 2) * message / (mi300x.nvlink_bandwidth_bytes_per_s * efficiency())
    assert tp2 == pytest.approx(7 * at_aggregate, rel=1e-9)


def test_data_parallel_group_inside_the_node_counts_its_own_peers(mi300x, llama70):
    """issue 11 item 16: a dp=2 group (strided by tp=4) has one link; dp=8 has seven."""
    params = np.array([float(llama70.parameters.total)])
    step = np.array([1.0])
    gradient_bytes = params[0] * 2  # bf16 gradients
    dp2 = scalar(communication.data_parallel_seconds_per_step(params, mi300x, columns(tensor_parallel=4, data_parallel=2), step))
    assert dp2 == pytest.approx(2 * (1 / 2) * gradient_bytes / (1 * LINK_BYTES_PER_S * efficiency()), rel=1e-9)
    dp8 = scalar(communication.data_parallel_seconds_per_step(params, mi300x, columns(data_parallel=8), step))
    assert dp8 == pytest.approx(2 * (7 / 8) * gradient_bytes / (7 * LINK_BYTES_PER_S * efficiency()), rel=1e-9)


def test_switch_gives_full_bandwidth_to_any_group(llama70):
    """issue 11 item 16: behind NVSwitch (H100) a pair gets the GPU's full 450 GB/s."""
    h100 = load_gpu("h100")
    for group in (2, 4, 8):
        bandwidth = scalar(communication.group_bandwidth(h100, np.array([group]), np.array([group])))
        assert bandwidth == pytest.approx(450e9 * efficiency(), rel=1e-12)


def test_mesh_group_bandwidth_and_groups_across_nodes(mi300x):
    """issue 11 item 16: (k-1) x 64 GB/s inside the node, the NIC share across nodes; a
    group of one keeps a defined (unused) bandwidth."""
    sizes = np.array([1, 2, 4, 8, 16])
    bandwidth = communication.group_bandwidth(mi300x, sizes, sizes) / efficiency()
    network = mi300x.node.network_bandwidth_bytes_per_s_per_gpu
    assert np.allclose(bandwidth, [64e9, 64e9, 3 * 64e9, 7 * 64e9, network], rtol=1e-12)


def test_serving_tensor_parallel_all_reduce_uses_the_group_bandwidth(mi300x, llama70):
    """issue 11 item 16: the serving decode step's TP all-reduce (2 per layer) on a pair of
    MI300X runs over one 64 GB/s link."""
    def serve(tp: int) -> float:
        case = ServingCase(model=llama70, gpu=mi300x, context=4096)
        one = lambda value: np.array([value])  # noqa: E731
        plan = ServingColumns(
            gpus=one(tp), tensor_parallel=one(tp), pipeline_parallel=one(1),
            quantization=one(QUANTIZATIONS.index("bf16")), kv_cache_dtype=one(0), paged_kv=one(1),
            speculative=one(0), slots=one(8), mig_profile=one(-1),
        )
        return scalar(evaluate_serving(case, plan)["tensor_parallel_s"])

    slots, message = 8, 8 * llama70.hidden_size * 2
    for tp in (2, 8):
        per_all_reduce = coefficient("all_reduce_latency_s") + 2 * (tp - 1) / tp * message / (
            (tp - 1) * LINK_BYTES_PER_S * efficiency())
        assert serve(tp) == pytest.approx(2 * llama70.layers * per_all_reduce, rel=1e-9), (tp, slots)
