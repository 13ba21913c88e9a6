"""The calibration scripts' exact linear fit recovers the constants of an affine model."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space.linear_fit import fit_linear

_coef = st.floats(0.5, 50.0)


@given(
    truth=st.tuples(st.floats(0.01, 10.0), st.floats(0.01, 10.0)),
    a=st.tuples(_coef, _coef),
    b=st.tuples(_coef, _coef),
    base=st.tuples(st.floats(0, 100), st.floats(0, 100)),
)
def test_recovers_the_constants_of_an_affine_model(truth, a, b, base):
    # two chips, each base + count_1 * c_1 + count_2 * c_2 (kept well conditioned)
    counts = {"x": (a[0], b[0]), "y": (a[1], 3.0 * b[1] + a[1] * b[0] / a[0])}
    offset = dict(zip(counts, base, strict=True))

    def model(name, c):
        return offset[name] + sum(k * v for k, v in zip(counts[name], c, strict=True))

    targets = {name: model(name, truth) for name in counts}
    assert fit_linear(targets, model, 2) == pytest.approx(truth, rel=1e-6, abs=1e-9)


def test_as_many_figures_as_constants():
    with pytest.raises(ValueError, match="2 constants need 2 published figures, got 1"):
        fit_linear({"x": 1.0}, lambda name, c: c[0] + c[1], 2)
