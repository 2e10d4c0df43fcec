"""Every number carries its source (STYLE.md house rule 1): a checklist as a test.

Covers the GPU catalog (every numeric field, every peak FLOP/s, every node value, every MIG
profile), the model catalog (the required sources and every source present), and every
coefficient of ``vramopt.costs.coefficients.COEFFICIENTS``; and that docs/cost-model.md
lists every coefficient with its current value.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from vramopt.costs.coefficients import COEFFICIENTS, Coefficient
from vramopt.hardware import all_gpus
from vramopt.models import all_models
from vramopt.models.catalog import REQUIRED_SOURCES
from vramopt.types import GpuSpec, ModelSpec, NodeSpec

COST_MODEL_DOC = Path(__file__).resolve().parents[2] / "docs" / "cost-model.md"


def numeric_fields(cls: type) -> list[str]:
    # types.py uses `from __future__ import annotations`: field types are strings.
    return [field.name for field in dataclasses.fields(cls) if field.type in ("int", "float")]


def is_source(text: object) -> bool:
    return isinstance(text, str) and len(text.strip()) >= 3


def test_field_discovery_is_not_vacuous():
    assert {"memory_bytes", "hbm_bandwidth_bytes_per_s", "pcie_generation"} <= set(numeric_fields(GpuSpec))
    assert {"gpus_per_node", "framework_reserve_bytes", "nvme_bandwidth_bytes_per_s"} <= set(numeric_fields(NodeSpec))
    assert len(all_gpus()) >= 10 and len(all_models()) >= 10 and len(COEFFICIENTS) >= 5


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_every_gpu_value_has_a_source(gpu: GpuSpec):
    missing = [name for name in numeric_fields(GpuSpec) if not is_source(gpu.sources.get(name))]
    missing += [
        f"peak_flops_per_s.{precision}"
        for precision in gpu.peak_flops_per_s
        if not is_source(gpu.sources.get(f"peak_flops_per_s.{precision}"))
    ]
    assert not missing, f"{gpu.name}: no source for {missing}"
    assert all(is_source(source) for source in gpu.sources.values()), gpu.name


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_every_node_value_has_a_source(gpu: GpuSpec):
    missing = [name for name in numeric_fields(NodeSpec) if not is_source(gpu.node.sources.get(name))]
    assert not missing, f"{gpu.name}: node values without a source: {missing}"
    assert all(is_source(source) for source in gpu.node.sources.values()), gpu.name


@pytest.mark.parametrize("gpu", [gpu for gpu in all_gpus() if gpu.mig_profiles], ids=lambda gpu: gpu.name)
def test_every_mig_profile_has_a_source(gpu: GpuSpec):
    for profile in gpu.mig_profiles:
        assert is_source(profile.source), f"{gpu.name}: MIG profile {profile.name} has no source"


def test_some_gpus_have_mig_profiles():
    assert any(gpu.mig_profiles for gpu in all_gpus())


@pytest.mark.parametrize("model", all_models(), ids=lambda model: model.name)
def test_every_model_has_its_required_sources(model: ModelSpec):
    for key in REQUIRED_SOURCES:
        assert is_source(model.sources.get(key)), f"{model.name}: source '{key}' missing or empty"
    assert all(is_source(source) for source in model.sources.values()), model.name


@pytest.mark.parametrize("name", sorted(COEFFICIENTS), ids=str)
def test_every_coefficient_has_a_value_and_a_source(name: str):
    entry = COEFFICIENTS[name]
    assert isinstance(entry, Coefficient)
    assert isinstance(entry.value, (int, float)) and entry.value > 0, name
    assert is_source(entry.source), f"coefficient {name} has no source"
    # A source says what kind of number it is.
    assert re.match(r"(calibration|assumption|measurement|[A-Z][A-Za-z\-]+ et al\. \d{4}|the seed|[A-Z])", entry.source), name


def test_the_coefficients_cannot_be_mutated():
    with pytest.raises(TypeError):
        COEFFICIENTS["base_utilization"] = Coefficient(1.0, "x")  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        COEFFICIENTS["base_utilization"].value = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(COEFFICIENTS), ids=str)
def test_cost_model_doc_lists_every_coefficient_with_its_value(name: str):
    text = COST_MODEL_DOC.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("|") and f"`{name}`" in line]
    assert rows, f"docs/cost-model.md has no table row for coefficient {name}"
    value = COEFFICIENTS[name].value
    shown = {f"{value:g}", f"{value}", f"{value:.0e}".replace("e+", "e"), f"{value:.3g}"}
    assert any(text_value in rows[0] for text_value in shown), (name, value, rows[0])
