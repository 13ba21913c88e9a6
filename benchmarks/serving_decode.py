"""Decode steps at batch 1 against the HBM bandwidth, and against gpt-fast's measurements.

Run: ``.venv/bin/python benchmarks/serving_decode.py``

First table: a decode step at batch 1 and a 2048-token context of Llama 2 70B at t = 8 and
Llama 2 7B at t = 1 on every preset, beside the weight bytes per device over the peak HBM
bandwidth (the serving issue's criterion: 1.0-2.5x) and the closed-form floor of the bytes
the step must read (:func:`ilp.serving.decode_hbm_bound_s`). Each node's links run at the
line rate of the preset's measured collective curve, else the cluster default.

Second table: the bf16 decode-at-batch-1 rows of ``phaze/data/serving_points.toml`` (gpt-fast
on A100-80GB power-limited to 330 W, a 5-token prompt, gpt-fast's default 200 new tokens:
generate.py ``--max_new_tokens`` at 0055c42d), each at its mean decode context under the
gpt-fast engine profile (phaze/data/serving_engines.toml: its one-shot all-reduce, its
measured batch-1 bandwidth and the wait before each kernel), beside the measured time per
token.
A sanity check of the model, not a fit: nothing here changes a parameter.
"""

from __future__ import annotations

import tomllib
from importlib import resources

from arch_space import Cluster, preset, preset_names
from arch_space.perf.device import device_profile
from ilp.serving import decode_hbm_bound_s, serving_pass_time
from phaze.model.serving_engines import engine_profile
from workloads import get_model
from workloads.serving import RequestBatch, ServingPass
from workloads.serving_costs import weight_bytes_per_device

__all__: list[str] = []


def _cluster(acc, tp: int) -> Cluster:
    curve = device_profile(acc).intra_node
    if curve is None:
        return Cluster(devices=tp)
    return Cluster(devices=tp, intra_node_bandwidth_bytes_per_s=curve.line_rate_bytes_per_s)


def criterion() -> None:
    print("decode at batch 1, context 2048 (ms): step, weights / HBM bandwidth, ratio, floor")
    for name, tp in (("llama2-70b", 8), ("llama2-7b", 1)):
        model = get_model(name)
        for arch in preset_names():
            acc = preset(arch)
            step = ServingPass.decode(1, 2048)
            r = serving_pass_time(model, acc, _cluster(acc, tp), step, tp)
            weights_s = weight_bytes_per_device(model, tp) / acc.hbm_bandwidth_bytes_per_s
            floor_s = decode_hbm_bound_s(model, acc, step, tp)
            print(
                f"  {name:10s} t={tp} {arch:8s} {r.latency_s * 1e3:7.2f} {weights_s * 1e3:7.2f}"
                f"  {r.latency_s / weights_s:4.2f}x  {floor_s * 1e3:7.2f}"
            )


def gpt_fast() -> None:
    text = resources.files("phaze").joinpath("data", "serving_points.toml").read_text("utf-8")
    print("gpt-fast decode at batch 1 (ms per token): measured, model, error")
    for point in tomllib.loads(text)["point"]:
        if point["kind_of_point"] != "decode-batch1" or point["weight_format"] != "bf16":
            continue
        model, acc, tp = get_model(point["model"]), preset(point["preset"]), point["tp"]
        step = RequestBatch.of(point["isl_tokens"], 200).decode_pass()
        engine = engine_profile("gpt-fast")
        design = engine.design(acc, step.batch, step.weight_format)
        r = serving_pass_time(model, design, _cluster(acc, tp), step, tp, device=engine.device(acc))
        step_s = r.latency_s + sum(r.stage_kernels(model, 1)) * engine.kernel_gap_s
        measured_s = 1 / point["output_tokens_per_s"]
        print(
            f"  {point['case']:42s} {measured_s * 1e3:6.2f} {step_s * 1e3:6.2f}"
            f"  {(step_s / measured_s - 1) * 100:+5.1f} %  (context {step.context_tokens})"
        )


if __name__ == "__main__":
    criterion()
    gpt_fast()
