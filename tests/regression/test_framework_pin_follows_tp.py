"""Issue 15 item 1 (a framework's legal combinations, checked before the search): a pin of the
tensor-parallel degree is checked with the experts' degree following it (expert_tensor_parallel
0 = the plan's tp, its plan-field default), not with the one-GPU neutral plan's resolved 1, so a
dense model's pinned tp is not refused by torchtitan's expert rule (which says: without expert
parallelism the experts are split like the dense layers, tp)."""

from __future__ import annotations

import pytest

from vramopt.errors import InputError
from vramopt.frameworks import space_for_framework
from vramopt.types import SearchSpace


def test_pinned_tp_and_pp_run_under_torchtitan():
    space = space_for_framework(SearchSpace(framework="torchtitan", pin={"tensor_parallel": "8", "pipeline_parallel": "8"}))
    assert space.pin == {"tensor_parallel": "8", "pipeline_parallel": "8"}


def test_a_pinned_expert_degree_torchtitan_has_no_setting_for_is_still_refused():
    with pytest.raises(InputError, match="cannot run under --framework torchtitan: torchtitan: with expert parallelism"):
        space_for_framework(SearchSpace(framework="torchtitan", pin={"tensor_parallel": "8", "expert_tensor_parallel": "2"}))
