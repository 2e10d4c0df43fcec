"""Issue 12 must-show, the case where it happens: 8-bit Adam chosen because it lets a larger
micro-batch fit, and the why line saying so. Full fine-tuning of Llama 3.1 8B on one B200:
Adam's states are 12 bytes per parameter (96 GB for 8.0B), 8-bit Adam's 6 (fp32 master + 2 x
1 byte + block scales), so 48 GB go to activations instead, and under the operator-level
throughput model (issue 13) a micro-batch of 4 is faster per token than 1. (With LoRA, as in
the issue's command, the optimizer states are the adapters' 0.3 GB: no micro-batch is won.)"""

from __future__ import annotations

from click.testing import CliRunner

from vramopt.cli import main


def test_eight_bit_adam_is_chosen_for_the_micro_batch_it_lets_fit():
    args = ["solve", "--model", "8b", "--workload", "finetune", "--gpu", "b200", "--max-gpus", "1", "--global-batch", "64",
            "--allow", "optimizer=adam,adam8bit", "--workers", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "optimizer 8-bit Adam" in result.output
    assert "is what lets micro-batch 4 fit: with adam it would need" in result.output
    assert "it fits micro-batch 1 at most" in result.output
