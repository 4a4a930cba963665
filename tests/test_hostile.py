"""A hostile pass over mhsim's open surface, written from the documentation alone (README.md,
docs/*.md, ``python -m dynamics.run --help``, the public docstrings, notebooks/own_data_model.ipynb).

Every case is decided by the rule of tests/hostile_cases/outcome.py: mhsim either refuses the
value with a documented exception type (``ValueError``/``TypeError``; ``ConfigError`` and
``DataError`` are ``ValueError``s; on the command line exit code 2, one line, nothing written),
raised by its own code and naming the value, or the numbers it returns equal an independent
float64 numpy computation (tests/hostile_cases/reference.py: the documented Φ, losses and GD,
gradients by finite differences) under one of the case's admissible readings. A silently wrong
number, a value nothing can simulate that runs, or a deep JAX/numpy error fails the case.

Sizes are tiny (n = 8 train / 6 test, T = 3, d = 4, H ∈ {1, 2}, 2 GD steps) and every run that
should compute shares one shape, so that mhsim compiles few programs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import child_env
from hostile_cases import reference as R
from hostile_cases.outcome import Accepted, any_of, close, decide, refusal

pytestmark = pytest.mark.stress

ROOT = Path(__file__).resolve().parents[1]
N_TRAIN, N_TEST, T, D = 8, 6, 3, 4
HEADS = [1, 2]
STEPS = 2
_rs = np.random.default_rng(20261125)
XB = _rs.normal(size=(16, T, D)).astype(np.float32)
YB = np.where(_rs.normal(size=16) >= 0, 1.0, -1.0).astype(np.float32)
MB = np.zeros((16, T), bool)
MB[:, 0] = True
MB[::3, 2] = True
BASE = dict(heads=HEADS, trials=1, steps=STEPS, n_train=N_TRAIN, n_test=N_TEST, progress=False)


# --------------------------------------------------------------------------- numpy interpretations


class Reading:
    """One admissible reading of what a run trains on: the data, the task, the loss, θ(0)."""

    def __init__(
        self,
        Xtr,
        ytr,
        Xte,
        yte,
        *,
        task="classification",
        loss=None,
        mask_te=None,
        p0=None,
        trials=1,
        steps=STEPS,
        lr=1.0,
        model=None,
        noise_floor=None,
    ):
        self.Xtr, self.ytr, self.Xte, self.yte = (np.asarray(a, np.float64) for a in (Xtr, ytr, Xte, yte))
        self.task = task
        self.loss = loss or ("mse" if task == "regression" else "logistic")
        self.mask_te = mask_te
        self.p0 = p0  # None: zero init; else a function (trial, H) -> numpy params
        self.trials, self.steps, self.lr = trials, steps, lr
        self.model = model or {}
        self.noise_floor = noise_floor

    def curves(self, H, trial):
        p0 = R.zeros(H, self.Xtr.shape[2]) if self.p0 is None else self.p0(trial, H)
        return R.train(
            p0,
            self.Xtr,
            self.ytr,
            self.Xte,
            self.yte,
            steps=self.steps,
            lr=self.lr,
            loss=self.loss,
            task=self.task,
            **self.model,
        )

    def check(self, result, *, heads=HEADS):
        if list(np.asarray(result.heads)) != list(heads):
            raise AssertionError(f"heads {result.heads} != {heads}")
        data = result.config.data
        for field, want in (
            ("n_train", len(self.Xtr)),
            ("n_test", len(self.Xte)),
            ("T", self.Xtr.shape[1]),
            ("d", self.Xtr.shape[2]),
        ):
            got = getattr(data, field)
            if got is not None and got != want:
                raise AssertionError(f"config.data.{field} = {got}, the run trained on {want}")
        for i, H in enumerate(heads):
            for trial in range(self.trials):
                ref = self.curves(H, trial)
                names = [("train_loss", "train_loss"), ("test_loss", "test_loss")]
                if self.task == "classification":
                    names += [("train_error", "train_error"), ("test_error", "test_error")]
                for ours, theirs in names:
                    if theirs not in result.curves:
                        raise AssertionError(f"no curve {theirs}")
                    close(result.curves[theirs][i, trial], ref[ours], f"H={H} trial={trial} {theirs}")
                if self.task == "classification" and "train_error" not in result.curves:
                    raise AssertionError("a classification run without error curves")
                if self.task == "regression" and "train_error" in result.curves:
                    raise AssertionError("a regression run logs a 0-1 error")
                if self.noise_floor is not None:
                    close(
                        result.curves["excess_risk"][i, trial],
                        ref["test_loss"] - self.noise_floor,
                        "excess_risk",
                    )
                if self.mask_te is not None:  # W = 0 up to step 1: uniform attention
                    share = np.mean(np.sum(self.mask_te, axis=1) / self.Xte.shape[1])
                    close(result.curves["attn_relevant"][i, trial, :2], [share, share], "attn_relevant")


def plain(n_train=N_TRAIN, n_test=N_TEST, **kw):
    return Reading(XB[:n_train], YB[:n_train], XB[:n_test], YB[:n_test], **kw)


# --------------------------------------------------------------------------- user data models


def _hit(which, n):
    return which == "both" or (which == "train" and n == N_TRAIN) or (which == "test" and n == N_TEST)


class _Draws:
    """A user data model whose draws are rows of a fixed bank (so numpy knows them); ``defect``
    rewrites (X, y, mask) for the sets ``which`` names (both, the training or the test set)."""

    def __init__(self, defect, which, with_mask, bank):
        self.defect, self.which, self.with_mask = defect, which, with_mask
        self.bank = bank

    def setup(self, key, params):
        return {"scale": jnp.ones(())}

    def sample(self, world, key, n):
        X, y = self.bank[0][:n], self.bank[1][:n]
        mask = MB[:n] if self.with_mask else None
        if self.defect is not None and _hit(self.which, n):
            out = self.defect(X, y, mask, n)
            if not (isinstance(out, tuple) and len(out) == 3):
                return out
            X, y, mask = out
        conv = lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a
        return conv(X), conv(y), conv(mask)


class _Del:
    pass


_DEL = _Del()  # an attribute the model does not have


def Bank(defect=None, which="both", with_mask=False, bank=(XB, YB), **attrs):
    """A fresh user data model: the protocol's optional attributes (sizes, task, …) as given;
    by default ``sizes = {"T": 3, "d": 4}`` and ``task = "classification"``."""
    body = {"sizes": {"T": T, "d": D}, "task": "classification", **attrs}
    if with_mask:
        body.setdefault("relevant_tokens", True)
    body = {k: v for k, v in body.items() if v is not _DEL}
    return type("UserModel", (_Draws,), body)(defect, which, with_mask, bank)


def nan_at(a, v=np.nan):
    a = np.array(a, dtype=np.result_type(np.asarray(a).dtype, np.float32))
    a.flat[1] = v
    return a


# (defect, which sets, words a refusal must name, admissible reading or None)
DM_DEFECTS = {
    "n_minus_1": (lambda X, y, m, n: (X[: n - 1], y[: n - 1], m), ["n", "sample", "examples", "rows"]),
    "n_plus_1": (
        lambda X, y, m, n: (XB[: n + 1], YB[: n + 1], None if m is None else MB[: n + 1]),
        ["n", "sample", "examples", "rows"],
    ),
    "X_T_plus_1": (
        lambda X, y, m, n: (np.concatenate([X, X[:, :1]], 1), y, m),
        ["T", "tokens", "X", "shape"],
    ),
    "X_d_plus_1": (
        lambda X, y, m, n: (np.concatenate([X, X[:, :, :1]], 2), y, m),
        ["d", "width", "X", "shape"],
    ),
    "X_2d": (lambda X, y, m, n: (X.reshape(n, -1), y, m), ["X", "shape", "ndim"]),
    "X_4d": (lambda X, y, m, n: (X[..., None], y, m), ["X", "shape", "ndim"]),
    "y_column": (lambda X, y, m, n: (X, y[:, None], m), ["y", "label", "labels", "shape"]),
    "y_short": (lambda X, y, m, n: (X, y[: n - 1], m), ["y", "label", "labels", "shape"]),
    "y_two_columns": (lambda X, y, m, n: (X, np.stack([y, y], 1), m), ["y", "label", "labels", "shape"]),
    "y_scalar": (lambda X, y, m, n: (X, y[0], m), ["y", "label", "labels", "shape"]),
    "y_nan": (lambda X, y, m, n: (X, nan_at(y), m), ["y", "label", "labels", "nan", "finite"]),
    "y_inf": (lambda X, y, m, n: (X, nan_at(y, np.inf), m), ["y", "label", "labels", "inf", "finite"]),
    "y_pm3": (lambda X, y, m, n: (X, 3 * y, m), ["y", "label", "labels", "3", "3.0"]),
    "y_minus1_0_1": (
        lambda X, y, m, n: (X, np.where(np.arange(n) % 3 == 0, 0.0, y).astype(np.float32), m),
        ["y", "label", "labels", "0", "0.0"],
    ),
    "y_complex": (
        lambda X, y, m, n: (X, y.astype(np.complex64), m),
        ["y", "label", "labels"],
    ),
    "X_nan": (lambda X, y, m, n: (nan_at(X), y, m), ["X", "nan", "finite"]),
    "X_inf": (lambda X, y, m, n: (nan_at(X, np.inf), y, m), ["X", "inf", "finite"]),
    "X_beyond_float32": (
        lambda X, y, m, n: (nan_at(X.astype(np.float64), 1e39).astype(np.float64), y, m),
        ["X", "inf", "finite", "float32", "1e+39", "range"],
    ),
    "X_complex": (lambda X, y, m, n: (X.astype(np.complex64), y, m), ["X", "complex", "dtype"]),
    "X_bool": (lambda X, y, m, n: (X > 0, y, m), ["X", "bool", "dtype"]),
    "not_a_triple": (lambda X, y, m, n: (X, y), ["sample", "tuple", "triple"]),
    "four_items": (lambda X, y, m, n: [X, y, m, m], ["sample", "tuple", "triple"]),
    "a_dict": (lambda X, y, m, n: {"X": X, "y": y, "mask": m}, ["sample", "tuple", "dict"]),
    "X_is_None": (lambda X, y, m, n: (None, y, m), ["X", "None", "sample"]),
    "y_is_None": (lambda X, y, m, n: (X, None, m), ["y", "None", "sample"]),
}
MASK_DEFECTS = {
    "mask_float_0.7": (lambda X, y, m, n: (X, y, np.full((n, T), 0.7, np.float32)), ["mask", "0.7", "bool"]),
    "mask_float_weights": (
        lambda X, y, m, n: (X, y, m * np.float32(0.5) + np.float32(0.25)),
        ["mask", "bool", "0.25", "0.75"],
    ),
    "mask_wide": (lambda X, y, m, n: (X, y, np.concatenate([m, m[:, :1]], 1)), ["mask", "shape"]),
    "mask_1d": (lambda X, y, m, n: (X, y, m[:, 0]), ["mask", "shape"]),
    "mask_short": (lambda X, y, m, n: (X, y, m[: n - 1]), ["mask", "shape"]),
    "mask_3d": (lambda X, y, m, n: (X, y, m[:, :, None]), ["mask", "shape"]),
    "mask_nan": (lambda X, y, m, n: (X, y, nan_at(m.astype(np.float32))), ["mask", "nan", "bool"]),
    "mask_minus_one": (
        lambda X, y, m, n: (X, y, np.where(m, 1, -1).astype(np.int32)),
        ["mask", "-1", "bool"],
    ),
}


def _run(model, **kw):
    from dynamics import run_sweep

    return lambda: run_sweep(data=model, **{**BASE, **kw})


@pytest.mark.parametrize("which", ["both", "train", "test"])
@pytest.mark.parametrize("kind", sorted(DM_DEFECTS))
def test_user_data_model_defect(kind, which):
    """A sample whose output is not what the protocol states (for the training set, the test
    set or both) is refused, naming the output: nothing can simulate it as declared."""
    defect, words = DM_DEFECTS[kind]
    decide(_run(Bank(defect, which)), words, None)


@pytest.mark.parametrize("which", ["both", "train", "test"])
@pytest.mark.parametrize("kind", sorted(MASK_DEFECTS))
def test_user_data_model_mask_defect(kind, which):
    """A mask that is not (n, T) bool (or 0/1) is refused, not used as attention weights."""
    defect, words = MASK_DEFECTS[kind]
    decide(_run(Bank(defect, which, with_mask=True)), words, None)


def _pm1(y):
    return np.where(np.asarray(y) > 0, 1.0, -1.0)


# Outputs with an admissible reading: (defect, model attributes, words, readings)
ACCEPTABLE = {
    "control": (None, {}, [], [plain()]),
    "control_mask": (None, {"with_mask": True}, [], [plain(mask_te=MB[:N_TEST])]),
    "X_float64": (lambda X, y, m, n: (X.astype(np.float64), y, m), {}, ["X", "dtype", "float64"], [plain()]),
    "X_float16": (
        lambda X, y, m, n: (X.astype(np.float16), y, m),
        {},
        ["X", "dtype", "float16"],
        [Reading(XB[:8].astype(np.float16), YB[:8], XB[:6].astype(np.float16), YB[:6])],
    ),
    "X_int": (
        lambda X, y, m, n: (np.round(3 * X).astype(np.int32), y, m),
        {},
        ["X", "dtype", "int32"],
        [Reading(np.round(3 * XB[:8]), YB[:8], np.round(3 * XB[:6]), YB[:6])],
    ),
    "X_numpy_float32": (lambda X, y, m, n: (np.array(X), np.array(y), m), {}, ["X"], [plain()]),
    "y_int": (lambda X, y, m, n: (X, y.astype(np.int32), m), {}, ["y", "dtype", "int32"], [plain()]),
    "y_0_1": (
        lambda X, y, m, n: (X, (y > 0).astype(np.float32), m),
        {},
        ["y", "label", "labels", "0", "0/1"],
        [plain()],
    ),
    "y_bool": (lambda X, y, m, n: (X, y > 0, m), {}, ["y", "label", "labels", "bool", "dtype"], [plain()]),
    "y_pm3_no_task": (
        lambda X, y, m, n: (X, 3 * y, m),
        {"task": _DEL},
        ["y", "task", "label", "labels"],
        [Reading(XB[:8], 3 * YB[:8], XB[:6], 3 * YB[:6], task="regression")],
    ),
    "y_regression_declared": (None, {"task": "regression"}, ["task"], [plain(task="regression")]),
    "mask_float_0_1": (
        lambda X, y, m, n: (X, y, m.astype(np.float32)),
        {"with_mask": True},
        ["mask", "bool"],
        [plain(mask_te=MB[:N_TEST])],
    ),
    "mask_int_0_1": (
        lambda X, y, m, n: (X, y, m.astype(np.int32)),
        {"with_mask": True},
        ["mask", "bool"],
        [plain(mask_te=MB[:N_TEST])],
    ),
    "mask_none_but_relevant": (
        lambda X, y, m, n: (X, y, None),
        {"with_mask": True},
        ["mask", "relevant_tokens", "None"],
        [plain()],
    ),
    "mask_all_false": (
        lambda X, y, m, n: (X, y, np.zeros_like(m)),
        {"with_mask": True},
        ["mask"],
        [plain(mask_te=np.zeros((N_TEST, T), bool))],
    ),
    "noise_floor_nan": (
        None,
        {"task": "regression", "noise_floor": float("nan")},
        ["noise_floor", "nan"],
        [plain(task="regression")],
    ),
    "noise_floor_regression": (
        None,
        {"task": "regression", "noise_floor": 0.25},
        ["noise_floor"],
        [plain(task="regression", noise_floor=0.25)],
    ),
}


@pytest.mark.parametrize("kind", sorted(ACCEPTABLE))
def test_user_data_model_admissible(kind):
    """Outputs with one sensible reading: refused, or their numbers are numpy's under it."""
    defect, attrs, words, readings = ACCEPTABLE[kind]
    attrs = dict(attrs)
    with_mask = attrs.pop("with_mask", False)
    model = Bank(defect, "both", with_mask=with_mask, **attrs)
    checks = [r.check for r in readings]
    if kind == "noise_floor_nan":  # an unknown floor (the built-in models' NaN): no excess risk, or NaN

        def no_excess(result):
            readings[0].check(result)
            if "excess_risk" in result.curves and not np.all(np.isnan(result.curves["excess_risk"])):
                raise AssertionError(f"excess_risk {result.curves['excess_risk']} of an unknown floor")

        checks = [no_excess]
    if kind == "mask_none_but_relevant":

        def nan_attn(result):
            readings[0].check(result)
            if "attn_relevant" in result.curves and not np.all(np.isnan(result.curves["attn_relevant"])):
                raise AssertionError(f"attn_relevant {result.curves['attn_relevant']} without any mask")

        checks = [nan_attn]
    assert decide(_run(model), words or ["never"], any_of(*checks)) in ("refused", "matched")
    if kind in ("control", "control_mask", "y_regression_declared", "noise_floor_regression"):
        assert decide(_run(model), [], any_of(*checks)) == "matched"  # the controls must run


