"""What several test files build: a small config, data files, curve comparisons and the command
line's errors checked in this process.

``small(**knobs)`` is the one small config of the engine tests (24 training examples of 5 tokens
in 8 dimensions, 12 steps, H = 1 and 3, two trials): tests that keep its shapes share compiled
programs (the programs are cached per process and on disk for the whole session).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest

from dynamics import parts
from dynamics.config.schema import Config, DataConfig, ModelConfig, OptimConfig, SweepConfig
from dynamics.core import losses, model

ROOT = Path(__file__).resolve().parents[1]
# Config().hash(): the default run's config hash. It changes only with NUMERICS_VERSION (last: 4)
# or a deliberate change of what is hashed; adding a knob at its default must leave it.
DEFAULT_CONFIG_HASH = "1e79a632434b9561"


def child_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a process a test starts (``benchmarks.child_env`` for this repository):
    ``base`` (default the test's own environment), the repository first on PYTHONPATH and the
    inherited PYTHONPATH after it (packages installed with --target, as on a GPU machine)."""
    from benchmarks import child_env as env_for

    return env_for(ROOT, base, **extra)


LEVEL_FLAG = "--xla_backend_optimization_level"  # conftest.py sets it to 0 for the tests


def at_users_level(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process that compiles at XLA's default optimisation level, the users' (the
    tests' level 0 taken out of XLA_FLAGS; conftest.py): for a child whose time is long runs
    rather than compiles (level 0's code runs them 2-3x slower), and whose numbers are compared
    only with those of processes at the same level."""
    kept = " ".join(f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(LEVEL_FLAG))
    return {**env, "XLA_FLAGS": kept, "MHSIM_TEST_XLA": "default"}


def kernel_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a notebook kernel the tests start (headless, or in JupyterLab): the users' level,
    and under pytest JAX's persistent cache in the tests' cache folder (conftest.py), every program
    however fast it compiled, so that whichever run of a notebook comes second loads the first's
    programs (and still runs them all)."""
    env = at_users_level(env)
    if env.get("MHSIM_TEST_CACHE_DIR"):
        env.update(
            JAX_COMPILATION_CACHE_DIR=env["MHSIM_TEST_CACHE_DIR"],
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
        )
    return env


SECTIONS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "sweep": SweepConfig}
DEFAULTS = {
    "data": dict(n_train=24, n_test=30, T=5, d=8, n_irrelevant=2),
    "model": {},
    "optim": dict(steps=12),
    "sweep": dict(heads=(1, 3), trials=2, log_every=4),
}


def section_of(field: str) -> str:
    """The config section that has the field ``field`` (a data model's parameter: "data")."""
    for name, cls in SECTIONS.items():
        if field in {f.name for f in dataclasses.fields(cls)}:
            return name
    return "data"  # a data model's own parameter (zeta, r, ...): DataConfig takes it by name


def small(**knobs) -> Config:
    """The small config with ``knobs`` (field names of any section) replaced. The step size is
    0.5 for GD-like optimisers and 0.05 for Adam unless given; a minibatch optimiser gets B = 8
    (three batches an epoch) and a regression loss a small regression data set."""
    sections = {name: dict(values) for name, values in DEFAULTS.items()}
    for field, value in knobs.items():
        sections[section_of(field)][field] = value
    optim = sections["optim"]
    optimizer = optim.setdefault("optimizer", "gd")
    optim.setdefault("lr", 0.05 if optimizer == "adam" else 0.5)
    if parts.OPTIMIZERS[optimizer].minibatch:
        optim.setdefault("batch_size", 8)
    if "loss" in optim and parts.LOSSES[optim["loss"]].task == "regression" and "model" not in knobs:
        sections["data"] = dict(model="npz", path=regression_file(tempfile.mkdtemp()))
    return Config(**{name: SECTIONS[name](**values) for name, values in sections.items()})


def fail_after_first_point(monkeypatch) -> None:
    """``run_sweep`` (``dynamics.sweeps.sweep``) made to raise ValueError("a failure after the first
    point") once its first point has been handed on: a run that fails midway."""
    import dynamics.sweeps.sweep

    real = dynamics.sweeps.sweep.run_sweep

    def fails_after_one_point(exp, *, on_point, **kw):
        def first_then_fail(*a):
            on_point(*a)
            raise ValueError("a failure after the first point")

        return real(exp, on_point=first_then_fail, **kw)

    monkeypatch.setattr(dynamics.sweeps.sweep, "run_sweep", fails_after_one_point)


def replace(cfg: Config, **fields) -> Config:
    """``cfg`` with fields of any section replaced (``replace(cfg, fast_path=False, heads=(3,))``)."""
    changes: dict[str, dict] = {}
    for field, value in fields.items():
        changes.setdefault(section_of(field), {})[field] = value
    return dataclasses.replace(
        cfg, **{name: dataclasses.replace(getattr(cfg, name), **kw) for name, kw in changes.items()}
    )


def regression_file(folder) -> str:
    """Real-valued targets of a small token data set (an .npz of regression data), shaped as
    ``small()``'s data: 24 training and 30 test examples of 5 tokens in 8 dimensions."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(54, 5, 8)).astype(np.float32)
    y = X[:, :, 0].mean(axis=1) + 0.1 * rng.normal(size=54)
    path = f"{folder}/regression.npz"
    np.savez(path, X_train=X[:24], y_train=y[:24], X_test=X[24:], y_test=y[24:])
    return path


def npz(folder, y_train, y_test, T=3, d=4, name="data.npz") -> str:
    """An .npz data set with the given targets and standard normal tokens."""
    rng = np.random.default_rng(0)
    path = Path(folder) / name
    X = rng.normal(size=(len(y_train) + len(y_test), T, d)).astype(np.float32)
    np.savez(path, X_train=X[: len(y_train)], y_train=y_train, X_test=X[len(y_train) :], y_test=y_test)
    return str(path)


def assert_curves_close(a, b, what: str = "", rtol=1e-4, atol=1e-5) -> None:
    """Every curve of two results agrees (NaN where the other is NaN), ``atol`` relative to the
    curve's largest finite value (float32 rounding grows with the step)."""
    assert set(a.curves) == set(b.curves), what
    for name in a.curves:
        finite = np.abs(b.curves[name])[np.isfinite(b.curves[name])]  # all NaN: unknown (attn_relevant)
        scale = max(float(finite.max()) if finite.size else 0.0, 1.0)
        np.testing.assert_allclose(
            a.curves[name], b.curves[name], rtol=rtol, atol=atol * scale, err_msg=f"{what}: {name}"
        )


def cli_error(argv, capsys, tmp_path) -> str:
    """Run ``python -m dynamics.run ARGV --out OUT`` in this process (dynamics.cli.run.main) with
    ``tmp_path`` as the working folder; assert it exits with status 2, prints one line on stderr
    and writes nothing; return that line."""
    from dynamics.cli import run as cli

    out = Path(tmp_path) / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        try:
            code = cli.main([*argv, "--out", str(out)])
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert not out.exists()
    return lines[0]


def cli_run(argv, capsys, cwd) -> tuple[int, str, str]:
    """Run ``python -m dynamics.run ARGV`` in this process (dynamics.cli.run.main) with ``cwd`` as
    the working folder: its exit status, stdout and stderr. The same code as the command in a
    fresh interpreter (test_cold_start and test_resume run it there), without paying for a new
    interpreter, its imports and its compiles."""
    from dynamics.cli import run as cli

    capsys.readouterr()  # what ran before
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        try:
            code = cli.main(list(argv))
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


# mhsim's numbers are bit for bit the same whatever the batch, packing or resume on the CPU. On a GPU
# XLA picks kernels (and their reduction order) by the batch's shape, and its transcendental
# functions round differently from the CPU's: the same numbers to float32 rounding, not bit for bit.
BITWISE = jax.default_backend() == "cpu"

# The tests' own jitted programs (references, inputs, checks) compile at XLA:CPU's backend
# optimisation level 0 even when the session runs the library at the users' level
# (MHSIM_TEST_XLA=default; conftest.py): a random draw's program 3-5x faster. Its numbers may
# differ from the default level's in the last bits, so a bit-for-bit comparison compares two
# programs of the same level; comparisons with the library's numbers keep their tolerances.
# Off the CPU, the default. Use: jax.jit(f, compiler_options=FAST_COMPILE).
FAST_COMPILE = {"xla_backend_optimization_level": 0} if BITWISE else None


@functools.partial(jax.jit, static_argnames=("query", "norm", "activation", "beta"))
def logits_and_mse_grad(params, X, y, *, query, norm, activation="softmax", beta=1.0):
    """Φ(X) and (the mse of Φ − y, its gradient) through the model's own ``logits``, in one compiled
    program (op by op, some 30-70 programs); β static, a Python number (β = 1 leaves the scores
    as they are)."""

    def objective(p):
        phi = model.logits(p, X, query=query, norm=norm, activation=activation, beta=beta)
        return losses.mean_loss(phi - y, "mse")

    phi = model.logits(params, X, query=query, norm=norm, activation=activation, beta=beta)
    return phi, jax.value_and_grad(objective)(params)


# Whether this process compiles at XLA's default optimisation level, the one users run (conftest.py
# sets level 0 for the tests unless MHSIM_TEST_XLA=default; tests/test_users_level.py runs the
# tests below that depend on it at the default level).
USERS_LEVEL = LEVEL_FLAG not in os.environ.get("XLA_FLAGS", "")


def assert_users_numbers(a, b, err_msg: str = "") -> None:
    """``a`` equals ``b``, numbers stored from a run at the users' optimisation level: as
    ``assert_same_numbers`` when this process compiles at that level; else (the tests' level 0,
    whose programs may round differently in the last bits) to float32 rounding, a few ulps."""
    if USERS_LEVEL:
        assert_same_numbers(a, b, err_msg=err_msg)
        return
    _to_float32_rounding(a, b, err_msg)


def assert_same_numbers(a, b, err_msg: str = "") -> None:
    """Bit for bit on the CPU; to float32 rounding (a few ulps, grown over a short run) on a GPU."""
    if BITWISE:
        np.testing.assert_array_equal(a, b, err_msg=err_msg)
    else:
        _to_float32_rounding(a, b, err_msg)


def _to_float32_rounding(a, b, err_msg: str) -> None:
    """Equal integers; floats to a few float32 ulps of the arrays' scale."""
    a, b = np.asarray(a), np.asarray(b)
    if not np.issubdtype(b.dtype, np.inexact):
        np.testing.assert_array_equal(a, b, err_msg=err_msg)
    else:
        scale = float(np.nanmax(np.abs(b), initial=0.0))
        atol = 4 * np.finfo(np.float32).eps * scale
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=atol, err_msg=err_msg)


def fd_grad(f, params: dict[str, np.ndarray], eps: float = 1e-6) -> dict[str, np.ndarray]:
    """Central finite differences of a float64 numpy function of a dict of arrays."""
    grads = {}
    for name, value in params.items():
        g = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            g[idx] = (f(plus) - f(minus)) / (2 * eps)
        grads[name] = g
    return grads
