"""The pipeline point-to-point term (costs/pipeline_p2p.py), against figures worked by hand.

Expected values come from the sources, not from the module: the boundary tensor
``b * s * h`` 16-bit elements (Narayanan et al. 2021 section 4.1), each tensor-parallel rank
sending 1/t of it and the receiver all-gathering the rest over NVLink without sequence
parallelism, 2 messages per micro-batch and model chunk on the critical path, and the catalog's
datasheet links (A100 SXM: NVLink 300 GB/s per direction, 200 Gb/s HDR InfiniBand per GPU = 25
GB/s), at the collective efficiency 0.8 (coefficients.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.columns import PlanColumns
from vramopt.costs.pipeline_p2p import message_seconds, pipeline_p2p_seconds
from vramopt.hardware import load_gpu
from vramopt.types import PRECISIONS
from vramopt.validation.narayanan import gpt_model

A100_NETWORK_BYTES_PER_S = 25e9
A100_NVLINK_BYTES_PER_S = 300e9
EFFICIENCY = 0.8
GPT3 = gpt_model(96, 12288, 96)  # GPT-3 175B, s = 2048


def columns(**overrides):
    values = dict(gpus=64, tensor_parallel=8, pipeline_parallel=8, data_parallel=1, context_parallel=1, micro_batch=1,
                  virtual_stages=3, sequence_parallel=0, precision=PRECISIONS.index("bf16"), zero_stage=0, checkpoint_kind=0,
                  checkpoint_every=0, grad_comm_precision=PRECISIONS.index("bf16"), offload=0, flash_attention=0)
    values.update(overrides)
    return PlanColumns(**{name: np.array([value], dtype=np.int64) for name, value in values.items()})


def test_catalog_links_are_the_datasheet_figures_the_hand_values_use():
    gpu = load_gpu("a100-80gb")
    assert gpu.node.network_bandwidth_bytes_per_s_per_gpu == A100_NETWORK_BYTES_PER_S
    assert gpu.nvlink_bandwidth_bytes_per_s == A100_NVLINK_BYTES_PER_S
    assert gpu.node.gpus_per_node == 8


def test_gpt3_korthikanti_layout_across_nodes_with_scatter_gather():
    # tp 8, pp 8: consecutive stages are 8 GPUs (a node) apart, so every boundary crosses the network.
    full_bytes = 1 * 2048 * 12288 * 2  # 50,331,648
    send = full_bytes / 8 / (A100_NETWORK_BYTES_PER_S * EFFICIENCY)  # 0.31457 ms
    gather = 7 / 8 * full_bytes / (A100_NVLINK_BYTES_PER_S * EFFICIENCY)  # 0.18350 ms
    messages = 2 * (3 * 64 + 8 - 1)  # 398: 2 v m steady-state messages + (p - 1) hops each way
    expected = messages * (send + gather)
    result = pipeline_p2p_seconds(GPT3, load_gpu("a100-80gb"), columns(), 2048, np.array([64.0]), np.array([0.2]))
    assert float(result["exposed_s"][0]) == pytest.approx(expected, rel=1e-12)
    assert float(result["transfer_s"][0]) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.198233, rel=1e-5)


def test_sequence_parallel_sends_the_same_share_and_gathers_nothing():
    send = 2048 * 12288 * 2 / 8 / (A100_NETWORK_BYTES_PER_S * EFFICIENCY)
    value = message_seconds(GPT3, load_gpu("a100-80gb"), columns(sequence_parallel=1), 2048)
    assert float(value[0]) == pytest.approx(send, rel=1e-12)


def test_a_pipeline_inside_one_node_uses_nvlink():
    # tp 2 x pp 4 = 8 GPUs: the whole pipeline group spans one node; sequence parallel on.
    send = 2048 * 12288 * 2 / 2 / (A100_NVLINK_BYTES_PER_S * EFFICIENCY)
    value = message_seconds(GPT3, load_gpu("a100-80gb"), columns(gpus=8, tensor_parallel=2, pipeline_parallel=4,
                                                                 sequence_parallel=1), 2048)
    assert float(value[0]) == pytest.approx(send, rel=1e-12)


def test_context_parallel_and_micro_batch_scale_the_message():
    base = message_seconds(GPT3, load_gpu("a100-80gb"), columns(sequence_parallel=1), 8192)
    scaled = message_seconds(GPT3, load_gpu("a100-80gb"), columns(sequence_parallel=1, micro_batch=2, context_parallel=4,
                                                                  gpus=256), 8192)
    assert float(scaled[0]) == pytest.approx(float(base[0]) * 2 / 4, rel=1e-12)


def test_no_pipeline_no_messages():
    result = pipeline_p2p_seconds(GPT3, load_gpu("a100-80gb"), columns(pipeline_parallel=1, virtual_stages=1, gpus=8), 2048,
                                  np.array([64.0]), np.array([0.2]))
    assert float(result["exposed_s"][0]) == 0.0 and float(result["transfer_s"][0]) == 0.0


def test_overlap_hides_the_transfers_behind_compute_only_when_interleaved():
    gpu = load_gpu("a100-80gb")
    per_message = float(message_seconds(GPT3, gpu, columns(), 2048)[0])
    # Interleaved (v = 3): per slot 6 messages (2.98 ms) against 1 ms of compute: 1.98 ms exposed per slot.
    slots = 64 + 7 / 3
    overlapped = pipeline_p2p_seconds(GPT3, gpu, columns(), 2048, np.array([64.0]), np.array([1e-3]), overlap=True)
    assert float(overlapped["exposed_s"][0]) == pytest.approx(slots * (6 * per_message - 1e-3), rel=1e-12)
    hidden = pipeline_p2p_seconds(GPT3, gpu, columns(), 2048, np.array([64.0]), np.array([0.2]), overlap=True)
    assert float(hidden["exposed_s"][0]) == 0.0
    # Megatron-Core overlaps p2p only in the interleaved schedule: 1F1B stays blocking.
    plain = pipeline_p2p_seconds(GPT3, gpu, columns(virtual_stages=1), 2048, np.array([64.0]), np.array([0.2]), overlap=True)
    assert float(plain["exposed_s"][0]) == pytest.approx(2 * (64 + 7) * per_message, rel=1e-12)