# declared and traced sizes
SIZES = {
    "declared_T_wrong": ({"sizes": {"T": T + 1, "d": D}}, {}, ["T", "tokens", "4", "3"]),
    "declared_d_wrong": ({"sizes": {"T": T, "d": D + 2}}, {}, ["d", "width", "6", "4"]),
    "declared_T_zero": ({"sizes": {"T": 0, "d": D}}, {}, ["T", "tokens", "0"]),
    "declared_T_negative": ({"sizes": {"T": -3, "d": D}}, {}, ["T", "tokens", "-3"]),
    "declared_T_float": ({"sizes": {"T": 2.5, "d": D}}, {}, ["T", "tokens", "2.5"]),
    "declared_T_string": ({"sizes": {"T": "3", "d": D}}, {}, ["T", "tokens", "'3'", "str"]),
    "declared_T_bool": ({"sizes": {"T": True, "d": D}}, {}, ["T", "tokens", "True", "bool"]),
    "declared_sizes_list": ({"sizes": [T, D]}, {}, ["sizes", "list", "dict"]),
    "flag_tokens_wrong": ({}, {"tokens": T + 2}, ["X", "sample", "shape", "declared"]),
    "flag_width_wrong": ({}, {"width": D + 1}, ["X", "sample", "shape", "declared"]),
    "flag_tokens_wrong_undeclared": (
        {"sizes": _DEL},
        {"tokens": T + 2, "width": D},
        ["X", "sample", "shape"],
    ),
    "flag_width_zero": ({}, {"width": 0}, ["d", "width", "0"]),
    "task_nonsense": ({"task": "clasification"}, {}, ["task", "clasification"]),
    "task_number": ({"task": 1}, {}, ["task", "1"]),
    "noise_floor_string": ({"task": "regression", "noise_floor": "tiny"}, {}, ["noise_floor", "tiny"]),
    "noise_floor_negative": ({"task": "regression", "noise_floor": -0.5}, {}, ["noise_floor", "-0.5"]),
    "task_regression_loss_logistic": (
        {"task": "regression"},
        {"loss": "logistic"},
        ["loss", "logistic", "task"],
    ),
    "task_classification_loss_mse": ({}, {"loss": "mse"}, ["loss", "mse", "task"]),
    "task_flag_contradicts_regression_model": ({"task": "regression"}, {"task": "classification"}, ["task"]),
    "task_contradicts_flag": ({}, {"task": "regression"}, ["task", "regression", "classification"]),
    "n_train_zero": ({}, {"n_train": 0}, ["n_train", "0"]),
    "n_test_zero": ({}, {"n_test": 0}, ["n_test", "0"]),
    "n_train_negative": ({}, {"n_train": -8}, ["n_train", "-8"]),
    "n_train_float": ({}, {"n_train": 8.5}, ["n_train", "8.5"]),
    "n_train_bool": ({}, {"n_train": True}, ["n_train", "True", "bool"]),
}


