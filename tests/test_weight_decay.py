"""The coupled weight decay on every parameter (``optim.weight_decay``, torch's ``weight_decay``):
the step it makes against a float64 reference is tests/test_optimisers.py's (cases ``*decay*``);
here, the rule in the one step (Adam's included: coupled, not AdamW's), that 0 adds nothing,
and its one-line refusals."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dynamics import with_overrides
from dynamics.config.schema import Config, ConfigError, validate
from dynamics.core import update as upd


def _step(rules: upd.Rules, optimizer: str = "gd"):
    """One step of the engine's update on a small dict of float64 parameters, from gradient g."""
    p = {"U": np.array([[1.0, -2.0]]), "W": np.array([[[0.5, 0.0], [3.0, -1.0]]])}
    g = {"U": np.array([[0.1, 0.2]]), "W": np.array([[[0.0, -0.3], [0.2, 0.4]]])}
    opt = upd.direction(optimizer)
    new, _ = upd.update(p, g, opt.init(p), opt, 0.1, rules)
    return p, g, {k: np.asarray(v) for k, v in new.items()}


def test_the_decay_is_the_gradient_of_the_l2_term_for_gd_and_adam():
    with jax.enable_x64(True):
        p, g, gd = _step(upd.Rules(weight_decay=0.5))
        for k in p:  # θ − η(g + λθ)
            np.testing.assert_allclose(gd[k], p[k] - 0.1 * (g[k] + 0.5 * p[k]), rtol=1e-15)
        _, _, adam = _step(upd.Rules(weight_decay=0.5), "adam")
        for k in p:  # Adam's first step is η·sign(g') (up to ε) of the decayed gradient g' = g + λθ
            gk = g[k] + 0.5 * p[k]
            np.testing.assert_allclose(adam[k], p[k] - 0.1 * gk / (np.abs(gk) + 1e-8), rtol=1e-12)
        adamw = dict(upd.default_groups())  # AdamW's decoupled decay moves another way
        adamw = upd.Rules(tuple((n, upd.GroupRule(weight_decay=0.5)) for n in adamw), decoupled=True)
        _, _, decoupled = _step(adamw, "adam")
        assert not np.allclose(decoupled["U"], adam["U"])


def test_zero_decay_is_the_plain_step_and_leaves_the_hash():
    assert upd.Rules(weight_decay=0.0).plain and not upd.Rules(weight_decay=1e-3).plain
    with jax.enable_x64(True):
        _, _, plain = _step(upd.Rules())
        _, _, zero = _step(upd.Rules(weight_decay=0.0))
    for k in plain:
        assert np.array_equal(plain[k], zero[k])
    assert "weight_decay" not in Config().to_dict()["optim"]
    cfg = with_overrides(None, weight_decay=0.01)
    assert cfg.optim.weight_decay == 0.01 and cfg.hash() != Config().hash()
    assert cfg.to_dict()["optim"]["weight_decay"] == 0.01


@pytest.mark.parametrize(
    "given,message",
    [
        (dict(weight_decay=-0.1), r"optim.weight_decay=-0.1 must be >= 0"),
        (dict(weight_decay=float("nan")), r"optim.weight_decay=nan"),
        (
            dict(weight_decay=0.1, query="learned", init="sphere", constraint="sphere"),
            r"optim.weight_decay=0.1 was given but has no effect: optim.constraint='sphere' keeps U, k",
        ),
    ],
)
def test_a_decay_that_cannot_act_is_refused_in_one_line(given, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate(with_overrides(None, **given))
    assert "\n" not in str(err.value)


def test_the_decay_acts_under_the_sphere_where_a_parameter_is_off_it():
    cfg = with_overrides(
        None, weight_decay=0.1, query="learned", init="sphere", constraint="sphere", bias=True
    )
    assert validate(cfg).optim.weight_decay == 0.1  # the bias b is not on the sphere: λb acts
