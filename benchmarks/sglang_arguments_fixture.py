"""Write tests/fixtures/exporters/sglang_server_args.json: every command-line argument of
SGLang's server (``sglang.srt.server_args.ServerArgs.add_cli_args``: names, action kind, type,
choices) at one release.

SGLang's package installs a GPU serving stack (its kernels, FlashInfer, a CUDA torch), too
heavy for CI on a machine without a GPU, so the tests check ``--export sglang`` against this
record of the parser, and against the parser itself when ``sglang.srt.server_args`` imports.

Usage: the sglang 0.5.23 wheel installed without its dependencies, plus the few modules its
argument parser imports, next to a CPU torch (the frameworks extra):

    pip install --no-deps --target /tmp/sglang sglang==0.5.23 msgspec orjson pybase64 starlette pyzmq
    PYTHONPATH=/tmp/sglang python benchmarks/sglang_arguments_fixture.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from argument_records import argument_records  # benchmarks/argument_records.py (the script's own folder)

RELEASE = "0.5.23"
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "exporters" / "sglang_server_args.json"


def main() -> None:
    import sglang
    from sglang.srt.server_args import ServerArgs

    version = getattr(sglang, "__version__", RELEASE)
    if version != RELEASE:
        raise SystemExit(f"sglang {version} is installed; the fixture records {RELEASE}")
    parser = argparse.ArgumentParser(allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    arguments = argument_records(parser)
    FIXTURE.write_text(json.dumps({"release": RELEASE, "source": "sglang python/sglang/srt/server_args.py ServerArgs.add_cli_args",
                                   "arguments": arguments}, indent=1) + "\n")
    print(f"{len(arguments)} arguments of SGLang {RELEASE} written to {FIXTURE}")


if __name__ == "__main__":
    main()