@pytest.mark.parametrize("kind", sorted(SIZES))
def test_user_data_model_declarations(kind):
    """Declared sizes, tasks, noise floors and sizes asked for that disagree with what sample
    returns, or that are not what the protocol allows, are refused."""
    attrs, kw, words = SIZES[kind]
    decide(_run(Bank(None, "both", **attrs), **kw), words, None)


def test_user_data_model_sizes_inferred_or_asked():
    """A model that declares no sizes: T and d from one traced sample, or a refusal asking for them."""
    decide(_run(Bank(None, "both", sizes=_DEL)), ["T", "d", "tokens", "width", "sizes"], plain().check)


def test_user_data_model_sizes_given_by_flags():
    """A model without declared sizes, T and d given as flags: the plain numbers."""
    assert decide(_run(Bank(None, "both", sizes=_DEL), tokens=T, width=D), [], plain().check) == "matched"


def test_user_data_model_sizes_as_attributes():
    """``T`` and ``d`` attributes instead of ``sizes`` (documented): the plain numbers."""
    assert decide(_run(Bank(None, "both", sizes=_DEL, T=T, d=D)), [], plain().check) == "matched"


ONLINE = {
    "online_batch_short": (
        lambda X, y, m, n: (X[: n - 1], y[: n - 1], m),
        ["n", "sample", "batch", "examples"],
    ),
    "online_batch_y_column": (lambda X, y, m, n: (X, y[:, None], m), ["y", "shape", "label", "labels"]),
    "online_batch_nan": (lambda X, y, m, n: (nan_at(X), y, m), ["X", "nan", "finite"]),
    "online_batch_pm3": (lambda X, y, m, n: (X, 3 * y, m), ["y", "label", "labels", "3"]),
}
B_ONLINE = 4


def _online(model, **kw):
    from dynamics import run_sweep

    args = dict(
        heads=HEADS,
        trials=1,
        steps=STEPS,
        n_test=N_TEST,
        progress=False,
        optimizer="sgd",
        batch_size=B_ONLINE,
        sampling="online",
    )
    return lambda: run_sweep(data=model, **{**args, **kw})


@pytest.mark.parametrize("kind", sorted(ONLINE))
def test_user_data_model_online_batches(kind):
    """Online batches (n = B = 4) are checked as the training set is."""
    defect, words = ONLINE[kind]
    model = Bank(lambda X, y, m, n: defect(X, y, m, n) if n == B_ONLINE else (X, y, m), "both")
    decide(_online(model), words, None)


def test_user_data_model_online_numbers():
    """SGD online with a model whose every batch is bank[:4]: GD on those 4 examples; the logged
    train metrics are the batch's (docs/model.md)."""
    reading = Reading(XB[:B_ONLINE], YB[:B_ONLINE], XB[:N_TEST], YB[:N_TEST])

    def check(result):
        for i, H in enumerate(HEADS):
            ref = reading.curves(H, 0)
            for k in ("train_loss", "test_loss", "test_error"):
                close(result.curves[k][i, 0], ref[k], f"online H={H} {k}")

    assert decide(_online(Bank()), [], check) == "matched"


def test_user_data_model_online_n_train_refused():
    """``n_train`` has no effect under online sampling: refused (the guide's rule)."""
    decide(_online(Bank(), n_train=N_TRAIN), ["n_train", "online"], None)


# --------------------------------------------------------------------------- user losses


def loss_softplus2(z):
    return jnp.logaddexp(0.0, -2.0 * z)


def loss_mean(z):
    return jnp.mean(jnp.logaddexp(0.0, -z))


def loss_sum(z):
    return jnp.sum(jnp.logaddexp(0.0, -z))


def loss_first(z):
    return jnp.logaddexp(0.0, -z)[:1]


def loss_centred(z):
    e = jnp.logaddexp(0.0, -z)
    return e - jnp.mean(e) + 1.0


def loss_weighted(z):
    return jnp.logaddexp(0.0, -z) * jnp.arange(z.shape[0], dtype=z.dtype)


def loss_column(z):
    return jnp.logaddexp(0.0, -z)[:, None]


def loss_complex(z):
    return jnp.logaddexp(0.0, -z) + 0j


def loss_integer(z):
    return jnp.round(jnp.logaddexp(0.0, -z)).astype(jnp.int32)


def loss_constant(z):
    return 0.5


def loss_two_args(z, y):
    return jnp.logaddexp(0.0, -z * y)


def loss_regression_task(z):
    return z**2


loss_regression_task.task = "regression"


def loss_min(z):
    return jnp.zeros_like(z) + jnp.min(jnp.logaddexp(0.0, -z))


USER_LOSSES = {
    "mean": (loss_mean, None),
    "sum": (loss_sum, None),
    "first": (loss_first, None),
    "centred": (loss_centred, None),
    "weighted": (loss_weighted, None),
    "min_broadcast": (loss_min, None),
    "complex": (loss_complex, None),
    "integer": (loss_integer, None),
    "constant": (loss_constant, None),
    "two_args": (loss_two_args, None),
    "regression_task_on_labels": (loss_regression_task, None),
    "column": (loss_column, "logistic"),
    "softplus2": (loss_softplus2, lambda z: np.logaddexp(0.0, -2.0 * z)),
}


@pytest.mark.parametrize("kind", sorted(USER_LOSSES))
def test_user_loss(kind):
    """A user loss is ℓ(z) elementwise (docs/user-guide.md): one that is not, or whose output is
    not real of z's shape, is refused; a proper one gives numpy's numbers."""
    from dynamics.parts import LOSSES

    fn, ell = USER_LOSSES[kind]
    words = ["loss", fn.__name__, f"{__name__}:{fn.__name__}", "elementwise"]

    def call():
        name = LOSSES.adopt(fn)
        return _run(Bank(), loss=name)()

    check = None if ell is None else plain(loss=R.LOSSES[ell] if isinstance(ell, str) else ell).check
    decide(call, words, check)


def test_user_loss_not_callable():
    from dynamics.parts import LOSSES

    decide(lambda: _run(Bank(), loss=LOSSES.adopt(3.5))(), ["loss", "3.5"], None)


# --------------------------------------------------------------------------- user attentions


def attn_softmax(s):
    return jax.nn.softmax(s, axis=-1)


def attn_tanh(s):
    return jnp.tanh(s)


def attn_sum(s):
    return jnp.sum(jax.nn.softmax(s, axis=-1), axis=-1)


def attn_keepdims(s):
    return jnp.max(jax.nn.softmax(s, axis=-1), axis=-1, keepdims=True)


def attn_first(s):
    return jax.nn.softmax(s, axis=-1)[..., :1]


def attn_extra_axis(s):
    return jax.nn.softmax(s, axis=-1)[..., None]


def attn_complex(s):
    return jax.nn.softmax(s, axis=-1) + 0j


def attn_scalar(s):
    return jnp.sum(s)


def attn_padded(s):
    return jnp.concatenate([jax.nn.softmax(s, axis=-1), jnp.zeros_like(s[..., :1])], axis=-1)


def attn_nan(s):
    return jnp.full_like(s, jnp.nan)


USER_ATTENTIONS = {
    "sum_over_tokens": (attn_sum, None),
    "keepdims": (attn_keepdims, None),
    "first_token_only": (attn_first, None),
    "extra_axis": (attn_extra_axis, None),
    "complex": (attn_complex, None),
    "scalar": (attn_scalar, None),
    "one_token_more": (attn_padded, None),
    "softmax_by_hand": (attn_softmax, "softmax"),
    "tanh_saddle_at_zero": (attn_tanh, "tanh"),
}


@pytest.mark.parametrize("kind", sorted(USER_ATTENTIONS))
def test_user_attention(kind):
    """σ of the scores over the last axis: an output of another shape is refused (never
    broadcast); a proper σ gives numpy's numbers (tanh from θ = 0: a saddle, nothing moves)."""
    from dynamics.parts import ACTIVATIONS

    fn, sigma = USER_ATTENTIONS[kind]
    words = ["attention", fn.__name__, f"{__name__}:{fn.__name__}", "shape"]

    def call():
        return _run(Bank(), attention=ACTIVATIONS.adopt(fn))()

    check = None if sigma is None else plain(model={"attention": sigma}).check
    decide(call, words, check)


