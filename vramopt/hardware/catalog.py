"""Strict loader of the hardware catalog: one TOML file per GPU in ``gpus/``.

Every quantity is written ``key_UNIT = { value = X, source = "..." }``; the unit suffix is
converted to the internal unit here, once (``units.SUFFIX_FACTORS``). A key nobody reads, a
missing key, a value of the wrong type, a precision the planner does not know, an impossible
MIG placement or an alias used by two files raises ``CatalogError`` naming the file and the
key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from vramopt.catalog_files import TableReader, read_toml
from vramopt.errors import CatalogError
from vramopt.types import GpuSpec, MigProfile, NodeSpec
from vramopt.units import SUFFIX_FACTORS

GPU_DIRECTORY = Path(__file__).resolve().parent / "gpus"
"""Where the shipped GPU files live."""

PRECISION_KEYS = ("fp32", "bf16", "fp16", "fp8", "fp4", "int8")
"""Keys allowed in ``[peak_dense_tflops]``; a precision left out is not supported."""

MIG_MEMORY_SLICES = 8
"""Memory slices of a MIG-capable GPU (NVIDIA MIG user guide: placements 0..7)."""

MIG_COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU (at most seven GPU instances)."""

MEMORY_UNITS = ("_gb", "_gib")
RUNTIME_MEMORY_UNITS = ("_bytes", "_mib", "_gib")
"""Units of ``runtime_memory``: the runtime reports bytes (cudaDeviceProp::totalGlobalMem,
torch's total_memory), deviceQuery MiB, PyTorch's messages GiB."""

TOPOLOGIES = ("switch", "full_mesh", "pcie")
"""How the GPUs of one node reach each other:

- ``switch``: through a switch (NVSwitch, NVLink Switch): every GPU keeps its full NVLink
  bandwidth towards any group of peers;
- ``full_mesh``: one direct link to each peer (AMD Infinity Fabric on MI300X): a GPU in a
  group of k reaches its k-1 peers over k-1 links;
- ``pcie``: no GPU-to-GPU fabric; traffic goes over each card's PCIe link.
"""
BANDWIDTH_UNITS = ("_tb_per_s", "_gb_per_s")
HOST_MEMORY_UNITS = ("_gb", "_gib", "_tb")
STORAGE_UNITS = ("_tb", "_gb")
NETWORK_UNITS = ("_gbit_per_s", "_gb_per_s")
RESERVE_UNITS = ("_gib", "_mib", "_gb")


