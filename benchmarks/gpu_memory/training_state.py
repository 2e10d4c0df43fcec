"""The two training-state layouts measured: pure fp32, and bf16 with fp32 master weights.

Both keep gradient buffers allocated between steps (``zero_grad`` zeroes them in place
instead of freeing them), as Megatron-LM's and DeepSpeed's contiguous gradient buffers do:
gradients are then persistent state, present before the forward pass like the weights and
optimizer states, and ``activations_peak_bytes`` (peak during forward+backward minus what
was allocated before the forward) holds activations and temporaries only.

Bytes per parameter (ZeRO, Rajbhandari et al. 2020, section 3.1, K = 12 for mixed precision):

============  =======  =========  ==========================================
precision     weights  gradients  optimizer (``optimizer_bytes``)
============  =======  =========  ==========================================
``fp32``      4        4          8: Adam m and v (the weights are the master)
``bf16``      2        2          12: fp32 master copy + Adam m and v
============  =======  =========  ==========================================

plus AdamW's one-element ``step`` tensor per parameter tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

ADAMW_LEARNING_RATE = 1e-4  # any value: the weights are random and only memory is measured


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the given tensors (each counted once), from their sizes, not the allocator."""
    seen: set[int] = set()
    total = 0
    for tensor in tensors:
        if tensor is None or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += tensor.nelement() * tensor.element_size()
    return total


class Fp32AdamW:
    """fp32 weights, fp32 gradients, fp32 AdamW m and v: 4 + 4 + 8 bytes per parameter."""

    def __init__(self, model: torch.nn.Module, fused: bool) -> None:
        self.parameters = list(model.parameters())
        self.optimizer = torch.optim.AdamW(self.parameters, lr=ADAMW_LEARNING_RATE, fused=fused)

    def zero_grad(self) -> None:
        # Keep the gradient buffers between steps (as Megatron-LM's and DeepSpeed's
        # contiguous gradient buffers do) so gradients are persistent state, not part of
        # the forward/backward peak that activations_peak_bytes isolates.
        self.optimizer.zero_grad(set_to_none=False)

    def step(self) -> None:
        self.optimizer.step()

    def state_bytes(self) -> int:
        return tensor_bytes(_state_tensors(self.optimizer))


class MasterWeightAdamW:
    """Mixed precision with fp32 master weights: 2 + 2 + 12 bytes per parameter.

    The layout Megatron-LM and ZeRO (Rajbhandari et al. 2020, K = 12) describe: bf16 model
    weights and gradients; the optimizer holds an fp32 master copy of every weight and
    fp32 Adam m and v. Before the update the bf16 gradients are copied into fp32 master
    gradients (a transient 4 bytes per parameter, freed right after the step), AdamW
    updates the masters, and the masters are copied back into the bf16 weights.
    """

    def __init__(self, model: torch.nn.Module, fused: bool) -> None:
        self.parameters = list(model.parameters())
        self.masters = [parameter.detach().to(torch.float32, copy=True) for parameter in self.parameters]
        self.optimizer = torch.optim.AdamW(self.masters, lr=ADAMW_LEARNING_RATE, fused=fused)

    def zero_grad(self) -> None:
        for parameter in self.parameters:
            if parameter.grad is not None:
                parameter.grad.zero_()  # persistent, as in Fp32AdamW.zero_grad

    def step(self) -> None:
        for parameter, master in zip(self.parameters, self.masters):
            master.grad = parameter.grad.to(torch.float32) if parameter.grad is not None else None
        self.optimizer.step()
        with torch.no_grad():
            for parameter, master in zip(self.parameters, self.masters):
                parameter.copy_(master)
                master.grad = None

    def state_bytes(self) -> int:
        return tensor_bytes(self.masters) + tensor_bytes(_state_tensors(self.optimizer))


def _state_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value