def test_user_attention_nan_output():
    """σ that is NaN everywhere: refused, or every run reported diverged at step 0 with NaN curves."""
    from dynamics.parts import ACTIVATIONS

    def check(result):
        if not np.all(np.asarray(result.diverged_at) == 0):
            raise AssertionError(f"diverged_at {result.diverged_at} with a NaN attention")

    decide(
        lambda: _run(Bank(), attention=ACTIVATIONS.adopt(attn_nan))(), ["attention", "attn_nan", "nan"], check
    )


# --------------------------------------------------------------------------- user metrics


def metric_u_sq(params, data):
    return jnp.sum(params["U"] ** 2)


def metric_u_per_head(params, data):
    return jnp.sum(params["U"] ** 2, axis=1)


def metric_mean_y(params, data):
    return jnp.mean(data.y)


def metric_complex(params, data):
    return jnp.sum(params["U"] ** 2) + 1j


def metric_bool(params, data):
    return jnp.sum(params["U"] ** 2) > 0


def metric_string(params, data):
    return "value"


def metric_none(params, data):
    return None


def test_user_metrics_numbers():
    """Proper metrics: ‖U‖² (scalar and per head, NaN-padded past H) and the test set's mean
    label, against numpy's trajectory of U (U_h of zero-init GD, every head the same)."""
    metrics = {"u_sq": metric_u_sq, "u_head": metric_u_per_head, "mean_y": metric_mean_y}

    def u_traj(H):  # U after each GD step from θ = 0, numpy
        return [p["U"] for p in plain().curves(H, 0)["params"]]

    def check(result):
        for i, H in enumerate(HEADS):
            Us = u_traj(H)
            close(result.curves["u_sq"][i, 0], [np.sum(U**2) for U in Us], f"u_sq H={H}")
            per = np.full((STEPS + 1, max(HEADS)), np.nan)
            for t, U in enumerate(Us):
                per[t, :H] = np.sum(U**2, axis=1)
            close(result.curves["u_head"][i, 0], per, f"u_head H={H}")
            close(result.curves["mean_y"][i, 0], np.full(STEPS + 1, YB[:N_TEST].mean()), "mean_y")

    assert decide(_run(Bank(), metrics=metrics), [], check) == "matched"


BAD_METRICS = {
    "complex": ({"m": metric_complex}, ["metric", "m", "complex"]),
    "string_output": ({"m": metric_string}, ["metric", "m", "str"]),
    "none_output": ({"m": metric_none}, ["metric", "m", "None"]),
    "name_clash_train_loss": ({"train_loss": metric_u_sq}, ["train_loss", "metric"]),
    # a name mhsim's own per-head curves use (a `head_` prefix alone is not reserved: metrics are
    # declared by kind, and only the names of mhsim's own curves are taken)
    "name_clash_head": ({"head_u_cos": metric_u_sq}, ["head_u_cos", "metric"]),
    "name_clash_param": ({"param_U": metric_u_sq}, ["param_U", "metric"]),
    "name_not_identifier": ({"my metric": metric_u_sq}, ["my metric", "identifier"]),
    "name_empty": ({"": metric_u_sq}, ["identifier", "name", "metric"]),
    "name_not_str": ({3: metric_u_sq}, ["3", "identifier", "name"]),
    "not_callable": ({"m": "jnp.sum"}, ["m", "callable", "jnp.sum"]),
    "a_list": ([metric_u_sq], ["metrics", "dict", "list"]),
    "name_clash_diagnostic": ({"sharpness": metric_u_sq}, ["sharpness", "metric"]),
}


@pytest.mark.parametrize("kind", sorted(BAD_METRICS))
def test_user_metric_refused(kind):
    """A metric with a non-real output, a taken or invalid name, or not a function: refused."""
    metrics, words = BAD_METRICS[kind]
    decide(_run(Bank(), metrics=metrics), words, None)


def test_user_metric_bool():
    """A boolean metric: refused, or logged as 0/1 (‖U‖² > 0: 0 at step 0, 1 after)."""

    def check(result):
        close(result.curves["m"][:, 0], np.array([[0.0, 1.0, 1.0]] * len(HEADS)), "bool metric")

    decide(_run(Bank(), metrics={"m": metric_bool}), ["metric", "m", "bool"], check)


# --------------------------------------------------------------------------- keywords and flags

BOOL_KNOBS = {  # keyword -> (extra keywords that make it meaningful, accessor)
    "bias": ({}, lambda c: c.model.bias),
    "save_params": ({}, lambda c: c.sweep.save_params),
    "whiten": ({"data_model": "icl-linreg"}, lambda c: c.data.whiten),
}
BOOL_VALUES = {  # value -> the boolean it can only mean, or None (refuse only)
    "'False'": ("False", False),
    "'false'": ("false", False),
    "'no'": ("no", False),
    "'0'": ("0", False),
    "'off'": ("off", False),
    "''": ("", False),
    "'True'": ("True", True),
    "'yes'": ("yes", True),
    "0": (0, False),
    "1": (1, True),
    "0.0": (0.0, False),
    "'maybe'": ("maybe", None),
    "2": (2, None),
    "[]": ([], None),
    "np.False_": (np.False_, False),
}


@pytest.mark.parametrize("value", sorted(BOOL_VALUES))
@pytest.mark.parametrize("knob", sorted(BOOL_KNOBS))
def test_boolean_keyword(knob, value):
    """A boolean keyword takes a bool: anything else is refused naming it, or (at most) read as
    the bool it plainly means and stored as a bool — never "False" read as True."""
    from dynamics import with_overrides

    extra, get = BOOL_KNOBS[knob]
    v, meaning = BOOL_VALUES[value]

    def check(cfg):
        got = get(cfg)
        if meaning is None or not isinstance(got, bool) or got is not meaning:
            raise AssertionError(f"{knob}={v!r} gave {got!r}")

    decide(
        lambda: with_overrides(None, **extra, **{knob: v}),
        [knob, repr(v), str(v), "bool"],
        None if meaning is None else check,
    )


def _field(path):
    def get(cfg):
        obj = cfg
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj

    return get


# keyword, value, extra keywords, admissible reading (accessor, expected) or None
KEYWORDS = [
    ("heads", [0], {}, None),
    ("heads", [-1], {}, None),
    ("heads", [], {}, None),
    ("heads", "0", {}, None),
    ("heads", [1.5], {}, None),
    ("heads", "1,,2", {}, None),
    ("heads", [True], {}, None),
    ("heads", "a", {}, None),
    ("trials", 0, {}, None),
    ("trials", -1, {}, None),
    ("trials", 1.5, {}, None),
    ("trials", True, {}, None),
    ("trials", "2", {}, ("sweep.trials", 2)),
    ("steps", -1, {}, None),
    ("steps", 2.5, {}, None),
    ("steps", True, {}, None),
    ("steps", float("nan"), {}, None),
    ("steps", 2.0, {}, ("optim.steps", 2)),
    ("lr", float("nan"), {}, None),
    ("lr", float("inf"), {}, None),
    ("lr", -float("inf"), {}, None),
    ("lr", -1.0, {}, None),
    ("lr", "abc", {}, None),
    ("lr", True, {}, None),
    ("lr", 1j, {}, None),
    ("lr", "0.5", {}, ("optim.lr", 0.5)),
    ("lr", None, {}, ("optim.lr", 1.0)),
    ("init_scale", float("nan"), {"init": "normal"}, None),
    ("init_scale", 0.0, {"init": "normal"}, None),
    ("init_scale", -1.0, {"init": "normal"}, None),
    ("init_scale", float("inf"), {"init": "normal"}, None),
    ("temperature", float("nan"), {}, None),
    ("temperature", 0.0, {}, None),
    ("temperature", -1.0, {}, None),
    ("temperature", float("inf"), {}, None),
    ("temperature_decay", float("nan"), {}, None),
    ("temperature_decay", -1.0, {}, None),
    ("n_train", 0, {}, None),
    ("n_train", -1, {}, None),
    ("n_train", 2.5, {}, None),
    ("n_train", True, {}, None),
    ("n_test", 0, {}, None),
    ("n_test", -5, {}, None),
    ("tokens", 0, {"data_model": "mixture"}, None),
    ("width", 0, {"data_model": "mixture"}, None),
    ("width", -3, {"data_model": "mixture"}, None),
    ("tokens", 1.5, {"data_model": "mixture"}, None),
    ("seed", 1.5, {}, None),
    ("seed", "x", {}, None),
    ("seed", float("nan"), {}, None),
    ("log_every", 0, {}, None),
    ("log_every", -1, {}, None),
    ("log_points", 0, {}, None),
    ("batch_size", 0, {"optimizer": "sgd"}, None),
    ("batch_size", -4, {"optimizer": "sgd"}, None),
    ("batch_size", 1000, {"optimizer": "sgd"}, None),
    ("batch_size", 3, {"optimizer": "sgd", "n_train": 100}, None),
    ("readout_lr_factor", float("nan"), {}, None),
    ("readout_lr_factor", float("inf"), {}, None),
    ("attention_lr_factor", float("nan"), {}, None),
    ("readout_lr_factor", -1.0, {}, None),
    ("readout_weight_decay", -1.0, {}, None),
    ("readout_weight_decay", float("nan"), {}, None),
    ("attention_weight_decay", float("nan"), {}, None),
    ("attention_weight_decay", -0.1, {}, None),
    ("readout_steps", "5:2", {}, None),
    ("readout_steps", "a:b", {}, None),
    ("readout_steps", "-1:3", {}, None),
    ("attention_steps", "0:0.5", {}, None),
    ("zeta", float("nan"), {"data_model": "mixture"}, None),
    ("zeta", -0.1, {"data_model": "mixture"}, None),
    ("noise", float("nan"), {"data_model": "mixture"}, None),
    ("noise", -1.0, {"data_model": "mixture"}, None),
    ("signal", float("inf"), {"data_model": "mixture"}, None),
    ("relevant", 0, {"data_model": "mixture"}, None),
    ("relevant", 99, {"data_model": "mixture", "tokens": 5}, None),
    ("irrelevant_means", -1, {"data_model": "mixture"}, None),
    ("label_noise", 1.5, {"data_model": "planted"}, None),
    ("label_noise", -0.1, {"data_model": "planted"}, None),
    ("teacher_heads", 0, {"data_model": "planted"}, None),
    ("teacher_scale", float("nan"), {"data_model": "planted"}, None),
    ("positive_rate", 1.5, {"data_model": "sparse-token"}, None),
    ("positive_rate", float("nan"), {"data_model": "sparse-token"}, None),
    ("gamma", float("nan"), {"data_model": "single-location"}, None),
    ("epsilon", -1.0, {"data_model": "single-location"}, None),
    ("strengths", "", {"data_model": "multi-location"}, None),
    ("strengths", "1,nan", {"data_model": "multi-location"}, None),
    ("head_size", 0, {"key_query": "factored"}, None),
    ("head_size", -1, {"key_query": "factored"}, None),
    ("head_size", "half", {"key_query": "factored"}, None),
    ("optimizer", "sgdd", {}, None),
    ("loss", "logisitc", {}, None),
    ("attention", "softmaxx", {}, None),
    ("query", "middle", {}, None),
    ("norm", "l2", {}, None),
    ("diagnostics", "foo", {}, None),
    ("lr_scaling", "quadratic", {}, None),
    ("init", "xavier", {}, None),
    ("sampling", "shuffle", {"optimizer": "sgd"}, None),
    ("data_model", "dm2", {}, None),
    ("data_model", "nonexistent_module_xyz:model", {}, None),
    ("geometry", "round", {"data_model": "mixture"}, None),
    ("head_metrics", "maybe", {}, None),
    ("learning_rate", 0.5, {}, None),
    ("head", 2, {}, None),
    ("Bias", True, {}, None),
    ("n", 8, {}, None),
]


