"""Write tests/fixtures/exporters/megatron_lm_arguments.json: every command-line argument of
Megatron-LM's pretrain_gpt.py parser (names, action kind, type, choices) at one release.

Megatron-LM's training package is not on the package index (megatron-core is, without
megatron/training/), so the tests check ``--export megatron`` against this record of the
parser, and against the parser itself when MEGATRON_LM names a checkout.

Usage: a Megatron-LM checkout at tag core_v0.16.1 (with megatron-core 0.16.1, torch, six,
regex installed), then

    MEGATRON_LM=/path/to/Megatron-LM python benchmarks/megatron_arguments_fixture.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from argument_records import argument_records  # benchmarks/argument_records.py (the script's own folder)

RELEASE = "core_v0.16.1"
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "exporters" / "megatron_lm_arguments.json"


def main() -> None:
    checkout = os.environ.get("MEGATRON_LM")
    if not checkout:
        sys.exit("set MEGATRON_LM to a Megatron-LM checkout at " + RELEASE)
    sys.path.insert(0, checkout)
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    arguments = argument_records(parser)
    FIXTURE.write_text(json.dumps({"release": RELEASE, "source": "Megatron-LM megatron/training/arguments.py add_megatron_arguments",
                                   "arguments": arguments}, indent=1) + "\n")
    print(f"{len(arguments)} arguments of Megatron-LM {RELEASE} written to {FIXTURE}")


if __name__ == "__main__":
    main()
