"""What constrained decoding costs: output tokens/s of 64 concurrent requests with half of them constrained by a
JSON schema, against the same 64 with none constrained, in the same run (same process, same loaded model).

Every request is a 64-token prompt and exactly ``--output-len`` output tokens (``ignore_eos``; the schema asks
for at least 64 array items, more than ``--output-len`` tokens can hold, so a constrained request never ends
early and both sides generate the same number of tokens in batches of the same size). Sampling is seeded
(temperature 1), so a constrained request explores the grammar's states instead of repeating one. The two
modes alternate ``--rounds`` times and each side's times are summed, so a neighbour's burst on a shared
machine lands on both sides. Reported: wall-clock and process CPU seconds, output tokens/s, and the
constrained/unconstrained ratio of each. CPU seconds are every thread of this process (the grammar library's
pool included); on a machine shared with other jobs the wall clock mostly measures the neighbours, and the CPU
ratio is the one to read. The report names the device, the CPU and the library version.

    .venv/bin/python bench/structured_output.py [--model smollm2-135m] [--device auto] [--requests 64]
        [--output-len 128] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from importlib.metadata import version

import torch

from shoal.cpu_features import cpu_info
from shoal.engine import LLM, GrammarSpec, SamplingParams

SCHEMA = {
    "type": "array",
    "minItems": 64,
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "role": {"enum": ["admin", "user", "guest"]},
            "score": {"type": "number"},
        },
        "required": ["name", "age", "role", "score"],
        "additionalProperties": False,
    },
}


def run(llm: LLM, prompts: list[list[int]], output_len: int, constrained: int) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and output tokens of one batch whose first ``constrained`` requests follow SCHEMA."""
    spec = GrammarSpec.json_schema(SCHEMA, strict=True, field="response_format")
    params = [
        SamplingParams(
            temperature=1.0,
            seed=i,
            max_tokens=output_len,
            ignore_eos=True,
            structured_output=spec if i < constrained else None,
        )
        for i in range(len(prompts))
    ]
    wall, cpu = time.perf_counter(), time.process_time()
    outputs = llm.generate(prompts, params)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert all(len(o.token_ids) == output_len for o in outputs), "a request ended early: the comparison is off"
    for out in outputs[:constrained]:
        assert out.text.startswith("["), out.text[:40]
    return wall, cpu, sum(len(o.token_ids) for o in outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (2 oversubscribes a shared 2-core box)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    llm = LLM(args.model, device=args.device, max_num_seqs=args.requests)
    rng = random.Random(0)
    vocab = llm.engine.model_config.vocab_size
    prompts = [[rng.randrange(100, vocab) for _ in range(args.prompt_len)] for _ in range(args.requests)]
    run(llm, prompts, 4, args.requests // 2)  # warm-up: the full batch, the library's tokenizer, the schema
    totals = {"none": [0.0, 0.0, 0], "half": [0.0, 0.0, 0]}
    for _ in range(args.rounds):
        for mode, constrained in (("none", 0), ("half", args.requests // 2)):
            wall, cpu, tokens = run(llm, prompts, args.output_len, constrained)
            totals[mode] = [totals[mode][0] + wall, totals[mode][1] + cpu, totals[mode][2] + tokens]
    rows = {
        mode: {
            "wall_s": round(w, 2),
            "cpu_s": round(c, 2),
            "output_tok_per_s": round(n / w, 1),
            "output_tok_per_cpu_s": round(n / c, 1),
        }
        for mode, (w, c, n) in totals.items()
    }
    report = {
        "model": llm.engine.model_name,
        "device": llm.engine.device,
        "dtype": str(llm.engine.dtype),
        "cpu": cpu_info().summary(),
        "llguidance": version("llguidance"),
        "torch_threads": args.threads,
        "requests": args.requests,
        "constrained": args.requests // 2,
        "output_len": args.output_len,
        "rounds": args.rounds,
        "none_constrained": rows["none"],
        "half_constrained": rows["half"],
        "half_over_none_tok_per_s": round(rows["half"]["output_tok_per_s"] / rows["none"]["output_tok_per_s"], 3),
        "half_over_none_tok_per_cpu_s": round(
            rows["half"]["output_tok_per_cpu_s"] / rows["none"]["output_tok_per_cpu_s"], 3
        ),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