@pytest.mark.parametrize(
    "case", KEYWORDS, ids=[f"{k}={v!r}{'+' + ','.join(e) if e else ''}" for k, v, e, _ in KEYWORDS]
)
def test_keyword_values(case):
    """A keyword value outside what the knob takes (or an unknown keyword) is refused in one line
    naming it; a value with one plain reading may instead be stored as that reading."""
    from dynamics import with_overrides

    knob, value, extra, reading = case

    def check(cfg):
        got = _field(reading[0])(cfg)
        if got != reading[1] or type(got) is not type(reading[1]):
            raise AssertionError(f"{knob}={value!r} stored as {got!r}")

    decide(
        lambda: with_overrides(None, **extra, **{knob: value}),
        [knob, knob.replace("_", "-"), repr(value), str(value)],
        None if reading is None else check,
    )


# knobs the guide says change nothing in the configuration: refused
NO_EFFECT = [
    ("init_scale", 0.5, {}),
    ("head_size", 2, {}),
    ("key_query", "factored", {"query": "learned", "init": "normal"}),
    ("head_size", 2, {"query": "learned", "init": "normal"}),
    ("batch_size", 4, {}),
    ("sampling", "replace", {"optimizer": "adam"}),
    ("n_train", 50, {"optimizer": "sgd", "batch_size": 4, "sampling": "online"}),
    ("init_scale", 0.5, {"query": "learned", "init": "sphere"}),
    ("readout_weight_decay", 0.1, {"query": "learned", "init": "sphere", "constraint": "sphere"}),
    ("whiten", True, {}),
    ("gamma", 0.5, {}),
    ("teacher_heads", 2, {}),
    ("zeta", 0.3, {"data_model": "planted"}),
    ("positive_rate", 0.3, {"data_model": "dm1"}),
    ("diagnostics", "sharpness", {"attention": "linear", "init": "normal"}),
    ("init", "zero", {"attention": "erf"}),
    ("init", "zero", {"attention": "linear"}),
    ("init", "sphere", {}),
    ("constraint", "sphere", {"query": "learned", "init": "normal"}),
]


@pytest.mark.parametrize(
    "case",
    NO_EFFECT,
    ids=[f"{k}={v!r}+{','.join(f'{a}={b}' for a, b in e.items())}" for k, v, e in NO_EFFECT],
)
def test_knob_without_effect(case):
    """A value that would change nothing (or that the model cannot use) is refused, naming it."""
    from dynamics import with_overrides

    knob, value, extra = case
    decide(
        lambda: with_overrides(None, **extra, **{knob: value}),
        [knob, knob.replace("_", "-"), str(value)],
        None,
    )


# --------------------------------------------------------------------------- the command line and TOML


def _cli(tmp_path, *args, timeout=240):
    out = tmp_path / "out"
    env = child_env(MHSIM_CACHE_DIR=os.environ.get("MHSIM_CACHE_DIR", "off"))
    proc = subprocess.run(
        [sys.executable, "-m", "dynamics.run", "--out", str(out), "--no-figure", "--quiet", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=timeout,
    )
    return proc, out


def cli_refuses(tmp_path, args, words, accepted=None):
    """The command line refuses (exit 2, one line naming the value, nothing written), or, with
    ``accepted``, runs and ``accepted(out)`` checks what it wrote."""
    proc, out = _cli(tmp_path, *args)
    written = out.exists() and any(out.iterdir())
    if proc.returncode == 2:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        assert lines, "exit 2 without a message"
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert len(lines) == 1 or lines[0].startswith("usage:"), f"not one line: {proc.stderr[-1500:]}"
        last = lines[-1]
        assert any(str(w).lower() in last.lower() for w in words), f"{last!r} names none of {words}"
        assert not written, f"refused but wrote {list(out.iterdir())}"
        return "refused"
    if accepted is None or proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}")
    accepted(out)
    return "matched"


TINY = ["--heads", "1", "--trials", "1", "--steps", "1", "--n-train", "4", "--n-test", "4"]
TINY_KEYS = ["heads", "trials", "steps", "n_train", "n_test"]

TOML_CASES = {
    "bias_string_False": ('[model]\nbias = "False"\n', ["bias", "False"], ("model", "bias", False)),
    "save_params_string_no": (
        '[sweep]\nsave_params = "no"\n',
        ["save_params", "no"],
        ("sweep", "save_params", False),
    ),
    "bias_int_1": ("[model]\nbias = 1\n", ["bias", "1"], ("model", "bias", True)),
    "zeta_twice": ('[data]\nmodel = "mixture"\nzeta = 0.2\n[data.params]\nzeta = 0.3\n', ["zeta"], None),
    "unknown_data_key": ("[data]\nfoo = 1\n", ["foo"], None),
    "unknown_model_key": ("[model]\nheads = 2\n", ["heads"], None),
    "unknown_table": ("[training]\nlr = 0.5\n", ["training"], None),
    "unknown_top_key": ("seed = 3\n", ["seed"], None),
    "lr_nan": ("[optim]\nlr = nan\n", ["lr", "nan"], None),
    "lr_inf": ("[optim]\nlr = inf\n", ["lr", "inf"], None),
    "lr_string": ('[optim]\nlr = "fast"\n', ["lr", "fast"], None),
    "steps_negative": ("[optim]\nsteps = -5\n", ["steps", "-5"], None),
    "heads_empty": ("[sweep]\nheads = []\n", ["heads"], None),
    "heads_zero": ("[sweep]\nheads = [0, 1]\n", ["heads", "0"], None),
    "trials_zero": ("[sweep]\ntrials = 0\n", ["trials", "0"], None),
    "unknown_param": ('[data]\nmodel = "mixture"\n[data.params]\nbogus = 1\n', ["bogus"], None),
    "geometry_bad": (
        '[data]\nmodel = "mixture"\n[data.params]\ngeometry = "round"\n',
        ["geometry", "round"],
        None,
    ),
    "zeta_nan": ('[data]\nmodel = "mixture"\n[data.params]\nzeta = nan\n', ["zeta", "nan"], None),
    "preset_unknown": ('preset = "nope"\n', ["nope", "preset"], None),
    "syntax_error": ("[optim\nlr = 1\n", ["toml", "cfg.toml", "line"], None),
    "model_missing_module": (
        '[data]\nmodel = "nonexistent_module_xyz:model"\n',
        ["nonexistent_module_xyz"],
        None,
    ),
    "whiten_string": (
        '[data]\nmodel = "icl-linreg"\n[data.params]\nwhiten = "false"\n',
        ["whiten", "false"],
        None,
    ),
    "params_not_table": ('[data]\nmodel = "mixture"\nparams = 3\n', ["params", "3"], None),
    "n_train_float": ("[data]\nn_train = 4.5\n", ["n_train", "4.5"], None),
    "init_from_missing": ('[model]\ninit_from = "missing.npz"\n', ["init_from", "missing.npz"], None),
}


