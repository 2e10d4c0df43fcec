"""The hardware catalog: every shipped GPU loads with a source for every value, units are
converted once and correctly, and malformed files fail with the file and the key named."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from vramopt.errors import CatalogError, UnknownNameError
from vramopt.hardware import all_gpus, gpu_names, load_gpu, load_gpu_file
from vramopt.hardware.catalog import (
    MIG_MEMORY_SLICES,
    PRECISION_KEYS,
    load_catalog,
    parse_gpu_file,
)
from vramopt.types import GpuSpec, NodeSpec

REQUIRED_GPUS = (
    "a100-40gb",
    "a100-80gb",
    "h100",
    "h100-pcie",
    "h800",
    "h200",
    "b200",
    "b200-192gb",
    "gb200",
    "rtx4090",
    "rtx5090",
    "rtx6090",
    "l40s",
    "mi300x",
)
MIG_GPUS = ("a100-40gb", "a100-80gb", "h100", "h100-pcie", "h800", "h200", "b200", "b200-192gb", "gb200")
NO_MIG_GPUS = ("rtx4090", "rtx5090", "rtx6090", "l40s", "mi300x")

MINIMAL_GPU = """\
name = "testgpu"
display_name = "Test GPU"
aliases = ["test-alias"]
notes = "for tests"
datasheet_memory_gb = { value = 80, source = "test datasheet" }
runtime_memory_mib = { value = 81106, source = "test deviceQuery" }
hbm_bandwidth_tb_per_s = { value = 3.35, source = "test datasheet" }
nvlink_gb_per_s = { value = 450, source = "test datasheet" }
intra_node_topology = { value = "switch", source = "test server" }
pcie_generation = { value = 5, source = "test datasheet" }
pcie_gb_per_s = { value = 64, source = "test datasheet" }

[peak_dense_tflops]
fp32 = { value = 67, source = "test datasheet" }
bf16 = { value = 989.5, source = "test datasheet" }

[[mig_profiles]]
name = "1g.10gb"
memory_gb = { value = 10, source = "test guide" }
compute_slices = 1
memory_slices = 1
max_instances = 7
placement_starts = [0, 1, 2, 3, 4, 5, 6]
source = "test guide"

[[mig_profiles]]
name = "3g.40gb"
memory_gb = { value = 40, source = "test guide" }
compute_slices = 3
memory_slices = 4
max_instances = 2
placement_starts = [0, 4]
source = "test guide"

