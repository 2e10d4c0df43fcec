"""Resolve the user's --allow / --forbid / --pin into one domain per technique.

An allow-list replaces the default domain, a pin narrows it to one value (which need not
be in the default domain: pinning micro_batch=128 is honoured), forbid removes values.
Every key and value is checked: a typo is an error, never silently ignored.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from vramopt.constraints import registry
from vramopt.constraints.technique import DomainContext
from vramopt.errors import InputError
from vramopt.types import SearchSpace

PINNABLE_FIELDS = tuple(technique.field for technique in registry.TECHNIQUES)


SHORT_NAMES = {alias: technique.field for technique in registry.TECHNIQUES for alias in technique.aliases}
"""Common short names (each technique's ``aliases``), answered with the plan field's real
name (pins use the JSON names)."""


def _check_field(field: str, kind: str | None = None) -> None:
    """An unknown field is an error naming the close ones (of ``kind``'s plans when given)."""
    if field in registry.BY_FIELD:
        return
    known = registry.fields_for(kind) if kind is not None else PINNABLE_FIELDS
    if field in SHORT_NAMES and SHORT_NAMES[field] in known:
        raise InputError(f"unknown plan field '{field}'; did you mean {SHORT_NAMES[field]}?")
    close = difflib.get_close_matches(field.lower(), known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"the plan fields are: {', '.join(known)}"
    raise InputError(f"unknown plan field '{field}'; {hint}")


def _workloads_phrase(workloads: tuple[str, ...]) -> str:
    if workloads == ("infer",):
        return "serving plans (workload infer)"
    return f"training plans (workload {', '.join(workloads[:-1])} or {workloads[-1]})"


def check_workload_fields(kind: str, space: SearchSpace) -> None:
    """Refuse what ``kind``'s search would silently ignore: a --pin/--allow/--forbid field
    that its plans do not have (their fields come from the technique registry, the one
    place that says which workload a field belongs to), and --allow-fp4 where it adds
    nothing. The CLI, the API and pack jobs all pass through here."""
    fields = registry.fields_for(kind)
    if not fields:
        return  # an unknown workload kind is refused, with its own message, where the workload is read
    for option, mapping in (("--allow", space.allow), ("--forbid", space.forbid), ("--pin", space.pin)):
        for field in mapping:
            _check_field(field, kind)
            if field not in fields:
                raise InputError(
                    f"{option} {field}: {field} is a field of {_workloads_phrase(registry.technique(field).workloads)}, "
                    f"not of {kind} plans; the {kind} plan fields are: {', '.join(fields)}"
                )
    if not space.allow_fp4:
        return
    if kind == "infer":
        raise InputError("--allow-fp4 adds fp4 to the training precisions and does not apply to workload infer; "
                         "to serve fp4 weights use --allow quantization=bf16,fp8,fp4")
    if kind != "train":
        raise InputError(f"--allow-fp4 adds fp4 to pretraining's default precisions; workload {kind} searches bf16 "
                         "unless told otherwise: use --allow precision=bf16,fp4")
    for option, mapping in (("--pin", space.pin), ("--allow", space.allow)):
        if "precision" in mapping:
            raise InputError(f"--allow-fp4 adds fp4 to the default precisions, which {option} precision replaces; "
                             f"list fp4 in {option} precision instead")


def _parse_values(field: str, values) -> tuple:
    technique = registry.technique(field)
    if isinstance(values, (str, int, float, bool)):
        values = (values,)
    parsed = []
    for value in values:
        item = technique.parse(str(value).lower() if isinstance(value, bool) else str(value))
        if item not in parsed:
            parsed.append(item)
    return tuple(parsed)


def parsed_user_choices(space: SearchSpace, kind: str | None = None) -> dict[str, dict[str, tuple]]:
    """{'allow'|'forbid'|'pin': {field: parsed values}}, validated; with ``kind``, also
    that every field belongs to that workload's plans (``check_workload_fields``)."""
    if kind is not None:
        check_workload_fields(kind, space)
    result: dict[str, dict[str, tuple]] = {"allow": {}, "forbid": {}, "pin": {}}
    for kind, mapping in (("allow", space.allow), ("forbid", space.forbid), ("pin", space.pin)):
        for field, values in mapping.items():
            _check_field(field)
            parsed = _parse_values(field, values)
            if kind == "pin" and len(parsed) != 1:
                raise InputError(f"--pin {field} takes one value, got {len(parsed)}")
            if not parsed:
                raise InputError(f"--{kind} {field} has no values")
            result[kind][field] = parsed
    for field, values in result["pin"].items():
        if field in result["forbid"] and values[0] in result["forbid"][field]:
            raise InputError(f"{field}={values[0]} is both pinned and forbidden")
        if field in result["allow"] and values[0] not in result["allow"][field]:
            raise InputError(f"{field}={values[0]} is pinned but not in the --allow list {list(result['allow'][field])}")
    return result


def domain(field: str, context: DomainContext, choices: Mapping[str, Mapping[str, tuple]], default: tuple | None = None) -> tuple[Any, ...]:
    technique = registry.technique(field)
    values = choices["allow"].get(field)
    if values is None:
        values = default if default is not None else technique.default_values(context)
    if field in choices["pin"]:
        values = choices["pin"][field]
    forbidden = choices["forbid"].get(field, ())
    return tuple(value for value in values if value not in forbidden)