@pytest.mark.parametrize("kind", sorted(TOML_CASES))
def test_toml(tmp_path, kind):
    """A TOML file's bad values, unknown keys and contradictions end with exit 2, one line, nothing
    written; a value with one plain reading may run, and results.json must then say that reading."""
    text, words, reading = TOML_CASES[kind]
    (tmp_path / "cfg.toml").write_text(text)

    def accepted(out):
        section, key, want = reading
        got = json.loads((out / "results.json").read_text())["config"][section][key]
        assert got is want, f"{key} = {got!r}, the file meant {want!r}"

    flags = [f for f, key in zip(TINY[::2], TINY_KEYS, strict=True) if key not in text]
    tiny = [a for f in flags for a in (f, TINY[TINY.index(f) + 1])]
    cli_refuses(tmp_path, ["--config", "cfg.toml", *tiny], words, None if reading is None else accepted)


CLI_CASES = {
    "heads_zero": (["--heads", "0"], ["heads", "0"]),
    "lr_nan": (["--lr", "nan"], ["lr", "nan"]),
    "steps_negative": (["--steps=-1"], ["steps", "-1"]),
    "width_zero": (["--data-model", "mixture", "--width", "0"], ["width", "0", "d"]),
    "init_from_missing_file": (["--init-from", "missing.npz", "--init", "normal"], ["missing.npz", "init"]),
    "init_from_missing": (["--init-from", "missing.npz"], ["missing.npz"]),
    "data_missing_file": (["--data", "missing.npz"], ["missing.npz"]),
    "lr_log_of_zero": (["--lr", "0:1:3"], ["lr", "0:1:3"]),
    "lr_negative_range": (["--lr=-1:1:3"], ["lr", "-1:1:3"]),
    "lr_zero_points": (["--lr", "1:10:0"], ["lr", "1:10:0"]),
    "lr_fractional_points": (["--lr", "1:10:2.5"], ["lr", "1:10:2.5"]),
    "lr_nan_in_list": (["--lr", "1,nan"], ["lr", "nan"]),
    "lr_nan_range": (["--lr", "nan:1:3"], ["lr", "nan"]),
    "n_train_fraction_list": (["--n-train", "2.5,4"], ["n_train", "n-train", "2.5"]),
    "n_train_zero_in_list": (["--n-train", "0,4"], ["n_train", "n-train", "0"]),
    "steps_as_grid": (["--steps", "1,2"], ["steps", "1,2"]),
    "trials_as_grid": (["--trials", "1,2"], ["trials", "1,2"]),
    "attention_range": (["--attention", "a:b:3"], ["attention", "a:b:3"]),
    "unknown_user_loss": (["--loss", "nonexistent_module_xyz:loss"], ["nonexistent_module_xyz"]),
    "user_data_model_not_a_model": (["--data-model", "json:dumps"], ["json:dumps", "setup", "sample"]),
}


@pytest.mark.parametrize("kind", sorted(CLI_CASES))
def test_command_line(tmp_path, kind):
    args, words = CLI_CASES[kind]
    cli_refuses(tmp_path, [*TINY, *args], words)


# --------------------------------------------------------------------------- --init-from files

P0 = {"U": _rs.normal(size=(3, D)) * 0.7, "W": _rs.normal(size=(3, D, D)) * 0.7}
# θ(0) files are tried on a user model of the default width d = 32 (so that no width flag is
# needed: only the file is on trial), its tokens N(0, I/d)·2
DI = 32
XI = (_rs.normal(size=(16, T, DI)) * 2 / math.sqrt(DI)).astype(np.float32)
YI = np.where(_rs.normal(size=16) >= 0, 1.0, -1.0).astype(np.float32)
PI = {"U": _rs.normal(size=(3, DI)) * 0.7, "W": _rs.normal(size=(3, DI, DI)) * 0.7}
PI_TRIALS = {"U": _rs.normal(size=(2, 3, DI)) * 0.7, "W": _rs.normal(size=(2, 3, DI, DI)) * 0.7}


def _init_reading(arrays, trials):
    def p0(trial, H):
        out = {}
        for k in ("U", "W"):
            a = np.asarray(arrays[k], np.float64)
            per_trial = a.ndim == {"U": 3, "W": 4}[k]
            out[k] = (a[trial] if per_trial else a)[:H]
        return out

    return Reading(XI[:N_TRAIN], YI[:N_TRAIN], XI[:N_TEST], YI[:N_TEST], p0=p0, trials=trials)


def _init_run(tmp_path, arrays, trials=2, **kw):
    from dynamics import run_sweep

    path = tmp_path / "theta.npz"
    np.savez(path, **arrays)
    model = Bank(bank=(XI, YI), sizes={"T": T, "d": DI})
    return lambda: run_sweep(data=model, init_from=str(path), **{**BASE, "trials": trials, **kw})


INIT_BAD = {
    "U_nan": ({**PI, "U": nan_at(PI["U"])}, ["nan", "finite"]),
    "W_inf": ({**PI, "W": nan_at(PI["W"], np.inf)}, ["inf", "finite"]),
    "W_beyond_float32": (
        {**PI, "W": np.where(np.arange(3 * DI * DI).reshape(3, DI, DI) == 5, 1e39, PI["W"])},
        ["float32", "1e+39", "inf", "finite", "range"],
    ),
    "U_too_wide": ({**PI, "U": np.zeros((3, DI + 1))}, ["U", "(3, 33)"]),
    "W_not_square": ({**PI, "W": np.zeros((3, DI, DI - 1))}, ["W", "(3, 32, 31)"]),
    "W_missing_axis": ({**PI, "W": np.zeros((3, DI))}, ["W", "(3, 32)"]),
    "one_head_only": ({"U": PI["U"][:1], "W": PI["W"][:1]}, ["heads", "H"]),
    "heads_disagree": ({"U": PI["U"], "W": PI["W"][:2]}, ["heads", "W", "(2, 32, 32)"]),
    "W_missing": ({"U": PI["U"]}, ["W", "missing"]),
    "U_missing": ({"W": PI["W"]}, ["U", "missing"]),
    "W_and_QK": ({**PI, "Q": np.zeros((3, DI, 2)), "K": np.zeros((3, DI, 2))}, ["Q", "K"]),
    "k_with_W_model": ({**PI, "k": np.zeros((3, DI))}, ["k"]),
    "unknown_array": ({**PI, "V": np.zeros((3, DI))}, ["V"]),
    "b_without_bias": ({**PI, "b": np.array(0.5)}, ["b", "bias"]),
    "trial_axis_too_short": ({"U": PI_TRIALS["U"][:1], "W": PI_TRIALS["W"][:1]}, ["trials", "trial"]),
    "complex": ({**PI, "U": PI["U"] + 0j}, ["complex", "complex128", "dtype"]),
    "string_array": ({**PI, "U": np.full((3, DI), "a")}, ["dtype", "<U1", "str"]),
    "U_scalar": ({**PI, "U": np.array(1.0)}, ["U", "()"]),
    "U_bool": ({**PI, "U": PI["U"] > 0}, ["bool", "dtype"]),
    "W_trials_U_not_heads": ({"U": PI["U"][:, :2], "W": PI_TRIALS["W"]}, ["U", "(3, 2)"]),
}


@pytest.mark.parametrize("kind", sorted(INIT_BAD))
def test_init_from_refused(tmp_path, kind):
    """θ(0) files with non-finite values (float32's range included), wrong shapes, too few heads
    or trials, unknown or contradicting arrays: refused before anything runs, naming the defect."""
    arrays, words = INIT_BAD[kind]
    decide(_init_run(tmp_path, arrays), words, None)


INIT_OK = {
    "shared": (PI, 2),
    "per_trial": (PI_TRIALS, 2),
    "per_trial_U_only": ({"U": PI_TRIALS["U"], "W": PI["W"]}, 2),
    "float32_file": ({k: v.astype(np.float32) for k, v in PI.items()}, 2),
    "int_file": ({k: np.round(v).astype(np.int64) for k, v in PI.items()}, 2),
    "more_trial_rows": (
        {
            "U": np.concatenate([PI_TRIALS["U"], PI_TRIALS["U"][:1]]),
            "W": np.concatenate([PI_TRIALS["W"], PI_TRIALS["W"][:1]]),
        },
        2,
    ),
}


@pytest.mark.parametrize("kind", sorted(INIT_OK))
def test_init_from_numbers(tmp_path, kind):
    """Proper θ(0) files: every trial's curves equal numpy's GD from the file's first H heads
    (row i for trial i when the file has a trial axis); an int file may be refused."""
    arrays, trials = INIT_OK[kind]
    reading = _init_reading(arrays, trials)
    words = {
        "int_file": ["dtype", "int64"],
        "more_trial_rows": ["trials", "rows", "3"],
        "per_trial_U_only": ["W", "alike"],  # "every array may have a trial axis": all or none may be asked
    }.get(kind, [])
    result = decide(_init_run(tmp_path, arrays, trials), words or ["never"], reading.check)
    if not words:
        assert result == "matched"


def test_init_from_with_declared_sizes(tmp_path):
    """θ(0) of width 4 on a user model that declares d = 4 (no --width): checked against the
    model's d, so it runs and gives numpy's numbers."""
    from dynamics import run_sweep

    np.savez(tmp_path / "theta.npz", **P0)
    call = lambda: run_sweep(data=Bank(), init_from=str(tmp_path / "theta.npz"), **{**BASE, "trials": 2})

    def p0(trial, H):
        return {k: v[:H] for k, v in P0.items()}

    assert decide(call, ["never"], plain(p0=p0, trials=2).check) == "matched"


