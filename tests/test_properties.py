"""The engine's properties, each in one place, parametrised from the registries of ``dynamics.parts``
(a newly registered part is covered without editing this file):

- the fast path (one stored head standing for H identical heads) gives the full path's numbers;
- a run packed with runs of other H gives the numbers of the run alone;
- every part, with every optimiser, trains as an independent float64 reference does.

Each case combines one part of every registry, rotated so that every part meets every optimiser
(a covering of the pairs part × optimiser in a few runs rather than one run per pair)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_curves_close, replace, small

from dynamics import parts
from dynamics.config.schema import Config, DataConfig, ModelConfig, OptimConfig, SweepConfig, validate
from dynamics.core import engine, sampling
from dynamics.sweeps.execute import ZeroStepWarning
from dynamics.sweeps.sweep import run_sweep, trial_keys


def rotate(items, i):
    items = list(items)
    return items[i % len(items)]


def covering(optimizers, rounds, pick):
    """[(id, knobs)]: for each optimiser, ``rounds(optimizer)`` cases ``pick(optimizer, i)``."""
    cases = []
    for o, optimizer in enumerate(optimizers):
        for i in range(rounds(optimizer)):
            knobs = {"optimizer": optimizer, **pick(o, i)}
            cases.append(("-".join(f"{k}={v}" for k, v in knobs.items()), knobs))
    return cases


# ---------------------------------------------------------------------------------------------
# The fast path gives the full path's numbers.

PER_COORDINATE = [name for name, p in parts.OPTIMIZERS.items() if p.per_coordinate]
# The token-reading queries; the position query (logits per position, tests/test_position_query.py
# against its own float64 reference and numpy GD loop) is not yet in these coverings.
QUERIES = {n: q for n, q in parts.QUERIES.items() if not q.positional}
FAST = {  # every part whose rule allows the fast path (zero init: no saddle there)
    "query": [n for n, p in QUERIES.items() if p.fast_path],
    "norm": [n for n, p in parts.NORMS.items() if p.fast_path],
    "attention": [n for n, p in parts.ACTIVATIONS.items() if p.fast_path and not p.saddle_at_zero],
    "loss": list(parts.LOSSES),
    "lr_scaling": list(parts.LR_SCALINGS),
    "bias": [False, True],  # one scalar per run: its gradient is the run's own, never divided by H
    "temperature": [1.0, 0.7],
}


def _fast_pick(o, i):
    return {field: rotate(names, i + o) for field, names in FAST.items()}


FAST_ROUNDS = max(map(len, FAST.values()))
FAST_CASES = covering(PER_COORDINATE, lambda _: FAST_ROUNDS, _fast_pick)
# The parameter groups' rules (step factors, ranges, weight decay), per-head metrics with the saved
# θ and the temperature's decay: options rather than parts, each once, in float64 to 1e-9. Each
# rides on a case of the covering above (round r of its optimiser), which then runs in float64
# with it: one pair of programs (fast, full) checks both, the case's parts to 1e-9 rather than to
# float32 rounding.
FAST_OPTIONS = {  # name: (optimiser, round, options)
    "gd-groups": ("gd", 0, dict(readout_lr_factor=3.0, attention_steps=(1, 6), readout_weight_decay=0.1)),
    "head-metrics": ("gd", 1, dict(head_metrics="on", save_params=True)),
    "adamw-groups": ("adam", 0, dict(readout_steps=(0, 3), attention_weight_decay=0.4)),
    "temperature": ("adam", 4, dict(temperature_decay=0.1)),  # on a round with temperature 0.7
    # (round 0, sum over heads at η·H, grows its test loss to 1e2: float64 rounding then 3e-9 apart)
    "sgd-decay": ("sgd", 1, dict(attention_weight_decay=0.4)),
}
_WITH_OPTIONS = {
    PER_COORDINATE.index(optimizer) * FAST_ROUNDS + r: name
    for name, (optimizer, r, _) in FAST_OPTIONS.items()
}
FAST_FLOAT32 = [case for j, case in enumerate(FAST_CASES) if j not in _WITH_OPTIONS]
FAST_FLOAT64 = {name: {**FAST_CASES[j][1], **FAST_OPTIONS[name][2]} for j, name in _WITH_OPTIONS.items()}


@pytest.mark.slow_cases(
    "optimizer=gd-query=learned-norm=sqrt-attention=softmax-loss=square-lr_scaling=constant-bias=True-temperature=0.7",
)
@pytest.mark.parametrize("knobs", [k for _, k in FAST_FLOAT32], ids=[i for i, _ in FAST_FLOAT32])
def test_the_fast_path_gives_the_full_paths_numbers(knobs):
    cfg = small(**knobs)
    assert parts.uses_fast_path(cfg)
    full = replace(cfg, fast_path=False)
    assert not parts.uses_fast_path(full)
    fast = run_sweep(cfg, progress=False)
    assert_curves_close(fast, run_sweep(full, progress=False), str(knobs))
    assert np.isfinite(fast.curves["train_loss"]).all()


@pytest.mark.slow_cases("sgd-decay")
@pytest.mark.parametrize("case", list(FAST_FLOAT64))
def test_the_fast_path_holds_with_the_group_rules_and_the_options(case):
    cfg = small(**FAST_FLOAT64[case])
    assert parts.uses_fast_path(cfg)
    with jax.enable_x64(True):
        fast, full = run_sweep(cfg, progress=False), run_sweep(replace(cfg, fast_path=False), progress=False)
    assert_curves_close(fast, full, f"{case}: {FAST_FLOAT64[case]}", rtol=1e-9, atol=1e-12)
    assert set(fast.params) == set(full.params)
    for name in fast.params:  # saved θ: the one stored head of weight H is every head of the full path
        np.testing.assert_allclose(fast.params[name], full.params[name], rtol=1e-9, atol=1e-12)
    assert np.all(fast.diverged_at == -1) and np.isfinite(fast.curves["train_loss"]).all()
    if "head_u_sim" in fast.curves:  # at step 0 every head is zero: no direction, the cosines NaN
        assert np.all(np.isnan(fast.curves["head_u_sim"][:, :, 0]))


def test_the_fast_path_needs_every_rule():
    assert parts.uses_fast_path(small())
    assert not parts.uses_fast_path(small(fast_path=False))
    assert not parts.uses_fast_path(small(init="normal"))  # not symmetric
    assert not parts.uses_fast_path(small(init="normal", key_query="factored"))
    for name, init in parts.INITS.items():
        assert parts.uses_fast_path(small(init=name)) == init.symmetric
    for name, optimizer in parts.OPTIMIZERS.items():
        assert parts.uses_fast_path(small(optimizer=name)) == optimizer.per_coordinate


# ---------------------------------------------------------------------------------------------
# A run packed with runs of other H gives the numbers of the run alone.

PACK = {  # every part, with random (distinct) heads
    "query": list(QUERIES),
    "norm": list(parts.NORMS),
    "attention": list(parts.ACTIVATIONS),
    "lr_scaling": list(parts.LR_SCALINGS),
}
OPTIONS = [
    {},
    {"bias": True, "attention_weight_decay": 0.2},
    {"readout_lr_factor": 2.0, "attention_steps": (2, 8)},
]


def _pack_rounds(optimizer):
    return len(parts.SAMPLINGS) if parts.OPTIMIZERS[optimizer].minibatch else 2


def _pack_pick(o, i):
    knobs = {field: rotate(names, 2 * o + i) for field, names in PACK.items()}
    if parts.OPTIMIZERS[list(parts.OPTIMIZERS)[o]].minibatch:
        knobs["sampling"] = rotate(parts.SAMPLINGS, i)  # online: fresh batches of the trial's world
    return {"init": "normal", **knobs, **rotate(OPTIONS, o + i)}


PACK_CASES = covering(list(parts.OPTIMIZERS), _pack_rounds, _pack_pick)


def _alone(cfg, h: int):
    """``cfg`` with H = h alone. At H = 1 a step-size scaling changes nothing (η₀·1^p = η₀), nor
    does a head normalisation (c_1 = 1), and both are refused as given: the run alone takes the
    defaults, the same step and the same Φ."""
    alone = replace(cfg, heads=(h,))
    if h != 1:
        return alone
    default = replace(alone, lr_scaling="constant", norm="sqrt")
    return dataclasses.replace(default, given=alone.given - {"optim.lr_scaling", "model.norm"})


# A pack and a run alone are two compiled programs with different head-slot counts S, and XLA
# accumulates a dot's products in an order that depends on its shape: the query scores
# x_sᵀ W_h x_t of query "all" (einsum nhte,nse->nhst, a batched dot over e) are one chain of
# fused multiply-adds over e at S = 4 and four interleaved chains (e, e + 4) added pairwise at
# S = 1. So the two agree to float32 rounding, not to the bit (every case: 1e-7 relative within
# two steps; hence rtol 1e-5). The cases below carry that rounding forward undamped: normalised
# GD moves exactly η per step in g's direction, and near the minimum its loss bounces (0.29,
# 0.25, 0.43, 0.24, 0.40 at steps 8 to 12), so a rounding apart grows ~10-fold a step, to 6e-5
# relative at step 12, where the run alone is itself 5e-5 from its float64 self (the packed run
# 1.2e-5). They are compared in x64, where the pack and the run alone agree to 1e-13, so that a
# difference of the arithmetic (a padded head in a norm, a decay across runs) shows at 1e-9.
PACK_IN_X64 = {
    "optimizer=normalized-gd-init=normal-query=all-norm=mean-attention=linear-lr_scaling=sqrt-bias=True-"
    "attention_weight_decay=0.2": "normalised GD bouncing near its minimum: float32 rounding grows 1e3-fold",
}


@pytest.mark.slow_cases(
    "optimizer=gd-init=normal-query=first-norm=sqrt-attention=softmax-lr_scaling=constant",
)
@pytest.mark.parametrize("case_id, knobs", PACK_CASES, ids=[i for i, _ in PACK_CASES])
def test_a_run_in_a_pack_gives_the_numbers_of_the_run_alone(case_id, knobs):
    cfg = small(**knobs, head_metrics="off")  # the metrics below only: a smaller program
    assert parts.can_pack_heads(cfg) and not parts.uses_fast_path(cfg)
    x64 = case_id in PACK_IN_X64
    rtol, atol = (1e-9, 1e-12) if x64 else (1e-5, 1e-6)
    with jax.enable_x64(x64):
        packed = run_sweep(cfg, progress=False, slots=4)  # H = 1 and 3 in one pack of 4 slots
        alone = [run_sweep(_alone(cfg, h), progress=False) for h in cfg.sweep.heads]
    for i, h in enumerate(cfg.sweep.heads):
        np.testing.assert_array_equal(packed.diverged_at[i], alone[i].diverged_at[0])
        for name in engine.METRICS:
            np.testing.assert_allclose(
                packed.curves[name][i],
                alone[i].curves[name][0],
                rtol=rtol,
                atol=atol,
                err_msg=f"H={h} {name} {PACK_IN_X64.get(case_id, '')}",
            )
    assert not np.allclose(packed.curves["train_loss"][0], packed.curves["train_loss"][1])  # H differ


@pytest.mark.slow
def test_the_default_packing_gives_the_numbers_of_one_pack():
    """H = 1, 2, 3 in the default packs (two) and in one pack of 6 slots: the same runs."""
    cfg = small(init="normal", optimizer="adam", heads=(1, 2, 3), head_metrics="off")
    default, one_pack = run_sweep(cfg, progress=False), run_sweep(cfg, progress=False, slots=6)
    for name in engine.METRICS:
        np.testing.assert_allclose(default.curves[name], one_pack.curves[name], rtol=1e-5, atol=1e-6)
    assert np.all(default.curves["diversity"][1:] > 0)  # random heads differ...
    assert np.all(default.curves["diversity"][0] == 0.0)  # ...and H = 1 has no pair of heads


def test_the_packing_rule_of_the_key_query_layouts():
    split = small(init="normal", key_query="factored")
    fixed = small(init="normal", key_query="factored", head_size=2)
    assert not parts.can_pack_heads(split) and parts.can_pack_heads(fixed)
    assert parts.KEY_QUERIES["factored"].head_size("split", 8, 4) == 2
    assert parts.KEY_QUERIES["full"].head_size("split", 8, 4) is None


# ---------------------------------------------------------------------------------------------
# Every part with every optimiser trains as a float64 reference does: Φ written head by head
# with its own einsums, jax.grad of it, and each optimiser's rule redone by hand, from the same
# θ(0) (--init-from) on a data file; the engine in float64 (x64) agrees to 1e-5 at every step.

N, M, T, D, H, STEPS = 12, 9, 4, 3, 2, 40
SIGMA = {
    "softmax": lambda s: jnp.exp(s - s.max()) / jnp.sum(jnp.exp(s - s.max())),
    "softmax1": lambda s: jnp.exp(s) / (1.0 + jnp.sum(jnp.exp(s))),
    "linear": lambda s: s,
    "sigmoid": lambda s: 1.0 / (1.0 + jnp.exp(-s)),
    "erf": jax.scipy.special.erf,
}
LOSS = {
    "logistic": lambda phi, y: jnp.mean(jnp.logaddexp(0.0, -y * phi)),
    "exp": lambda phi, y: jnp.mean(jnp.exp(-y * phi)),
    "hinge2": lambda phi, y: jnp.mean(jnp.maximum(0.0, 1.0 - y * phi) ** 2),
    "square": lambda phi, y: jnp.mean((1.0 - y * phi) ** 2),
    "mse": lambda phi, y: jnp.mean((phi - y) ** 2),
}
C_H = {"sqrt": 1 / np.sqrt(H), "mean": 1 / H, "sum": 1.0}
LR = {"gd": 0.1, "sgd": 0.1, "adam": 0.02, "normalized-gd": 0.1, "adam-minibatch": 0.02}
BATCH = 4  # of N = 12: three batches an epoch


def lr_of(case) -> float:
    """A linear σ makes Φ cubic in θ: a fifth of the step stays finite (Adam's steps are its own)."""
    slow = case["attention"] == "linear" and not case["optimizer"].startswith("adam")
    return LR[case["optimizer"]] / (5 if slow else 1)


def _reference_pick(o, i):
    # the query's offset from the activation: one per optimiser, and where the queries outnumber the
    # optimisers, the first optimisers' second rounds take the offsets left (every pair once)
    offset = o + len(parts.OPTIMIZERS) * (i // _reference_base())
    return {
        "attention": rotate(parts.ACTIVATIONS, i),
        "query": rotate(QUERIES, i + offset),
        "loss": rotate(parts.LOSSES, i + 3 * o),  # (i + 2o drew exp with linear σ under SGD: diverges)
        "norm": rotate(parts.NORMS, i + o),
        "bias": bool((i + o) % 2),
        "temperature": rotate([1.0, 0.7], i // 2),
    }


def _reference_base() -> int:
    return max(len(parts.ACTIVATIONS), len(QUERIES), len(parts.LOSSES), len(parts.NORMS))


def _reference_rounds(optimizer):
    second = list(parts.OPTIMIZERS).index(optimizer) < len(QUERIES) - len(parts.OPTIMIZERS)
    return _reference_base() * (2 if second else 1)


REFERENCE_CASES = covering(list(parts.OPTIMIZERS), _reference_rounds, _reference_pick)


def write_problem(folder, query: str, bias: bool, regression: bool, seed: int = 0):
    """An .npz of data (±1 labels, or real targets) and one of θ(0): (data path, init path)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N + M, T, D)).astype(np.float32)
    if regression:
        y = (X[:, 0, 0] - 0.5 * X[:, -1, 1] + 0.1 * rng.normal(size=N + M)).astype(np.float32)
    else:
        y = np.where(X[:, :, 0].sum(axis=1) > 0, 1.0, -1.0).astype(np.float32)
    data = folder / "data.npz"
    np.savez(data, X_train=X[:N], y_train=y[:N], X_test=X[N:], y_test=y[N:])
    theta = {"U": 0.5 * rng.normal(size=(H, D))}
    if query == "learned":
        theta["k"] = 0.5 * rng.normal(size=(H, D))
    else:
        theta["W"] = 0.5 * rng.normal(size=(H, D, D))
    if bias:
        theta["b"] = np.float64(0.2)
    init = folder / "theta.npz"
    np.savez(init, **theta)
    return data, init


def phi_reference(theta, X, case):
    """Φ(X) = c_H Σ_h Σ_t σ(β s_h)_t U_hᵀ x_t + b, one example and one head at a time; the query
    "all" averages the heads' outputs over every token as the query; "outside": x_T queries the
    context tokens x_1..x_{T-1} alone."""
    query, beta = case["query"], case["temperature"]

    def one(x):  # x (T, D)
        total = 0.0
        q_last, keys = x[-1], (x[:-1] if query == "outside" else x)  # (D,), (T or T-1, D)
        for h in range(H):
            if query == "learned":
                scores = [x @ theta["k"][h]]
            else:
                queries = {"first": [x[0]], "last": [q_last], "all": list(x), "outside": [q_last]}[query]
                scores = [keys @ (theta["W"][h] @ q) for q in queries]
            for s in scores:
                total = total + SIGMA[case["attention"]](beta * s) @ (keys @ theta["U"][h]) / len(scores)
        return C_H[case["norm"]] * total + theta.get("b", 0.0)

    return jax.vmap(one)(X)


def reference_batches(cfg: Config) -> list[np.ndarray]:
    """SGD's indices per update (epochs), from jax.random's own keys (not the engine's Threefry copy)."""
    key = jax.random.fold_in(
        jax.random.wrap_key_data(jnp.asarray(trial_keys(cfg)[0])), sampling.MINIBATCH_STREAM
    )
    out = []
    for t in range(STEPS):
        e, i = divmod(t, N // BATCH)
        out.append(
            np.asarray(jax.random.permutation(jax.random.fold_in(key, e), N))[i * BATCH : (i + 1) * BATCH]
        )
    return out


def reference_curves(cfg, data, init, case):
    """Train and test loss at steps 0..STEPS of the optimiser's rule, in float64, and the first
    update whose gradient is exactly 0 (None if none): normalised GD stands still there."""
    optimizer, lr = case["optimizer"], lr_of(case)
    with jax.enable_x64(True):
        z = np.load(data)
        Xtr, ytr, Xte, yte = (
            jnp.asarray(z[k], jnp.float64) for k in ("X_train", "y_train", "X_test", "y_test")
        )
        theta = {k: jnp.asarray(v, jnp.float64) for k, v in np.load(init).items()}
        batches = reference_batches(cfg) if parts.OPTIMIZERS[optimizer].minibatch else None

        def risk(th, X, y):
            return LOSS[case["loss"]](phi_reference(th, X, case), y)

        @jax.jit  # one plain step at a time (the loop below), one compiled program per case
        def step(theta, m, v2, t, idx):
            """The train and test loss at θ, and θ, m, v after update t on the examples idx; ‖g‖."""
            losses = risk(theta, Xtr, ytr), risk(theta, Xte, yte)
            g = jax.grad(risk)(theta, Xtr[idx], ytr[idx])
            norm = jnp.sqrt(sum(jnp.sum(x**2) for x in g.values()))
            if optimizer == "normalized-gd":  # the run's whole gradient to norm 1; at g = 0 no step
                g = {k: x / jnp.where(norm > 0, norm, 1.0) for k, x in g.items()}
            if optimizer.startswith("adam"):  # adam, adam-minibatch
                b1, b2, eps = 0.9, 0.999, 1e-8
                m = {k: b1 * m[k] + (1 - b1) * g[k] for k in g}
                v2 = {k: b2 * v2[k] + (1 - b2) * g[k] ** 2 for k in g}
                g = {
                    k: (m[k] / (1 - b1 ** (t + 1))) / (jnp.sqrt(v2[k] / (1 - b2 ** (t + 1))) + eps) for k in g
                }
            return {k: theta[k] - lr * g[k] for k in theta}, m, v2, losses, norm

        m = {k: jnp.zeros_like(v) for k, v in theta.items()}
        v2 = {k: jnp.zeros_like(v) for k, v in theta.items()}
        train, test, zero = [], [], None
        for t in range(STEPS + 1):  # the update after the last step is not used, its losses are
            idx = batches[min(t, STEPS - 1)] if batches is not None else np.arange(N)
            theta_next, m, v2, (tr, te), norm = step(theta, m, v2, jnp.float64(t), jnp.asarray(idx))
            train.append(float(tr))
            test.append(float(te))
            if zero is None and t < STEPS and float(norm) == 0.0:
                zero = t
            theta = theta_next
    return np.array(train), np.array(test), zero


def reference_config(data, init, case) -> Config:
    optim = dict(optimizer=case["optimizer"], lr=lr_of(case), steps=STEPS, loss=case["loss"])
    if parts.OPTIMIZERS[case["optimizer"]].minibatch:
        optim["batch_size"] = BATCH
    model = {k: case[k] for k in ("query", "attention", "norm", "bias", "temperature")}
    return Config(
        data=DataConfig(model="npz", path=str(data)),
        model=ModelConfig(init_from=str(init), **model),
        optim=OptimConfig(**optim),
        # the losses alone are compared: no per-head metrics, a smaller program
        sweep=SweepConfig(heads=(H,), trials=1, log_every=1, head_metrics="off"),
    )


@pytest.mark.slow_cases(
    "optimizer=gd-attention=softmax-query=first-loss=logistic-norm=sqrt-bias=False-temperature=1.0",
    "optimizer=sgd-attention=sigmoid-query=first-loss=mse-norm=sum-bias=True-temperature=0.7",
    "optimizer=normalized-gd-attention=softmax1-query=outside-loss=logistic-norm=mean-bias=False-temperature=1.0",
    "optimizer=adam-attention=linear-query=learned-loss=logistic-norm=sqrt-bias=True-temperature=0.7",
    "optimizer=adam-minibatch-attention=linear-query=last-loss=mse-norm=sqrt-bias=False-temperature=0.7",
)
@pytest.mark.parametrize("case", [k for _, k in REFERENCE_CASES], ids=[i for i, _ in REFERENCE_CASES])
def test_every_part_with_every_optimiser_trains_as_the_float64_reference(tmp_path, case):
    regression = parts.LOSSES[case["loss"]].task == "regression"
    data, init = write_problem(tmp_path, case["query"], case["bias"], regression)
    cfg = reference_config(data, init, case)
    want_train, want_test, zero = reference_curves(validate(cfg), data, init, case)
    with jax.enable_x64(True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZeroStepWarning)
        result = run_sweep(cfg, progress=False)
    # normalised GD at an exactly zero gradient (g / ‖g‖ undefined) stands still, and says where
    zero_steps = [str(w.message) for w in caught if issubclass(w.category, ZeroStepWarning)]
    if case["optimizer"] == "normalized-gd" and zero is not None:
        assert len(zero_steps) == 1 and f"first at update {zero} (H={H}, trial 0)" in zero_steps[0], (
            zero_steps
        )
    else:
        assert not zero_steps
    assert result.config.optim.task == ("regression" if regression else "classification")
    np.testing.assert_allclose(result.curves["train_loss"][0, 0], want_train, rtol=1e-5)
    np.testing.assert_allclose(result.curves["test_loss"][0, 0], want_test, rtol=1e-5)
    assert want_train[-1] < 0.9 * want_train[0]  # it trained: the comparison is of a moving run


def test_the_coverings_meet_every_part_with_every_optimiser():
    """The rotations above pair every registered part with every optimiser they apply to."""
    reference = {f: list(r) for f, r in [("attention", parts.ACTIVATIONS), ("query", QUERIES),
                 ("loss", parts.LOSSES), ("norm", parts.NORMS)]}  # fmt: skip
    for cases, fields, optimizers in (
        (FAST_CASES, FAST, PER_COORDINATE),
        (REFERENCE_CASES, {**reference, "bias": [False, True]}, list(parts.OPTIMIZERS)),
    ):
        for field, values in fields.items():
            seen = {(k["optimizer"], k[field]) for _, k in cases}
            assert seen == set(itertools.product(optimizers, values)), field
    # every case of the fast covering runs: in float32, or in float64 with one option
    assert len(_WITH_OPTIONS) == len(FAST_OPTIONS)
    assert len(FAST_FLOAT32) + len(FAST_FLOAT64) == len(FAST_CASES)
    assert all(FAST_FLOAT64[name]["optimizer"] == o for name, (o, _, _) in FAST_OPTIONS.items())
    pairs = {(k["attention"], k["query"]) for _, k in REFERENCE_CASES}  # and every activation every query
    assert pairs == set(itertools.product(parts.ACTIVATIONS, QUERIES))
    for field, values in PACK.items():  # packing: every part once, every optimiser
        assert {k[field] for _, k in PACK_CASES} == set(values), field
    assert {k["optimizer"] for _, k in PACK_CASES} == set(parts.OPTIMIZERS)
    assert {k["sampling"] for _, k in PACK_CASES if "sampling" in k} == set(parts.SAMPLINGS)


@pytest.mark.slow
def test_the_command_line_agrees_with_the_reference(tmp_path):
    """python -m dynamics.run --x64 end to end: the file it writes holds the reference's curve."""
    case = dict(optimizer="gd", attention="erf", query="learned", loss="mse", norm="sqrt", bias=True)
    case["temperature"] = 1.0
    data, init = write_problem(tmp_path, "learned", True, regression=True, seed=3)
    want_train, _, _ = reference_curves(validate(reference_config(data, init, case)), data, init, case)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dynamics.run", "--data", str(data), "--init-from", str(init)]
    cmd += ["--heads", "2", "--steps", str(STEPS), "--lr", str(LR["gd"]), "--query", "learned", "--bias"]
    cmd += ["--attention", "erf", "--log-every", "1", "--x64", "--out", str(out), "--no-figure", "--quiet"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    got = np.load(out / "curves.npz")["train_loss"][0, 0]
    np.testing.assert_allclose(got, want_train, rtol=1e-5)
    record = json.loads((out / "results.json").read_text())["config"]
    assert record["optim"]["loss"] == "mse" and record["optim"]["task"] == "regression"
    assert record["model"]["bias"] is True and record["model"]["query"] == "learned"
