"""Request length distributions from published statistics (``phaze serve --rate --lengths``,
docs/serving.md "Serving under load")."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from phaze.cli import cli
from phaze.model.serving_lengths import length_distributions, sample_lengths
from phaze_common.errors import ConfigError

_SERVE = (
    "serve --workload llama2-7b --arch h100 --devices 1 --input-tokens 512 --output-tokens 64 "
    "--strategy t=1,p=1,d=1,ep=1,batch=32,chunk=512,batching=continuous --json"
)
#: A context no draw reaches, so that the published statistics are compared unclipped.
_UNCLIPPED = 1 << 24


def test_the_shipped_names_cover_a_chat_set_a_production_trace_and_a_summarisation_set():
    names = set(length_distributions())
    assert {"sharegpt", "azure-conv", "azure-code", "arxiv-summarization"} <= names
    assert all(d.source for d in length_distributions().values())


@pytest.mark.parametrize("name", sorted(length_distributions()))
def test_sampled_means_and_medians_are_the_published_ones(name):
    dist = length_distributions()[name]
    isl, osl = sample_lengths(name, 20000, _UNCLIPPED, seed=11)
    for drawn, side in ((isl, dist.input), (osl, dist.output)):
        assert np.mean(drawn) == pytest.approx(side.mean, rel=0.03)
        if side.median is not None:
            assert np.median(drawn) == pytest.approx(side.median, rel=0.03)


def test_the_sharegpt_means_are_the_vllm_papers():
    # vLLM (Kwon et al., SOSP 2023), Fig. 11
    dist = length_distributions()["sharegpt"]
    assert (dist.input.mean, dist.output.mean) == (161.31, 337.99)


def test_lengths_are_whole_tokens_within_the_context_and_repeat_with_the_seed():
    isl, osl = sample_lengths("azure-code", 5000, 4096, seed=3)
    assert isl.dtype == np.int64 and isl.min() >= 1 and osl.min() >= 2
    assert np.max(isl + osl) <= 4096 and np.max(isl) == 4094  # the trace reaches 7437
    again = sample_lengths("azure-code", 5000, 4096, seed=3)
    other = sample_lengths("azure-code", 5000, 4096, seed=4)
    assert np.array_equal(isl, again[0]) and np.array_equal(osl, again[1])
    assert not np.array_equal(isl, other[0])


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known: arxiv-summarization, azure-code"):
        sample_lengths("sharegtp", 4, 4096)


def _serve(*extra: str):
    return CliRunner().invoke(cli, [*_SERVE.split(), "--rate", "2", "--requests", "150", *extra])


def test_serve_at_a_rate_with_sharegpt_lengths_reports_them_and_repeats_with_the_seed():
    runs = [_serve("--lengths", "sharegpt", "--seed", s) for s in ("5", "5", "6")]
    assert all(r.exit_code == 0 for r in runs), runs[0].output
    assert runs[0].output == runs[1].output != runs[2].output
    doc = json.loads(runs[0].output)
    assert doc["lengths"] == "sharegpt" and doc["stable"] is True
    # 150 exponential draws: the means within a few standard errors of the published ones
    assert doc["input_tokens_mean"] == pytest.approx(161.31, rel=0.25)
    assert doc["output_tokens_mean"] == pytest.approx(337.99, rel=0.25)
    fixed = json.loads(_serve("--seed", "5").output)
    assert fixed["lengths"] == "fixed" and fixed["input_tokens_mean"] == 512
    # the arrival gaps are their own stream: the same seed, the same arrivals
    assert fixed["rate_per_s"] == doc["rate_per_s"]


def test_serve_refuses_an_unknown_name_in_one_error_line():
    result = _serve("--lengths", "sharegtp")
    assert result.exit_code == 1
    assert result.output.count("Error:") == 1
    assert "did you mean sharegpt" in result.output and "azure-conv" in result.output
    without_rate = CliRunner().invoke(cli, [*_SERVE.split(), "--lengths", "sharegpt"])
    assert without_rate.exit_code == 1 and "--lengths needs --rate" in without_rate.output


def test_openorca_sides_are_exponentials_truncated_at_the_published_largest_lengths():
    # MLPerf's OpenOrca set: prompts 5,463,976 tokens over 24,576 (longest 1021), outputs
    # 294.45 tokens on average and at most max_output_len 1024
    dist = length_distributions()["openorca-mlperf"]
    assert (dist.input.mean, dist.input.max, dist.output.mean, dist.output.max) == (
        222.33,
        1021.0,
        294.45,
        1024.0,
    )
    isl, osl = sample_lengths("openorca-mlperf", 20000, _UNCLIPPED, seed=5)
    assert isl.max() <= 1021 and osl.max() <= 1024
    # truncation, not clipping: no mass piles up at the largest length
    assert np.mean(isl == 1021) < 0.001 and np.mean(osl == 1024) < 0.001


def test_a_largest_length_is_refused_on_a_distribution_it_does_not_bound(monkeypatch):
    from phaze.model import serving_lengths

    bad = '[x]\nkind = "lognormal"\ninput_mean = 10\ninput_median = 5\ninput_max = 100\n'
    bad += 'output_mean = 10\noutput_median = 5\nsource = "s"\n'
    monkeypatch.setattr(serving_lengths.resources, "files", lambda _: _Text(bad), raising=True)
    serving_lengths.length_distributions.cache_clear()
    try:
        with pytest.raises(ConfigError, match="input_max is read for an exponential only"):
            serving_lengths.length_distributions()
    finally:
        monkeypatch.undo()
        serving_lengths.length_distributions.cache_clear()


class _Text:
    """A stand-in for ``resources.files(...)`` whose one file reads ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def joinpath(self, *_: str) -> _Text:
        return self

    def read_text(self, _: str) -> str:
        return self.text
