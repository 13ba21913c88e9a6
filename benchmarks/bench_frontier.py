"""Time three frontier-scale commands on DeepSeek-V3 (671B, 256 routed experts), each as a new
process, the way a user waits for them:

* ``evaluate`` in the published layout (t=1, p=16, d=128, ep=64, ZeRO-1 on 2,048 H100s, fp8
  blockwise; micro-batch and recompute searched) (target: at most 10 s);
* ``evaluate --strategy search`` on the same cluster (target: at most 60 s);
* ``serve`` on 16 H100s, fp8 weights (target: at most 20 s).

The model comes from its Hugging Face ``config.json`` (DeepSeek-V3's published one,
``deepseek-ai/DeepSeek-V3``), which the script writes to a temporary directory. Run:
``.venv/bin/python benchmarks/bench_frontier.py [--runs 1] [--only evaluate,search,serve]``.
Prints each run's wall time and the median per command; ``--timeout`` (s) stops a command
that runs longer. The machine's load moves these figures: compare two versions by
alternating runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# deepseek-ai/DeepSeek-V3 config.json: the fields workloads/hf.py reads
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "moe_intermediate_size": 2048,
    "intermediate_size": 18432,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "n_group": 8,
    "topk_group": 4,
    "routed_scaling_factor": 2.5,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}

_TRAINING = [
    "--arch",
    "h100",
    "--devices",
    "2048",
    "--precision",
    "fp8-blockwise",
    "--global-batch",
    "15360",
    "--seq-len",
    "4096",
    "--tokens",
    "14.8T",
    "--intra-node-gbps",
    "160",
    "--inter-node-gbps",
    "50",
]


def commands(config: Path) -> dict[str, list[str]]:
    """The commands timed, by short name."""
    w = ["--workload", str(config)]
    return {
        "evaluate": ["evaluate", *w, "--strategy", "t=1,p=16,d=128,ep=64,zero=1", *_TRAINING],
        "search": ["evaluate", *w, "--strategy", "search", *_TRAINING],
        "serve": [
            "serve",
            *w,
            "--arch",
            "h100",
            "--devices",
            "16",
            "--input-tokens",
            "2048",
            "--output-tokens",
            "512",
            "--weight-format",
            "fp8",  # as DeepSeek-V3 ships: its bf16 weights (1.3 TB) exceed 16 x 80 GB
        ],
    }


def _phaze() -> list[str]:
    exe = Path(sys.executable).with_name("phaze")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "phaze"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--only", default="evaluate,search,serve")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(DEEPSEEK_V3, indent=2))
        table = commands(config)
        for name in args.only.split(","):
            argv = table[name]
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                try:
                    subprocess.run(
                        [*_phaze(), *argv, "--json"],
                        check=True,
                        capture_output=True,
                        timeout=args.timeout,
                    )
                except subprocess.TimeoutExpired:
                    print(f"{name}: over {args.timeout:.0f} s (stopped)")
                    break
                times.append(time.perf_counter() - t0)
            if times:
                shown = " ".join(f"{t:.1f}" for t in times)
                print(f"{name}: median {statistics.median(times):.1f} s ({shown})")


if __name__ == "__main__":
    main()