def test_init_from_per_trial_no_identical_warning(tmp_path):
    """Per-trial θ(0) makes trials differ: no IdenticalTrialsWarning claims they repeat one run."""
    import warnings

    call = _init_run(tmp_path, PI_TRIALS, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decide(call, ["never"], _init_reading(PI_TRIALS, 2).check)
    names = [type(w.message).__name__ for w in caught]
    assert "IdenticalTrialsWarning" not in names, names


# --------------------------------------------------------------------------- data files (.npz)


def _npz(tmp_path, **over):
    arrays = {"X_train": XB[:N_TRAIN], "y_train": YB[:N_TRAIN], "X_test": XB[:N_TEST], "y_test": YB[:N_TEST]}
    arrays.update(over)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return path


NPZ_BAD = {
    "X_train_nan": ({"X_train": nan_at(XB[:8])}, ["X_train", "nan", "finite"]),
    "X_test_inf": ({"X_test": nan_at(XB[:6], np.inf)}, ["X_test", "inf", "finite"]),
    "y_train_nan": ({"y_train": nan_at(YB[:8])}, ["y_train", "nan", "finite"]),
    "mask_float_0.7": ({"mask_train": np.full((8, T), 0.7)}, ["mask_train", "0.7"]),
    "mask_wide": ({"mask_train": np.ones((8, T + 1), bool)}, ["mask_train", "shape"]),
    "mask_short": ({"mask_test": np.ones((5, T), bool)}, ["mask_test", "shape"]),
    "y_column": ({"y_train": YB[:8, None]}, ["y_train", "shape"]),
    "y_short": ({"y_train": YB[:7]}, ["y_train", "shape", "7", "8"]),
    "X_2d": ({"X_train": XB[:8].reshape(8, -1)}, ["X_train", "shape"]),
    "X_test_width": (
        {"X_test": np.concatenate([XB[:6], XB[:6, :, :1]], 2)},
        ["X_test", "d", "shape", "width"],
    ),
    "y_test_missing": ({"y_test": None}, ["y_test"]),
    "X_complex": ({"X_train": XB[:8] + 0j}, ["X_train", "complex", "dtype"]),
    "y_strings": ({"y_train": np.array(["a"] * 8)}, ["y_train", "dtype"]),
    "X_empty": ({"X_train": XB[:0], "y_train": YB[:0]}, ["X_train", "empty", "0"]),
    "X_beyond_float32": (
        {"X_train": np.where(np.arange(96).reshape(8, 3, 4) == 7, 1e39, XB[:8].astype(np.float64))},
        ["X_train", "float32", "inf", "1e+39", "finite", "range"],
    ),
    "misspelt_mask_key": ({"mask_tarin": MB[:8]}, ["mask_tarin"]),
}


@pytest.mark.parametrize("kind", sorted(NPZ_BAD))
def test_npz_refused(tmp_path, kind):
    """``datamodels.load_npz`` refuses a bad file with a DataError naming the key."""
    from datamodels import load_npz

    over, words = NPZ_BAD[kind]
    path = _npz(tmp_path, **over)
    decide(lambda: load_npz(path), [*words, "data.npz"], None)


def test_npz_mask_int_accepted(tmp_path):
    """0/1 integer masks are accepted as documented, as the same bool mask."""
    from datamodels import load_npz

    path = _npz(tmp_path, mask_train=MB[:8].astype(np.int64), mask_test=MB[:6].astype(np.int64))
    data = load_npz(path)
    assert np.array_equal(np.asarray(data.mask_train).astype(bool), MB[:8])
    assert np.array_equal(np.asarray(data.mask_train), np.asarray(data.mask_train).astype(bool))


def test_npz_zero_one_labels_numbers(tmp_path):
    """0/1 targets of a file are labels read as ±1: run_sweep(data=path) (the flag's name) gives
    numpy's numbers of the ±1 labels."""
    from dynamics import run_sweep

    path = _npz(tmp_path, y_train=(YB[:8] > 0).astype(np.float32), y_test=(YB[:6] > 0).astype(np.float32))
    args = {k: v for k, v in BASE.items() if k not in ("n_train", "n_test")}
    assert decide(lambda: run_sweep(data=str(path), **args), ["never"], plain().check) == "matched"


def test_npz_sizes_refused(tmp_path):
    """``n_train`` and ``n_test`` (BASE gives both) on data from a file change nothing: refused
    (documented), the message naming one of them."""
    from dynamics import run_sweep

    path = _npz(tmp_path)
    decide(lambda: run_sweep(data=str(path), **BASE), ["n_train", "n-train", "n_test", "n-test"], None)


# --------------------------------------------------------------------------- grids


def test_grid_width_with_save_params(tmp_path):
    """A grid over --width with --save-params: refused before the first point, or it finishes
    and its snapshots load (every width's θ kept)."""

    def accepted(out):
        from dynamics import load_results

        assert (out / "params.npz").exists(), list(out.iterdir())
        assert json.loads((out / "results.json").read_text())["complete"] is True
        load_results(out)

    cli_refuses(
        tmp_path,
        ["--data-model", "mixture", "--tokens", "3", "--width", "6,8", "--save-params", *TINY],
        ["width", "save-params", "save_params"],
        accepted,
    )


def test_grid_width_with_init_from(tmp_path):
    """θ(0) of width 6 on a grid over --width 6,8: the width-8 point cannot start from it: refused
    before the first point (nothing written)."""
    np.savez(tmp_path / "theta.npz", U=np.zeros((1, 6)), W=np.zeros((1, 6, 6)))
    cli_refuses(
        tmp_path,
        ["--data-model", "mixture", "--tokens", "3", "--width", "6,8", "--init-from", "theta.npz", *TINY],
        ["init-from", "init_from", "theta.npz", "8"],
    )


def test_grid_lr_numbers(tmp_path):
    """A grid over η₀ on a data file: each point's curves are numpy's GD at that η₀, and the
    file's `lr` axis holds the values asked for."""
    from dynamics import load_results

    path = _npz(tmp_path)
    lrs = [0.25, 1.0]

    def accepted(out):
        grid = load_results(out)
        arrays = np.load(out / "curves.npz")
        close(arrays["lr"], lrs, "lr axis")
        for k, lr in enumerate(lrs):
            point = grid.point(k)
            plain(lr=lr).check(point)

    cli_refuses(
        tmp_path,
        ["--data", str(path), "--heads", "1,2", "--trials", "1", "--steps", "2", "--lr", "0.25,1"],
        ["never"],
        accepted,
    )


def test_grid_lr_range_values(tmp_path):
    """`a:b:k` is k values log-spaced from a to b (grids.md): the axis equals numpy's geomspace."""
    path = _npz(tmp_path)

    def accepted(out):
        close(np.load(out / "curves.npz")["lr"], np.geomspace(0.01, 1.0, 3), "lr axis", rtol=1e-6)

    cli_refuses(
        tmp_path,
        ["--data", str(path), "--heads", "1", "--trials", "1", "--steps", "1", "--lr", "1e-2:1:3"],
        ["never"],
        accepted,
    )


RUN_GRID_BAD = {
    "lrs_empty": (dict(lrs=[]), ["lrs"]),
    "lrs_nan": (dict(lrs=[float("nan")]), ["lrs", "nan"]),
    "lrs_negative": (dict(lrs=[-1.0]), ["lrs", "-1.0", "-1"]),
    "lrs_half_range": (dict(lrs="0.1:1"), ["lrs", "0.1:1"]),
    "lrs_strings": (dict(lrs=["a"]), ["lrs", "a"]),
    "init_scales_zero_init": (dict(init_scales=[0.5, 1.0]), ["init_scales", "init_scale", "zero"]),
    "init_scales_negative": (dict(init_scales=[-1.0], cfg={"init": "normal"}), ["init_scales", "-1.0", "-1"]),
}


def _grid_cfg(**extra):
    from dynamics import with_overrides

    return with_overrides(None, **{k: v for k, v in BASE.items() if k != "progress"}, **extra)


@pytest.mark.parametrize("kind", sorted(RUN_GRID_BAD))
def test_run_grid_refused(kind):
    from dynamics import run_grid

    kw, words = RUN_GRID_BAD[kind]
    kw = dict(kw)
    decide(lambda: run_grid(_grid_cfg(**kw.pop("cfg", {})), data=Bank(), progress=False, **kw), words, None)


def test_run_grid_numbers():
    """``run_grid(lrs=[0.25, 1])`` on a user model: one SweepResult per η₀, each numpy's GD."""
    from dynamics import run_grid

    def check(results):
        assert len(results) == 2
        for r, lr in zip(results, [0.25, 1.0], strict=True):
            plain(lr=lr).check(r)

    call = lambda: run_grid(_grid_cfg(), lrs=[0.25, 1.0], data=Bank(), progress=False)
    assert decide(call, ["never"], check) == "matched"


# --------------------------------------------------------------------------- memory


MEMORY = {  # within every knob's range, terabytes in all: any allocation of them fails at once
    "huge_data": dict(data_model="mixture", n_train=10**7, n_test=10**7, tokens=256, width=256, trials=10**5),
    "huge_params": dict(data_model="mixture", heads=[4096], init="normal", width=4096, trials=10**5),
}


_MEMORY_SCRIPT = """
import sys, json
sys.path.insert(0, {tests!r})
from hostile_cases.outcome import refusal
from dynamics import run_sweep
try:
    run_sweep(progress=False, **json.loads({kw!r}))
except Exception as exc:
    why = refusal(exc, {words!r})
    print("REFUSED" if not why else "BAD " + why)
else:
    print("RAN")
"""


@pytest.mark.parametrize("kind", sorted(MEMORY))
def test_run_sweep_memory_check(kind):
    """A sweep far beyond the machine's memory is refused by run_sweep, naming its size, as the
    command line refuses it (never an allocation failure deep in JAX, never a hang: 60 s)."""
    words = ["memory", "GB", "GiB", "TB", "TiB", "bytes", "size"]
    script = _MEMORY_SCRIPT.format(tests=str(ROOT / "tests"), kw=json.dumps(MEMORY[kind]), words=words)
    env = child_env()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{kind}: still running after 60 s (no memory check)") from None
    last = (proc.stdout.strip().splitlines() or [proc.stderr[-500:]])[-1]
    assert last == "REFUSED", last


# --------------------------------------------------------------------------- load_results


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """One tiny sweep written by the command line on planted data (which names directions)."""
    tmp = tmp_path_factory.mktemp("hostile-run")
    proc, out = _cli(
        tmp,
        "--data-model",
        "planted",
        "--tokens",
        "3",
        "--width",
        "4",
        "--teacher-heads",
        "2",
        "--heads",
        "1,2",
        "--trials",
        "1",
        "--steps",
        "2",
        "--n-train",
        "8",
        "--n-test",
        "6",
        "--init",
        "normal",
        "--head-metrics",
        "on",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def _copy(run_folder, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(run_folder, dst)
    return dst


def _edit_json(folder, fn):
    meta = json.loads((folder / "results.json").read_text())
    fn(meta)
    (folder / "results.json").write_text(json.dumps(meta))


def _edit_npz(folder, name, fn):
    arrays = dict(np.load(folder / name))
    fn(arrays)
    np.savez(folder / name, **arrays)


def _truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _reorder_directions(meta):
    meta["directions"] = list(reversed(meta["directions"]))


def _set(key, value):
    def fn(meta):
        meta[key] = value

    return fn


DAMAGE = {
    "directions_reordered": lambda f: _edit_json(f, _reorder_directions),
    "curves_truncated": lambda f: _truncate(f / "curves.npz"),
    "curves_empty": lambda f: (f / "curves.npz").write_bytes(b""),
    "curves_missing": lambda f: (f / "curves.npz").unlink(),
    "results_truncated": lambda f: _truncate(f / "results.json"),
    "results_a_list": lambda f: (f / "results.json").write_text("[1, 2]"),
    "heads_edited": lambda f: _edit_json(f, _set("heads", [1, 3])),
    "heads_reversed": lambda f: _edit_json(f, _set("heads", [2, 1])),
    "steps_edited": lambda f: _edit_json(f, _set("steps", [0, 1, 5])),
    "train_loss_reshaped": lambda f: _edit_npz(
        f, "curves.npz", lambda a: a.__setitem__("train_loss", a["train_loss"][:, :, :2])
    ),
    "train_loss_removed": lambda f: _edit_npz(f, "curves.npz", lambda a: a.pop("train_loss")),
    "curves_heads_reversed": lambda f: _edit_npz(
        f, "curves.npz", lambda a: a.__setitem__("heads", a["heads"][::-1])
    ),
    "config_lr_edited": lambda f: _edit_json(f, lambda m: m["config"]["optim"].__setitem__("lr", 0.7)),
    "directions_file_missing": lambda f: (f / "directions.npz").unlink(),
    "directions_dropped": lambda f: _edit_json(f, lambda m: m.__setitem__("directions", m["directions"][:1])),
    "diverged_at_reshaped": lambda f: _edit_npz(
        f, "curves.npz", lambda a: a.__setitem__("diverged_at", a["diverged_at"][:1])
    ),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_load_results_damaged(run_folder, tmp_path, kind):
    """A damaged or edited run folder is refused (ValueError naming the file or field), or loads
    to exactly what the intact folder holds (the same curves under the same names)."""
    from dynamics import load_results

    if kind.startswith("directions") and not (run_folder / "directions.npz").exists():
        pytest.fail(
            f"the planted run wrote no directions.npz: {sorted(p.name for p in run_folder.iterdir())}"
        )
    intact = load_results(run_folder)
    folder = _copy(run_folder, tmp_path)
    DAMAGE[kind](folder)

    def same(result):
        assert np.array_equal(np.asarray(result.heads), np.asarray(intact.heads)), result.heads
        assert np.array_equal(np.asarray(result.steps), np.asarray(intact.steps)), result.steps
        assert result.config == intact.config, "the config differs from the run's"
        assert set(result.curves) == set(intact.curves), set(result.curves) ^ set(intact.curves)
        for k, v in intact.curves.items():
            close(result.curves[k], v, k, rtol=0, atol=0)
        for k in ("directions",):
            if k in intact.extra or k in result.extra:
                assert list(result.extra.get(k, [])) == list(intact.extra.get(k, [])), (
                    k,
                    result.extra.get(k),
                )

    words = [
        "results.json",
        "curves.npz",
        "directions.npz",
        "directions",
        "heads",
        "steps",
        "train_loss",
        "diverged_at",
        "config",
        "config_hash",
        "damaged",
        "edited",
        str(folder),
    ]
    decide(lambda: load_results(folder), words, same)


def test_load_results_intact(run_folder):
    """The control: an intact folder loads with its heads, steps and a finite train loss."""
    from dynamics import load_results

    r = load_results(run_folder)
    assert list(r.heads) == [1, 2] and list(r.steps) == [0, 1, 2]
    assert np.all(np.isfinite(r.curves["train_loss"]))
    assert np.isclose(r.curves["train_loss"][0, 0, 0], r.curves["train_loss"][0, 0, 0])


# --------------------------------------------------------------------------- the model functions


MODEL_FN = {
    "attention_scores_wrong_d": (
        lambda d: d.attention_scores({"W": jnp.zeros((1, 4, 4))}, jnp.zeros((2, 3, 5)), "first"),
        ["d", "X", "W", "5", "4"],
    ),
    "logits_int_X": (
        lambda d: d.logits(
            {"U": jnp.zeros((1, 4)), "W": jnp.zeros((1, 4, 4))},
            jnp.zeros((2, 3, 4), jnp.int32),
            query="first",
        ),
        ["X", "int32", "floating"],
    ),
    "init_params_zero_heads": (
        lambda d: d.init_params(jax.random.PRNGKey(0), 0, 4, init="normal", scale=1.0),
        ["n_heads", "0"],
    ),
    "init_params_nan_scale": (
        lambda d: d.init_params(jax.random.PRNGKey(0), 2, 4, init="normal", scale=float("nan")),
        ["scale", "nan"],
    ),
    "init_params_bool_d": (
        lambda d: d.init_params(jax.random.PRNGKey(0), 2, True, init="normal", scale=1.0),
        ["d", "True", "bool"],
    ),
    "head_norm_zero": (lambda d: d.head_norm(0, "sqrt"), ["n_heads", "0"]),
    "head_norm_bad_norm": (lambda d: d.head_norm(2, "cube"), ["norm", "cube"]),
    "mean_loss_empty": (lambda d: d.mean_loss(jnp.zeros((0,)), "logistic"), ["z", "empty"]),
    "mean_loss_bad_name": (lambda d: d.mean_loss(jnp.zeros((3,)), "logisitc"), ["loss", "logisitc"]),
    "error_rate_empty": (lambda d: d.error_rate(jnp.zeros((0,))), ["z", "empty"]),
    "margin_loss_complex": (
        lambda d: d.margin_loss(jnp.zeros((3,), jnp.complex64), "logistic"),
        ["z", "complex"],
    ),
    "param_count_zero_d": (lambda d: d.param_count(2, 0, "full", "split"), ["d", "0"]),
}


@pytest.mark.parametrize("kind", sorted(MODEL_FN))
def test_model_functions_refuse(kind):
    """The exported model functions check their arguments (the guide's table)."""
    import dynamics

    fn, words = MODEL_FN[kind]
    decide(lambda: fn(dynamics), words, None)


MODEL_NUMBERS = {"first": "first", "last": "last", "all": "all"}


@pytest.mark.parametrize("query", sorted(MODEL_NUMBERS))
@pytest.mark.parametrize("norm", ["sqrt", "mean", "sum"])
def test_logits_numbers(query, norm):
    """``dynamics.logits`` equals the documented Φ in numpy for random θ (H = 2)."""
    import dynamics

    p = {"U": P0["U"][:2].astype(np.float32), "W": P0["W"][:2].astype(np.float32)}
    got = dynamics.logits(
        {k: jnp.asarray(v) for k, v in p.items()}, jnp.asarray(XB[:5]), query=query, norm=norm
    )
    close(got, R.phi(p, XB[:5], query=query, norm=norm), f"Φ query={query} norm={norm}", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("loss", ["logistic", "exp", "hinge2", "square"])
def test_margin_loss_numbers(loss):
    import dynamics

    z = np.linspace(-3, 3, 13).astype(np.float32)
    close(dynamics.margin_loss(jnp.asarray(z), loss), R.LOSSES[loss](z.astype(np.float64)), loss, rtol=1e-5)
    close(dynamics.error_rate(jnp.asarray(z)), np.mean(z <= 0), "error_rate")


def test_refusal_rule_self_check():
    """The deciding rule itself: a deep JAX error is not a refusal; a named ValueError is."""
    try:
        jnp.zeros((2, 3)) @ jnp.zeros((2, 3))
    except Exception as e:  # noqa: BLE001
        assert refusal(e, ["x"]) != ""
    assert refusal(ValueError("n_train=0 must be >= 1"), ["n_train"]) == ""
    with pytest.raises(Accepted):
        decide(lambda: 1, ["x"], None)
    assert zipfile  # used by load_results' damage cases through the files they write