[node]
gpus_per_node = { value = 8, source = "test server" }
network_gbit_per_s_per_gpu = { value = 400, source = "test server" }
host_ram_tb = { value = 2, source = "test server" }
nvme_capacity_tb = { value = 30.72, source = "test server" }
nvme_gb_per_s = { value = 56, source = "test server" }
framework_reserve_gib = { value = 2, source = "assumption: test" }
"""


def write_gpu(directory: Path, text: str = MINIMAL_GPU, name: str = "testgpu") -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def edited(old: str, new: str, text: str = MINIMAL_GPU) -> str:
    """The template with one exact fragment replaced (fails loudly if the fragment is absent)."""
    assert old in text, f"test template has no {old!r}"
    return text.replace(old, new, 1)


def numeric_field_names(cls: type) -> list[str]:
    # types.py uses `from __future__ import annotations`: field types are strings.
    return [field.name for field in dataclasses.fields(cls) if field.type in ("int", "float")]


def assert_catalog_error(path: Path, key: str, match: str = "") -> CatalogError:
    with pytest.raises(CatalogError) as caught:
        parse_gpu_file(path)
    message = str(caught.value)
    assert str(path) in message
    assert f"'{key}'" in message, message
    assert match in message, message
    return caught.value


# --- the shipped catalog --------------------------------------------------------------


def test_every_required_gpu_is_in_the_catalog_and_sorted() -> None:
    names = gpu_names()
    assert set(REQUIRED_GPUS) <= set(names)
    assert list(names) == sorted(names)
    assert tuple(gpu.name for gpu in all_gpus()) == names


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_every_gpu_loads_with_positive_values(name: str) -> None:
    gpu = load_gpu(name)
    assert isinstance(gpu, GpuSpec)
    assert gpu.name == name
    assert isinstance(gpu.memory_bytes, int) and gpu.memory_bytes > 0
    assert gpu.hbm_bandwidth_bytes_per_s > 0
    assert gpu.pcie_bandwidth_bytes_per_s > 0
    assert gpu.nvlink_bandwidth_bytes_per_s >= 0
    assert set(gpu.peak_flops_per_s) <= set(PRECISION_KEYS)
    assert {"fp32", "bf16", "fp16"} <= set(gpu.peak_flops_per_s)
    assert all(flops > 0 for flops in gpu.peak_flops_per_s.values())
    node = gpu.node
    assert node.gpus_per_node >= 1
    for field_name in ("host_ram_bytes", "nvme_capacity_bytes", "framework_reserve_bytes"):
        assert isinstance(getattr(node, field_name), int), field_name
    assert 0 < node.framework_reserve_bytes < gpu.memory_bytes


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_every_value_has_a_source(gpu: GpuSpec) -> None:
    for field_name in numeric_field_names(GpuSpec):
        assert field_name in gpu.sources, f"{gpu.name}: {field_name} has no source"
    for precision in gpu.peak_flops_per_s:
        assert f"peak_flops_per_s.{precision}" in gpu.sources, f"{gpu.name}: {precision} has no source"
    for field_name in numeric_field_names(NodeSpec):
        assert field_name in gpu.node.sources, f"{gpu.name}: node.{field_name} has no source"
    for field_name, source in [*gpu.sources.items(), *gpu.node.sources.items()]:
        assert isinstance(source, str) and source.strip(), f"{gpu.name}: {field_name} has an empty source"
    for profile in gpu.mig_profiles:
        assert profile.source.strip(), f"{gpu.name}: MIG {profile.name} has no source"


def test_numeric_field_discovery_sees_the_fields() -> None:
    # Guards the source test above against passing vacuously.
    assert "memory_bytes" in numeric_field_names(GpuSpec)
    assert "framework_reserve_bytes" in numeric_field_names(NodeSpec)


def test_rtx6090_is_marked_as_the_seeds_assumption_throughout() -> None:
    gpu = load_gpu("rtx6090")
    assert gpu.datasheet_memory_bytes == 48 * 10**9
    # A 48 GB GDDR card as the CUDA runtime reports one (RTX 6000 Ada deviceQuery).
    assert gpu.memory_bytes == 51_002_867_712
    for field_name, source in [*gpu.sources.items(), *gpu.node.sources.items()]:
        assert source.startswith("assumption:"), f"rtx6090 {field_name}: {source}"


def test_b200_is_the_180_gb_shipping_part_and_the_seed_figure_is_separate() -> None:
    assert load_gpu("b200").datasheet_memory_bytes == 180 * 10**9
    assert load_gpu("b200-192gb").datasheet_memory_bytes == 192 * 10**9
    assert load_gpu("b200").notes  # explains why 180 GB and not 192 GB
    assert load_gpu("gb200").datasheet_memory_bytes == 186 * 10**9
    # Runtime totals: B200 182642 MiB (hashcat's CUDA listing beside nvidia-smi 183359 MiB);
    # the others derived from it (assumptions in the catalog sources).
    assert load_gpu("b200").memory_bytes == 182_642 * 2**20
    assert load_gpu("b200-192gb").memory_bytes == 194_818 * 2**20
    assert load_gpu("gb200").memory_bytes == 188_754 * 2**20
    assert load_gpu("gb200").node.gpus_per_node == 72


def test_published_figures_in_internal_units() -> None:
    h100 = load_gpu("h100")
    # deviceQuery on an H100 80GB HBM3: 85045477376 bytes (nvidia-smi: 81559 MiB).
    assert h100.memory_bytes == 85_045_477_376
    assert h100.datasheet_memory_bytes == 80 * 10**9
    assert h100.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h100.peak_flops_per_s["bf16"] == pytest.approx(989.5e12)
    assert h100.peak_flops_per_s["fp8"] == pytest.approx(1979e12)
    assert h100.node.network_bandwidth_bytes_per_s_per_gpu == pytest.approx(50e9)
    assert h100.node.framework_reserve_bytes == 2 * 2**30
    assert load_gpu("a100-80gb").peak_flops_per_s["bf16"] == pytest.approx(312e12)
    # HIP runtime on an MI300X: 196592 MiB; the datasheet says 192 GB.
    assert load_gpu("mi300x").memory_bytes == 196_592 * 2**20
    assert load_gpu("mi300x").datasheet_memory_bytes == 192 * 10**9


@pytest.mark.parametrize("name", ["a100-40gb", "a100-80gb"])
def test_a100_has_no_fp8_or_fp4(name: str) -> None:
    gpu = load_gpu(name)
    assert not gpu.supports("fp8")
    assert not gpu.supports("fp4")
    assert gpu.supports("bf16")


def test_fp4_only_on_blackwell() -> None:
    with_fp4 = {gpu.name for gpu in all_gpus() if gpu.supports("fp4")}
    assert with_fp4 == {"b200", "b200-192gb", "gb200", "rtx5090", "rtx6090"}


def test_cards_without_nvlink_say_zero() -> None:
    for name in ("rtx4090", "rtx5090", "rtx6090", "l40s", "h100-pcie"):
        assert load_gpu(name).nvlink_bandwidth_bytes_per_s == 0


# --- name lookup ------------------------------------------------------------------------


def test_aliases_resolve_case_insensitively() -> None:
    h100 = load_gpu("h100")
    assert load_gpu("h100-sxm") is h100
    assert load_gpu("H100-SXM") is h100
    assert load_gpu("  H100 ") is h100
    assert load_gpu("B200-180GB") is load_gpu("b200")


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError, match="h100"):
        load_gpu("h10")


def test_unknown_gpu_without_close_name_lists_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="known:"):
        load_gpu("tpu-v5p")


# --- MIG ---------------------------------------------------------------------------------


def can_place(starts: tuple[int, ...], width: int, count: int) -> bool:
    """Whether ``count`` instances of ``width`` memory slices fit without overlapping."""
    placed = 0
    next_free = 0
    for start in sorted(starts):
        if start >= next_free:
            placed += 1
            next_free = start + width
    return placed >= count


@pytest.mark.parametrize("name", MIG_GPUS)
def test_mig_profiles_are_geometrically_valid(name: str) -> None:
    gpu = load_gpu(name)
    assert gpu.mig_profiles, f"{name} should have MIG profiles"
    names = [profile.name for profile in gpu.mig_profiles]
    assert len(names) == len(set(names))
    for profile in gpu.mig_profiles:
        assert profile.name.startswith(f"{profile.compute_slices}g."), profile.name
        assert 1 <= profile.memory_slices <= MIG_MEMORY_SLICES
        assert profile.placement_starts, profile.name
        for start in profile.placement_starts:
            assert 0 <= start and start + profile.memory_slices <= MIG_MEMORY_SLICES, (profile.name, start)
        assert can_place(profile.placement_starts, profile.memory_slices, profile.max_instances), profile.name
        assert profile.memory_bytes * profile.max_instances <= gpu.memory_bytes, profile.name
        assert gpu.mig_profile(profile.name) is profile
    full = [profile for profile in gpu.mig_profiles if profile.compute_slices == 7]
    assert len(full) == 1 and full[0].memory_slices == MIG_MEMORY_SLICES
    # The MIG guide's full profile is the datasheet figure, within what the runtime reports.
    assert full[0].memory_bytes == gpu.datasheet_memory_bytes <= gpu.memory_bytes


@pytest.mark.parametrize("name", NO_MIG_GPUS)
def test_gpus_without_mig_have_no_profiles(name: str) -> None:
    assert load_gpu(name).mig_profiles == ()


# --- immutability and serialization -------------------------------------------------------


def test_cached_entries_are_immutable_hashable_and_serializable() -> None:
    gpu = load_gpu("h100")
    with pytest.raises(TypeError):
        gpu.peak_flops_per_s["bf16"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        gpu.sources.clear()  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpu.memory_bytes = 1  # type: ignore[misc]
    assert hash(gpu) == hash(load_gpu("h100-sxm"))
    as_dict = dataclasses.asdict(gpu)
    assert json.loads(json.dumps(as_dict))["peak_flops_per_s"]["bf16"] == pytest.approx(989.5e12)
    assert copy.deepcopy(gpu) == gpu


# --- the loader on files written here -------------------------------------------------------


def test_minimal_file_loads(tmp_path: Path) -> None:
    gpu = load_gpu_file(write_gpu(tmp_path))
    assert gpu.name == "testgpu"
    assert gpu.aliases == ("test-alias",)
    assert gpu.memory_bytes == 81106 * 2**20
    assert gpu.datasheet_memory_bytes == 80 * 10**9
    assert gpu.intra_node_topology == "switch" and gpu.mesh_link_bandwidth_bytes_per_s == 0
    assert gpu.mig_profiles[1].placement_starts == (0, 4)
    assert gpu.sources["peak_flops_per_s.bf16"] == "test datasheet"


def test_memory_gib_is_binary(tmp_path: Path) -> None:
    text = edited('runtime_memory_mib = { value = 81106, source = "test deviceQuery" }',
                  'runtime_memory_gib = { value = 79, source = "torch, GiB" }')
    gpu = parse_gpu_file(write_gpu(tmp_path, text))
    assert gpu.memory_bytes == 79 * 2**30
    assert gpu.sources["memory_bytes"] == "torch, GiB"
    bytes_text = edited('runtime_memory_mib = { value = 81106, source = "test deviceQuery" }',
                        'runtime_memory_bytes = { value = 85045477376, source = "deviceQuery" }')
    assert parse_gpu_file(write_gpu(tmp_path, bytes_text)).memory_bytes == 85_045_477_376


def test_network_gigabits_become_bytes(tmp_path: Path) -> None:
    gpu = parse_gpu_file(write_gpu(tmp_path))
    assert gpu.node.network_bandwidth_bytes_per_s_per_gpu == pytest.approx(50e9)
    assert gpu.node.host_ram_bytes == 2 * 10**12
    assert gpu.node.nvme_capacity_bytes == 30_720_000_000_000
    assert gpu.node.nvme_bandwidth_bytes_per_s == pytest.approx(56e9)
    assert gpu.node.framework_reserve_bytes == 2 * 2**30
    assert gpu.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert gpu.nvlink_bandwidth_bytes_per_s == pytest.approx(450e9)
    assert gpu.peak_flops_per_s["bf16"] == pytest.approx(989.5e12)


def test_other_allowed_units(tmp_path: Path) -> None:
    text = edited('host_ram_tb = { value = 2, source = "test server" }',
                  'host_ram_gib = { value = 512, source = "test server" }')
    text = edited('hbm_bandwidth_tb_per_s = { value = 3.35, source = "test datasheet" }',
                  'hbm_bandwidth_gb_per_s = { value = 864, source = "test datasheet" }', text)
    gpu = parse_gpu_file(write_gpu(tmp_path, text))
    assert gpu.node.host_ram_bytes == 512 * 2**30
    assert gpu.hbm_bandwidth_bytes_per_s == pytest.approx(864e9)


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('notes = "for tests"', 'notes = "for tests"\nmemroy_gb = 3'))
    assert_catalog_error(path, "memroy_gb", "is not a known key")


def test_unknown_node_key(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, MINIMAL_GPU + 'infiniband_ports = { value = 8, source = "x" }\n')
    assert_catalog_error(path, "node.infiniband_ports", "is not a known key")


def test_unknown_key_inside_a_quantity(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('{ value = 80, source = "test datasheet" }',
                                      '{ value = 80, source = "test datasheet", unit = "GB" }'))
    assert_catalog_error(path, "datasheet_memory_gb.unit", "is not a known key")


def test_unknown_precision(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('bf16 = { value = 989.5, source = "test datasheet" }',
                                      'bf16 = { value = 989.5, source = "test datasheet" }\n'
                                      'tf32 = { value = 494, source = "test datasheet" }'))
    assert_catalog_error(path, "peak_dense_tflops.tf32", "not a known precision")


def test_unknown_mig_key(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("max_instances = 2\n", "max_instances = 2\nslices = 3\n"))
    assert_catalog_error(path, "mig_profiles[1].slices", "is not a known key")


def test_missing_key(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('pcie_gb_per_s = { value = 64, source = "test datasheet" }\n', ""))
    assert_catalog_error(path, "pcie_gb_per_s", "is missing")


def test_missing_node_key(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('nvme_gb_per_s = { value = 56, source = "test server" }\n', ""))
    assert_catalog_error(path, "node.nvme_gb_per_s", "is missing")


def test_missing_source(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('fp32 = { value = 67, source = "test datasheet" }', "fp32 = { value = 67 }"))
    assert_catalog_error(path, "peak_dense_tflops.fp32.source", "is missing")


def test_empty_source(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('gpus_per_node = { value = 8, source = "test server" }',
                                      'gpus_per_node = { value = 8, source = " " }'))
    assert_catalog_error(path, "node.gpus_per_node.source", "is empty")


def test_bare_number_instead_of_sourced_value_is_wrong_type(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('datasheet_memory_gb = { value = 80, source = "test datasheet" }',
                                      "datasheet_memory_gb = 80"))
    assert_catalog_error(path, "datasheet_memory_gb", "wrong type")


def test_string_value_is_wrong_type(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('nvlink_gb_per_s = { value = 450,', 'nvlink_gb_per_s = { value = "450",'))
    assert_catalog_error(path, "nvlink_gb_per_s.value", "wrong type")


def test_fractional_integer_is_wrong_type(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("pcie_generation = { value = 5,", "pcie_generation = { value = 5.5,"))
    assert_catalog_error(path, "pcie_generation.value", "wrong type")


def test_boolean_is_not_a_number(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("compute_slices = 3", "compute_slices = true"))
    assert_catalog_error(path, "mig_profiles[1].compute_slices", "wrong type")


def test_two_units_for_one_quantity(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('notes = "for tests"',
                                      'notes = "for tests"\nruntime_memory_gib = { value = 79, source = "x" }'))
    assert_catalog_error(path, "runtime_memory_gib", "duplicates 'runtime_memory_mib'")


def test_negative_quantity(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("nvme_gb_per_s = { value = 56,", "nvme_gb_per_s = { value = -1,"))
    assert_catalog_error(path, "node.nvme_gb_per_s", "at least 0")


def test_zero_memory(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('runtime_memory_mib = { value = 81106,', 'runtime_memory_mib = { value = 0,'))
    assert_catalog_error(path, "runtime_memory_mib", "greater than 0")


def test_malformed_toml(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('display_name = "Test GPU"', 'display_name = "Test GPU'))
    with pytest.raises(CatalogError, match="not valid TOML") as caught:
        parse_gpu_file(path)
    assert str(path) in str(caught.value)


def test_name_must_match_file_name(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, name="othername")
    assert_catalog_error(path, "name", "must equal the file name 'othername'")


def test_mig_placement_past_the_last_slice(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("placement_starts = [0, 4]", "placement_starts = [0, 6]"))
    assert_catalog_error(path, "mig_profiles[1].placement_starts", "ends past slice 7")


def test_mig_placement_out_of_range(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("placement_starts = [0, 1, 2, 3, 4, 5, 6]",
                                      "placement_starts = [0, 1, 2, 3, 4, 5, 6, 8]"))
    assert_catalog_error(path, "mig_profiles[0].placement_starts", "outside memory slices 0..7")


def test_mig_zero_memory_slices(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("memory_slices = 4", "memory_slices = 0"))
    assert_catalog_error(path, "mig_profiles[1].memory_slices", "at least 1")


def test_mig_more_instances_than_placements(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("max_instances = 2", "max_instances = 3"))
    assert_catalog_error(path, "mig_profiles[1].max_instances", "do not fit")


def test_mig_duplicate_profile_name(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('name = "3g.40gb"', 'name = "1g.10gb"'))
    assert_catalog_error(path, "mig_profiles[1].name", "repeats the MIG profile name")


def test_mig_profile_larger_than_the_gpu(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('memory_gb = { value = 40, source = "test guide" }',
                                      'memory_gb = { value = 400, source = "test guide" }'))
    assert_catalog_error(path, "mig_profiles[1].memory_gb", "larger than the GPU's memory")


def test_gpu_without_mig_profiles_loads(tmp_path: Path) -> None:
    text = MINIMAL_GPU[: MINIMAL_GPU.index("[[mig_profiles]]")] + MINIMAL_GPU[MINIMAL_GPU.index("[node]"):]
    assert parse_gpu_file(write_gpu(tmp_path, text)).mig_profiles == ()


def test_duplicate_alias_across_files_names_both(tmp_path: Path) -> None:
    first = write_gpu(tmp_path, name="testgpu")
    second_text = edited('name = "testgpu"', 'name = "secondgpu"')
    second_text = edited('aliases = ["test-alias"]', 'aliases = ["TEST-ALIAS"]', second_text)
    second = write_gpu(tmp_path, second_text, name="secondgpu")
    with pytest.raises(CatalogError) as caught:
        load_catalog(tmp_path)
    message = str(caught.value)
    assert str(first) in message and str(second) in message
    assert "'aliases'" in message and "test-alias" in message


def test_alias_equal_to_another_files_name(tmp_path: Path) -> None:
    write_gpu(tmp_path, name="testgpu")
    second_text = edited('name = "testgpu"', 'name = "secondgpu"')
    second_text = edited('aliases = ["test-alias"]', 'aliases = ["testgpu"]', second_text)
    write_gpu(tmp_path, second_text, name="secondgpu")
    with pytest.raises(CatalogError, match="already used by"):
        load_catalog(tmp_path)


def test_alias_repeated_within_a_file(tmp_path: Path) -> None:
    write_gpu(tmp_path, edited('aliases = ["test-alias"]', 'aliases = ["test-alias", "Test-Alias"]'))
    with pytest.raises(CatalogError, match="key 'aliases' repeats 'test-alias'"):
        load_catalog(tmp_path)


def test_catalog_directory_without_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no GPU files"):
        load_catalog(tmp_path)


def test_mig_instances_together_larger_than_the_gpu(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('memory_gb = { value = 40, source = "test guide" }',
                                      'memory_gb = { value = 43, source = "test guide" }'))
    # 2 x 43 GB = 86 GB > the 81106 MiB (85.05 GB) the runtime reports.
    assert_catalog_error(path, "mig_profiles[1].max_instances", "more memory than the GPU has")


# --- capacity and intra-node topology (issue 11 items 16 and 17) ---------------------------


def test_old_memory_key_is_refused(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('datasheet_memory_gb = { value = 80, source = "test datasheet" }',
                                      'datasheet_memory_gb = { value = 80, source = "test datasheet" }\n'
                                      'memory_gb = { value = 80, source = "test datasheet" }'))
    assert_catalog_error(path, "memory_gb", "is not a known key")


@pytest.mark.parametrize("value", ["79.2", "81106000"])
def test_runtime_memory_in_the_wrong_unit_is_refused(tmp_path: Path, value: str) -> None:
    # 79.2 written as MiB, or bytes written as MiB: far outside 72 GB..80 GiB.
    path = write_gpu(tmp_path, edited("runtime_memory_mib = { value = 81106,", f"runtime_memory_mib = {{ value = {value},"))
    assert_catalog_error(path, "runtime_memory_mib", "check the unit")


def test_unknown_topology_is_refused(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('{ value = "switch",', '{ value = "torus",'))
    assert_catalog_error(path, "intra_node_topology.value", "must be one of switch, full_mesh, pcie")


def test_missing_topology_is_refused(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('intra_node_topology = { value = "switch", source = "test server" }\n', ""))
    assert_catalog_error(path, "intra_node_topology", "is missing")


def test_pcie_topology_needs_no_gpu_link(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited('{ value = "switch",', '{ value = "pcie",'))
    assert_catalog_error(path, "intra_node_topology", "'pcie' means no NVLink")
    no_link = edited('nvlink_gb_per_s = { value = 450,', 'nvlink_gb_per_s = { value = 0,')
    assert_catalog_error(write_gpu(tmp_path, no_link), "intra_node_topology", "'pcie' means no NVLink")


MESH = edited('intra_node_topology = { value = "switch", source = "test server" }',
              'intra_node_topology = { value = "full_mesh", source = "test baseboard" }\n'
              'mesh_link_gb_per_s = { value = 64, source = "test white paper" }',
              edited('nvlink_gb_per_s = { value = 450,', 'nvlink_gb_per_s = { value = 448,'))


def test_full_mesh_loads_with_its_link(tmp_path: Path) -> None:
    gpu = parse_gpu_file(write_gpu(tmp_path, MESH))
    assert gpu.intra_node_topology == "full_mesh"
    assert gpu.mesh_link_bandwidth_bytes_per_s == pytest.approx(64e9)
    assert gpu.sources["mesh_link_bandwidth_bytes_per_s"] == "test white paper"


def test_full_mesh_links_must_add_up_to_the_gpu_total(tmp_path: Path) -> None:
    path = write_gpu(tmp_path, edited("mesh_link_gb_per_s = { value = 64,", "mesh_link_gb_per_s = { value = 128,", MESH))
    assert_catalog_error(path, "mesh_link_gb_per_s", "differs from the GPU's link total 448 GB/s")


def test_full_mesh_needs_its_link_and_only_a_mesh_has_one(tmp_path: Path) -> None:
    missing = edited('mesh_link_gb_per_s = { value = 64, source = "test white paper" }', "", MESH)
    with pytest.raises(CatalogError, match="'mesh_link_gb_per_s' is missing"):
        parse_gpu_file(write_gpu(tmp_path, missing))
    on_switch = edited('intra_node_topology = { value = "switch", source = "test server" }',
                       'intra_node_topology = { value = "switch", source = "test server" }\n'
                       'mesh_link_gb_per_s = { value = 64, source = "x" }')
    assert_catalog_error(write_gpu(tmp_path, on_switch), "mesh_link_gb_per_s", "only for intra_node_topology 'full_mesh'")


def test_shipped_topologies() -> None:
    """MI300X is the one mesh (AMD: 7 Infinity Fabric links, one to each peer); cards
    without NVLink are 'pcie'; the NVLink parts sit behind NVSwitch."""
    topologies = {gpu.name: gpu.intra_node_topology for gpu in all_gpus()}
    assert topologies["mi300x"] == "full_mesh"
    assert {name for name, kind in topologies.items() if kind == "pcie"} == {"rtx4090", "rtx5090", "rtx6090", "l40s", "h100-pcie"}
    assert {name for name, kind in topologies.items() if kind == "switch"} == {
        "a100-40gb", "a100-80gb", "h100", "h800", "h200", "b200", "b200-192gb", "gb200"}
    mi300x = load_gpu("mi300x")
    assert mi300x.mesh_link_bandwidth_bytes_per_s == pytest.approx(64e9)
    assert mi300x.nvlink_bandwidth_bytes_per_s == pytest.approx(7 * 64e9)
