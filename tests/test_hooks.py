"""The metric hook: ``run_sweep(cfg, metrics={"name": fn})`` compiles fn(params, data) into the run.

fn sees one run's parameters with every head (the zero-init fast path expanded to H heads) and
the trial's test set; its curve is logged like a built-in metric (NaN after divergence, saved and
loaded back). Checked against the built-in metrics it recomputes, and refused in one line when
misused."""

import jax.numpy as jnp
import numpy as np
import pytest

from dynamics import load_results, run_sweep
from dynamics.config.schema import ConfigError
from dynamics.core import model as mdl
from dynamics.core.losses import mean_loss
from dynamics.infra import executables
from dynamics.sweeps.result_files import write_results

SMALL = dict(heads=[1, 3], steps=12, trials=2, n_train=16, n_test=8, tokens=4, width=8, progress=False)
ONE = {**SMALL, "heads": [2], "trials": 1}  # one program: the tests that need a run, not a sweep


def head_count(params, data):
    return jnp.asarray(params["U"].shape[0], jnp.float32)


def u_norms(params, data):  # (H,): ‖U_h‖, the built-in head_u_norm recomputed
    return jnp.linalg.norm(params["U"], axis=1)


def loss_from_scratch(params, data):  # the built-in test loss, from the run's heads and test set
    phi = mdl.logits(
        params, data.X, query=data.query, norm=data.norm, activation=data.attention, beta=data.beta
    )
    return mean_loss(data.y * phi, "logistic")


def train_loss_from_scratch(params, data):  # the built-in train loss, from the hook's training set
    phi = mdl.logits(
        params, data.X_train, query=data.query, norm=data.norm, activation=data.attention, beta=data.beta
    )
    return mean_loss(data.y_train * phi, "logistic")


METRICS = {
    "n_heads_seen": head_count,
    "u_norms": u_norms,
    "loss_again": loss_from_scratch,
    "train_loss_again": train_loss_from_scratch,
}


@pytest.fixture(scope="module", params=["zero", "normal"])
def result(request):
    return run_sweep("default", init=request.param, metrics=METRICS, **SMALL)


@pytest.mark.slow_cases("zero")
def test_metrics_see_every_head_and_the_test_set(result):
    curves, L = result.curves, len(result.steps)
    for i, H in enumerate(result.heads):  # the fast path's one stored head is expanded to H
        np.testing.assert_array_equal(curves["n_heads_seen"][i], np.full((2, L), H))
    assert curves["u_norms"].shape == (2, 2, L, 3)  # NaN-padded to the largest H, as per-head curves
    assert np.isnan(curves["u_norms"][0, :, :, 1:]).all()
    np.testing.assert_allclose(curves["u_norms"], curves["head_u_norm"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(curves["loss_again"], curves["test_loss"], rtol=1e-5)
    np.testing.assert_allclose(
        curves["train_loss_again"], curves["train_loss"], rtol=1e-5
    )  # the training set


@pytest.mark.slow_cases("zero")
def test_built_in_metrics_unchanged_by_the_hook(result):
    plain = run_sweep("default", init=result.config.model.init, **SMALL)
    for k, v in plain.curves.items():
        np.testing.assert_allclose(result.curves[k], v, rtol=1e-6, atol=1e-7, err_msg=k)


@pytest.mark.slow_cases("zero")
def test_saved_and_loaded_with_their_source(result, tmp_path):
    write_results(result, tmp_path)
    back = load_results(tmp_path)
    for k, v in result.curves.items():
        np.testing.assert_array_equal(back.curves[k], v, err_msg=k)
    record = back.extra["user_metrics"]["u_norms"]
    assert record["function"] == f"{__name__}:u_norms" and record["path"].endswith("test_hooks.py")


@pytest.mark.slow
def test_a_redefined_function_gets_its_own_program():
    # Two functions of one name (a notebook cell run twice): the second is traced anew.
    values = []
    for scale in (1.0, 2.0):

        def f(params, data, scale=scale):
            return scale * jnp.sum(params["U"])

        values.append(run_sweep("default", metrics={"f": f}, head_metrics="off", **ONE).curves["f"])
    np.testing.assert_allclose(values[1], 2 * values[0], rtol=1e-6)


def test_programs_with_user_metrics_are_not_kept_on_disk():
    from dynamics.core.hooks import MetricRef
    from dynamics.core.program import Program

    prog = Program(1, 1, True, 4, "first", "none", "full", 1, "zero", "gd", "logistic", (0, 1))
    hooked = Program(
        1, 1, True, 4, "first", "none", "full", 1, "zero", "gd", "logistic", (0, 1),
        user_metrics=(MetricRef(u_norms, "u"),), metric_heads=2,
    )  # fmt: skip
    assert executables.program_key("p", {"prog": prog}, {}) is not None
    assert executables.program_key("p", {"prog": hooked}, {}) is None


@pytest.mark.parametrize(
    "metrics, error, words",
    [
        ([u_norms], TypeError, "must be a dict"),
        ({"test_loss": u_norms}, ConfigError, "taken by mhsim"),
        ({"head_u_cos": u_norms}, ConfigError, "taken by mhsim"),  # a registered per-head metric
        ({"param_W": u_norms}, ConfigError, "taken by mhsim"),  # a snapshot's curve
        ({"planted_mine": u_norms}, ConfigError, "taken by mhsim"),  # the planted directions' keys
        ({"sharpness": u_norms}, ConfigError, "taken by mhsim"),
        ({"not a name": u_norms}, ConfigError, "identifier"),
        ({3: u_norms}, ConfigError, "identifier"),
        ({"x": 3}, TypeError, "not callable"),
        ({"x": lambda p, d: "text"}, ConfigError, "real numeric array"),  # refused before JAX reads it
        ({"x": lambda p, d: None}, ConfigError, "returned NoneType None"),
    ],
)
def test_misuse_is_refused_in_one_line(metrics, error, words):
    with pytest.raises(error) as info:
        run_sweep("default", metrics=metrics, **ONE)
    if words:
        assert words in str(info.value) and "\n" not in str(info.value)


def test_an_error_inside_the_metric_names_it():
    def broken(params, data):
        return params["no such parameter"]

    with pytest.raises(KeyError) as info:
        run_sweep("default", metrics={"broken": broken}, **ONE)
    assert any("'broken'" in note for note in info.value.__notes__)