class FrozenDict(dict):
    """A dict that cannot change after construction, so cached catalog entries stay
    immutable, hashable (GpuSpec can key a cache) and JSON-serializable as a plain dict."""

    __slots__ = ()

    def _immutable(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("catalog mappings are read-only")

    __setitem__ = __delitem__ = _immutable  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _immutable  # type: ignore[assignment]
    __ior__ = _immutable  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[type, tuple[dict]]:
        return (type(self), (dict(self),))

    def __copy__(self) -> "FrozenDict":
        return self

    def __deepcopy__(self, memo: dict) -> "FrozenDict":
        return self


def _full_key(reader: TableReader, key: str) -> str:
    return f"{reader.where}.{key}" if reader.where else key


def _scaled_quantity(
    reader: TableReader, stem: str, units: Iterable[str], tail: str = "", positive: bool = False
) -> tuple[float, str]:
    """Read ``stem + UNIT + tail = {value, source}`` for exactly one of the allowed units and
    return the value in the internal unit with its source.

    ``tail`` lets the unit sit inside the key, as in ``network_gbit_per_s_per_gpu``.
    """
    units = tuple(units)
    present = [unit for unit in units if reader.has(f"{stem}{unit}{tail}")]
    if not present:
        names = " or ".join(f"'{_full_key(reader, stem + unit + tail)}'" for unit in units)
        raise CatalogError(f"{reader.path}: {names} is missing")
    key = f"{stem}{present[0]}{tail}"
    if len(present) > 1:
        raise reader.error(f"{stem}{present[1]}{tail}", f"duplicates '{_full_key(reader, key)}'")
    value, source = reader.sourced(key)
    if value < 0 or (positive and value == 0):
        bound = "greater than 0" if positive else "at least 0"
        raise reader.error(key, f"must be {bound}, got {value:g}")
    return value * SUFFIX_FACTORS[present[0]], source


def _sourced_integer(reader: TableReader, key: str, minimum: int) -> tuple[int, str]:
    """Read ``key = { value = N, source = "..." }`` where N must be a whole number."""
    entry = reader.sub(key)
    value = entry.integer("value", minimum=minimum)
    source = entry.text("source")
    entry.finish()
    return value, source


def _peak_flops(reader: TableReader) -> tuple[dict[str, float], dict[str, str]]:
    table = reader.sub("peak_dense_tflops")
    flops: dict[str, float] = {}
    sources: dict[str, str] = {}
    for key in table.table:
        if key not in PRECISION_KEYS:
            raise table.error(key, f"is not a known precision (known: {', '.join(PRECISION_KEYS)})")
        value, source = table.sourced(key)
        if value <= 0:
            raise table.error(key, f"must be greater than 0, got {value:g}")
        flops[key] = value * SUFFIX_FACTORS["_tflops"]
        sources[f"peak_flops_per_s.{key}"] = source
    if not flops:
        raise CatalogError(f"{reader.path}: key 'peak_dense_tflops' lists no precision")
    table.finish()
    ordered = {key: flops[key] for key in PRECISION_KEYS if key in flops}
    return ordered, sources


def _placement_starts(reader: TableReader, memory_slices: int) -> tuple[int, ...]:
    key = "placement_starts"
    starts = reader.raw(key, ..., list)
    if not starts:
        raise reader.error(key, "is empty")
    if not all(isinstance(start, int) and not isinstance(start, bool) for start in starts):
        raise reader.error(key, "must be a list of integers")
    for start in starts:
        if not 0 <= start < MIG_MEMORY_SLICES:
            raise reader.error(key, f"start {start} is outside memory slices 0..{MIG_MEMORY_SLICES - 1}")
        if start + memory_slices > MIG_MEMORY_SLICES:
            raise reader.error(
                key,
                f"start {start} with {memory_slices} memory slices ends past slice {MIG_MEMORY_SLICES - 1}",
            )
    if len(set(starts)) != len(starts):
        raise reader.error(key, "repeats a start")
    return tuple(sorted(starts))


def _mig_profile(reader: TableReader, gpu_memory_bytes: float) -> MigProfile:
    name = reader.text("name")
    memory_bytes, memory_source = _scaled_quantity(reader, "memory", MEMORY_UNITS, positive=True)
    if memory_bytes > gpu_memory_bytes:
        memory_key = next(f"memory{unit}" for unit in MEMORY_UNITS if reader.has(f"memory{unit}"))
        raise reader.error(memory_key, "is larger than the GPU's memory")
    compute_slices = reader.integer("compute_slices", minimum=1)
    if compute_slices > MIG_COMPUTE_SLICES:
        raise reader.error("compute_slices", f"must be at most {MIG_COMPUTE_SLICES}, got {compute_slices}")
    memory_slices = reader.integer("memory_slices", minimum=1)
    if memory_slices > MIG_MEMORY_SLICES:
        raise reader.error("memory_slices", f"must be at most {MIG_MEMORY_SLICES}, got {memory_slices}")
    max_instances = reader.integer("max_instances", minimum=1)
    starts = _placement_starts(reader, memory_slices)
    if max_instances > len(starts) or max_instances * memory_slices > MIG_MEMORY_SLICES:
        raise reader.error(
            "max_instances",
            f"{max_instances} instances of {memory_slices} memory slices do not fit the placements {list(starts)}",
        )
    if memory_bytes * max_instances > gpu_memory_bytes * (1 + 1e-9):
        raise reader.error(
            "max_instances", f"{max_instances} instances of this profile hold more memory than the GPU has"
        )
    source = reader.text("source")
    reader.finish()
    if memory_source != source:
        source = f"{source}; memory: {memory_source}"
    return MigProfile(
        name=name,
        memory_bytes=round(memory_bytes),
        compute_slices=compute_slices,
        memory_slices=memory_slices,
        max_instances=max_instances,
        placement_starts=starts,
        source=source,
    )


def _mig_profiles(reader: TableReader, gpu_memory_bytes: float) -> tuple[MigProfile, ...]:
    key = "mig_profiles"
    entries = reader.raw(key, [], list)
    profiles: list[MigProfile] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        profile_reader = TableReader(entry, reader.path, f"{_full_key(reader, key)}[{index}]")
        profile = _mig_profile(profile_reader, gpu_memory_bytes)
        if profile.name in seen:
            raise profile_reader.error("name", f"repeats the MIG profile name '{profile.name}'")
        seen.add(profile.name)
        profiles.append(profile)
    return tuple(profiles)


def _sourced_text(reader: TableReader, key: str, choices: tuple[str, ...]) -> tuple[str, str]:
    """Read ``key = { value = "text", source = "..." }`` where the text is one of ``choices``."""
    entry = reader.sub(key)
    value = entry.text("value")
    if value not in choices:
        raise entry.error("value", f"must be one of {', '.join(choices)}, got '{value}'")
    source = entry.text("source")
    entry.finish()
    return value, source


def _topology(reader: TableReader, nvlink_bytes_per_s: float, gpus_per_node: int) -> tuple[str, float, dict[str, str]]:
    """The intra-node topology, the per-link bandwidth of a mesh, and their sources.

    A mesh's ``nvlink`` figure must be its links added up (one to each other GPU of the
    node), so the aggregate and the per-link figures cannot disagree."""
    sources: dict[str, str] = {}
    topology, sources["intra_node_topology"] = _sourced_text(reader, "intra_node_topology", TOPOLOGIES)
    if (topology == "pcie") != (nvlink_bytes_per_s == 0):
        raise reader.error(
            "intra_node_topology", f"is '{topology}' but the GPU-to-GPU link bandwidth is {nvlink_bytes_per_s / 1e9:g} GB/s "
            "('pcie' means no NVLink or Infinity Fabric, and only it)"
        )
    link_keys = [key for key in ("mesh_link_gb_per_s",) if reader.has(key)]
    if topology != "full_mesh":
        if link_keys:
            raise reader.error(link_keys[0], f"is only for intra_node_topology 'full_mesh', not '{topology}'")
        assumed = "assumption: " if sources["intra_node_topology"].startswith("assumption:") else ""
        sources["mesh_link_bandwidth_bytes_per_s"] = f"{assumed}not a mesh (intra_node_topology '{topology}')"
        return topology, 0.0, sources
    link, sources["mesh_link_bandwidth_bytes_per_s"] = _scaled_quantity(reader, "mesh_link", ("_gb_per_s",), positive=True)
    if gpus_per_node < 2:
        raise reader.error("intra_node_topology", "is 'full_mesh' but the node holds one GPU")
    aggregate = (gpus_per_node - 1) * link
    if abs(aggregate - nvlink_bytes_per_s) > 1e-6 * aggregate:
        raise reader.error(
            "mesh_link_gb_per_s",
            f"x {gpus_per_node - 1} peers = {aggregate / 1e9:g} GB/s differs from the GPU's link total "
            f"{nvlink_bytes_per_s / 1e9:g} GB/s",
        )
    return topology, link, sources


def _runtime_memory(reader: TableReader, datasheet_bytes: float) -> tuple[float, str]:
    """The memory the runtime reports, checked against the datasheet figure.

    Every reading in the catalog lies between 90% of the datasheet figure read as decimal
    GB and the same figure read as GiB (an "80 GB" H100 reports 79.2 GiB); a value outside
    that range is a unit written wrong."""
    memory, source = _scaled_quantity(reader, "runtime_memory", RUNTIME_MEMORY_UNITS, positive=True)
    datasheet_gb = datasheet_bytes / SUFFIX_FACTORS["_gb"]
    low, high = 0.9 * datasheet_bytes, datasheet_gb * SUFFIX_FACTORS["_gib"]
    if not low <= memory <= high:
        key = next(f"runtime_memory{unit}" for unit in RUNTIME_MEMORY_UNITS if reader.has(f"runtime_memory{unit}"))
        raise reader.error(
            key, f"is {memory:,.0f} bytes, outside {low:,.0f}..{high:,.0f} (90% of the datasheet's {datasheet_gb:g} GB "
            f"up to {datasheet_gb:g} GiB): check the unit"
        )
    return memory, source


def _node(reader: TableReader) -> NodeSpec:
    node = reader.sub("node")
    sources: dict[str, str] = {}
    gpus_per_node, sources["gpus_per_node"] = _sourced_integer(node, "gpus_per_node", minimum=1)
    network, sources["network_bandwidth_bytes_per_s_per_gpu"] = _scaled_quantity(
        node, "network", NETWORK_UNITS, tail="_per_gpu"
    )
    host_ram, sources["host_ram_bytes"] = _scaled_quantity(node, "host_ram", HOST_MEMORY_UNITS, positive=True)
    nvme_capacity, sources["nvme_capacity_bytes"] = _scaled_quantity(node, "nvme_capacity", STORAGE_UNITS)
    nvme_bandwidth, sources["nvme_bandwidth_bytes_per_s"] = _scaled_quantity(node, "nvme", ("_gb_per_s",))
    reserve, sources["framework_reserve_bytes"] = _scaled_quantity(node, "framework_reserve", RESERVE_UNITS)
    node.finish()
    return NodeSpec(
        gpus_per_node=gpus_per_node,
        network_bandwidth_bytes_per_s_per_gpu=network,
        host_ram_bytes=round(host_ram),
        nvme_capacity_bytes=round(nvme_capacity),
        nvme_bandwidth_bytes_per_s=nvme_bandwidth,
        framework_reserve_bytes=round(reserve),
        sources=FrozenDict(sources),
    )


def parse_gpu_file(path: Path | str) -> GpuSpec:
    """Read one GPU file strictly and return its ``GpuSpec`` in internal units."""
    path = Path(path)
    return parse_gpu_table(read_toml(path), path, "", path.stem, "the file name")


def parse_gpu_table(table: Mapping[str, Any], path: Path, where: str, expected_name: str, name_origin: str) -> GpuSpec:
    """One GPU's table (a whole catalog file, or a ``[gpu.NAME]`` table of a hardware file
    at ``where``) read strictly; its ``name`` must equal ``expected_name``."""
    reader = TableReader(table, path, where)
    name = reader.text("name")
    if name != expected_name:
        raise reader.error("name", f"is '{name}' but must equal {name_origin} '{expected_name}'")
    display_name = reader.text("display_name")
    aliases = reader.strings("aliases", ())
    for alias in aliases:
        if not alias.strip():
            raise reader.error("aliases", "contains an empty alias")
    notes = reader.text("notes", "")

    sources: dict[str, str] = {}
    datasheet_bytes, sources["datasheet_memory_bytes"] = _scaled_quantity(
        reader, "datasheet_memory", ("_gb",), positive=True
    )
    memory_bytes, sources["memory_bytes"] = _runtime_memory(reader, datasheet_bytes)
    hbm_bandwidth, sources["hbm_bandwidth_bytes_per_s"] = _scaled_quantity(
        reader, "hbm_bandwidth", BANDWIDTH_UNITS, positive=True
    )
    nvlink, sources["nvlink_bandwidth_bytes_per_s"] = _scaled_quantity(reader, "nvlink", BANDWIDTH_UNITS)
    pcie_generation, sources["pcie_generation"] = _sourced_integer(reader, "pcie_generation", minimum=1)
    pcie_bandwidth, sources["pcie_bandwidth_bytes_per_s"] = _scaled_quantity(
        reader, "pcie", BANDWIDTH_UNITS, positive=True
    )
    flops, flops_sources = _peak_flops(reader)
    sources.update(flops_sources)
    mig_profiles = _mig_profiles(reader, memory_bytes)
    node = _node(reader)
    topology, mesh_link, topology_sources = _topology(reader, nvlink, node.gpus_per_node)
    sources.update(topology_sources)
    reader.finish()
    return GpuSpec(
        name=name,
        display_name=display_name,
        aliases=aliases,
        memory_bytes=round(memory_bytes),
        datasheet_memory_bytes=round(datasheet_bytes),
        hbm_bandwidth_bytes_per_s=hbm_bandwidth,
        peak_flops_per_s=FrozenDict(flops),
        nvlink_bandwidth_bytes_per_s=nvlink,
        intra_node_topology=topology,
        mesh_link_bandwidth_bytes_per_s=mesh_link,
        pcie_generation=pcie_generation,
        pcie_bandwidth_bytes_per_s=pcie_bandwidth,
        mig_profiles=mig_profiles,
        node=node,
        sources=FrozenDict(sources),
        notes=notes,
    )


def _lookup_names(gpu: GpuSpec) -> Iterator[tuple[str, str]]:
    """(lower-case name, key it came from) for the GPU's name and each alias."""
    yield gpu.name.lower(), "name"
    for alias in gpu.aliases:
        yield alias.lower(), "aliases"


def load_catalog(directory: Path | str = GPU_DIRECTORY) -> tuple[GpuSpec, ...]:
    """Parse every ``*.toml`` in ``directory``; names and aliases must be unique across files
    (compared case-insensitively). Returns the GPUs sorted by name."""
    directory = Path(directory)
    paths = sorted(directory.glob("*.toml"))
    if not paths:
        raise CatalogError(f"{directory}: no GPU files (*.toml)")
    owners: dict[str, Path] = {}
    gpus: list[GpuSpec] = []
    for path in paths:
        gpu = parse_gpu_file(path)
        for lookup_name, key in _lookup_names(gpu):
            other = owners.get(lookup_name)
            if other == path:
                raise CatalogError(f"{path}: key '{key}' repeats '{lookup_name}' within the file")
            if other is not None:
                raise CatalogError(f"{path}: key '{key}' entry '{lookup_name}' is already used by {other}")
            owners[lookup_name] = path
        gpus.append(gpu)
    return tuple(sorted(gpus, key=lambda gpu: gpu.name))


def lookup_table(gpus: Iterable[GpuSpec]) -> Mapping[str, GpuSpec]:
    """Lower-case name or alias -> GPU (the catalog has already rejected collisions)."""
    table = {}
    for gpu in gpus:
        for lookup_name, _ in _lookup_names(gpu):
            table[lookup_name] = gpu
    return FrozenDict(table)
