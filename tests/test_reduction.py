"""The summed objective (``optim.reduction='sum'``): its loss against a float64 numpy reference,
its training steps against tests/test_optimisers.py's float64 loop (cases ``*sum*``), the mean
kept as the default (the same function, so the same numbers), and its refusal where it cannot act."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dynamics import parts, with_overrides
from dynamics.config.schema import Config, ConfigError, validate
from dynamics.core import losses


@pytest.mark.parametrize("loss,shape", [("mse", (7,)), ("mse", (5, 3)), ("logistic", (7,))])
def test_the_sum_is_n_times_the_mean_of_each_examples_loss(loss, shape):
    z = np.random.default_rng(1).normal(size=shape)
    with jax.enable_x64(True):
        got = float(losses.summed_loss(z, loss))
        mean = float(losses.mean_loss(z, loss))
    ell = z**2 if loss == "mse" else np.logaddexp(0.0, -z)
    want = np.sum(ell.reshape(shape[0], -1).mean(axis=1))  # Σ over examples of each one's mean over outputs
    np.testing.assert_allclose(got, want, rtol=1e-13)
    np.testing.assert_allclose(got, shape[0] * mean, rtol=1e-13)


def test_the_default_is_the_mean_the_engine_always_took():
    assert parts.REDUCTIONS["mean"].load() is losses.mean_loss  # the same function: the same program
    assert parts.REDUCTIONS["sum"].sums and not parts.REDUCTIONS["mean"].sums
    assert "reduction" not in Config().to_dict()["optim"]
    summed = with_overrides(None, reduction="sum")
    assert summed.hash() != Config().hash() and summed.to_dict()["optim"]["reduction"] == "sum"


@pytest.mark.parametrize(
    "given,message",
    [
        (dict(reduction="total"), r"optim.reduction='total' is not one of"),
        (
            dict(reduction="sum", optimizer="normalized-gd", init="normal"),
            r"optim.reduction='sum' was given but has no effect: optim.optimizer='normalized-gd' steps along",
        ),
    ],
)
def test_a_reduction_that_cannot_act_is_refused_in_one_line(given, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate(with_overrides(None, **given))
    assert "\n" not in str(err.value)


def test_normalised_gd_takes_the_sum_where_a_decay_weighs_against_it():
    cfg = with_overrides(None, reduction="sum", optimizer="normalized-gd", init="normal", weight_decay=0.1)
    assert validate(cfg).optim.reduction == "sum"
