"""Tests for datamodels/: shapes, exact structure, moments against stated tolerances,
the planted teacher against a float64 numpy loop, and every .npz failure mode."""

from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FAST_COMPILE, assert_users_numbers

from datamodels import (
    DM1_DEFAULTS,
    GEOMETRIES,
    DataError,
    Teacher,
    UserData,
    class_means,
    dm1,
    load_npz,
    planted,
    planted_teacher,
    teacher_logits,
    tokenized_mixture,
)


def _binomial_tol(p: float, n: int, z: float = 5.0) -> float:
    """z standard deviations of a binomial proportion."""
    return z * math.sqrt(p * (1 - p) / n)


# XLA compiles every op once per shape, and compiling dominates this file's run time,
# so nearly every test draws (n, T, d) = (20000, 10, 32): big enough for moments.
N, T, D = 20_000, 10, 32

# The tests' own jitted programs are compiled at XLA's backend optimisation level 0 on the CPU:
# a program of random draws compiles 3-5x faster (compiling is this file's run time), the same
# traced functions. Its float numbers may differ from the default level's in the last bit: the
# comparisons with an eager draw allow that (rtol 1e-6), and the exact ones compare integers,
# signs or draws of one program. The eager draws, compiled op by op and shared by every test of
# these shapes, stay eager.


@functools.lru_cache(maxsize=4)  # each sample is 51 MB of float64
def _big(geometry="antipodal", M=4, noise=1.0, first_relevant=False, r=None, key=11):
    """An (N, T, D) sample with S = 1.5, as float64 numpy arrays (cached across tests)."""
    X, y, mask = tokenized_mixture(
        jax.random.key(key),
        N,
        T=T,
        d=D,
        r=r,
        signal=1.5,
        noise=noise,
        n_irrelevant=M,
        geometry=geometry,
        first_relevant=first_relevant,
    )
    return np.asarray(X, np.float64), np.asarray(y), np.asarray(mask)


def _draw(key=0, **kwargs):
    """A fresh (N, T, D) draw as jax arrays (uncached: checks structure, not moments)."""
    return tokenized_mixture(jax.random.key(key), N, T=T, d=D, **kwargs)


# --------------------------------------------------------------------------- means


# one compiled program per case (op by op, each of the means' few ops compiled on its own per
# shape); the eager class_means is what the mixture and the moment tests below call
_class_means = jax.jit(
    class_means, static_argnames=("d", "n_irrelevant", "geometry"), compiler_options=FAST_COMPILE
)


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("M", [0, 1, 4])
def test_class_means_exact(geometry, M):
    d, S = M + 3, 2.5
    mu_plus, mu_minus, nu = _class_means(d, signal=S, n_irrelevant=M, geometry=geometry)
    assert mu_plus.shape == mu_minus.shape == (d,)
    assert nu.shape == (M, d)
    assert mu_plus.dtype == mu_minus.dtype == nu.dtype == jnp.float32
    eye = np.eye(d)
    np.testing.assert_array_equal(mu_plus, S * eye[0])
    expected_minus = -S * eye[0] if geometry == "antipodal" else S * eye[1]
    np.testing.assert_array_equal(mu_minus, expected_minus)
    np.testing.assert_array_equal(nu, S * eye[2 : 2 + M])
    # the nu_j have norm S and are orthogonal to each other and to both class means
    nu = np.asarray(nu, np.float64)
    np.testing.assert_allclose(nu @ nu.T, S**2 * np.eye(M))
    np.testing.assert_array_equal(nu @ np.asarray(mu_plus), 0.0)
    np.testing.assert_array_equal(nu @ np.asarray(mu_minus), 0.0)


def test_class_means_needs_d_at_least_M_plus_2():
    _class_means(6, n_irrelevant=4)  # exactly enough (jitted: d = 6 is drawn nowhere else)
    with pytest.raises(ValueError, match=r"d=5 .*M=4.*d >= M \+ 2"):
        class_means(5, n_irrelevant=4)
    with pytest.raises(ValueError, match=r"d=5"):
        tokenized_mixture(jax.random.key(0), 3, d=5, n_irrelevant=4)


# --------------------------------------------------------------------------- mixture


@pytest.mark.slow_cases("antipodal-4-True", "orthogonal-0-False")
@pytest.mark.parametrize(
    "geometry, M, first_relevant",
    list(itertools.product(GEOMETRIES, [0, 4], [False, True])),
)
def test_mixture_shapes_and_dtypes(geometry, M, first_relevant):
    X, y, mask = _draw(r=2, n_irrelevant=M, geometry=geometry, first_relevant=first_relevant)
    assert X.shape == (N, T, D) and X.dtype == jnp.float32
    assert y.shape == (N,) and y.dtype == jnp.float32
    assert mask.shape == (N, T) and mask.dtype == jnp.bool_
    assert set(np.unique(np.asarray(y))) <= {-1.0, 1.0}
    assert np.all(np.isfinite(np.asarray(X)))


def test_label_balance():
    _, y, _ = _big()
    frac = float(np.mean(y == 1.0))
    assert abs(frac - 0.5) < _binomial_tol(0.5, N)


@pytest.mark.parametrize(
    "zeta, r, expected_r",
    [
        (0.1, None, 1),
        (0.3, None, 3),
        (0.0, None, 1),  # r = max(1, ...)
        (0.01, None, 1),
        (0.25, None, 3),  # round half up: 2.5 -> 3
        (1.0, None, 10),
        (0.1, 5, 5),  # r overrides zeta
        (0.1, 10, 10),
    ],
)
@pytest.mark.parametrize("first_relevant", [False, True])
def test_exactly_r_relevant_tokens(zeta, r, expected_r, first_relevant):
    _, _, mask = _draw(zeta=zeta, r=r, first_relevant=first_relevant)
    mask = np.asarray(mask)
    np.testing.assert_array_equal(mask.sum(axis=1), expected_r)
    if first_relevant:
        assert mask[:, 0].all()


# T = 1 draws, of shapes no other test draws: one jitted program each (not op by op)
_single_token = jax.jit(
    tokenized_mixture, static_argnames=("n", "T", "d", "first_relevant"), compiler_options=FAST_COMPILE
)


@pytest.mark.parametrize("first_relevant", [False, True])
def test_single_token_examples(first_relevant):
    X, y, mask = _single_token(jax.random.key(1), N, T=1, d=D, first_relevant=first_relevant)
    assert X.shape == (N, 1, D)
    np.testing.assert_array_equal(mask, True)


@pytest.mark.parametrize("first_relevant, r", [(False, 1), (False, 3), (True, 3)])
def test_relevant_positions_are_uniform(first_relevant, r):
    _, _, mask = _big(first_relevant=first_relevant, r=r)
    freq = mask.mean(axis=0)  # (T,) P(position t is relevant)
    if first_relevant:
        assert freq[0] == 1.0
        freq, p = freq[1:], (r - 1) / (T - 1)
    else:
        p = r / T
    np.testing.assert_array_less(np.abs(freq - p), _binomial_tol(p, N))


def test_relevant_positions_are_independent_of_labels():
    _, y, mask = _big(r=3)
    for label in (-1.0, 1.0):
        rows = mask[y == label]  # (k, T)
        tol = _binomial_tol(0.3, rows.shape[0])
        np.testing.assert_array_less(np.abs(rows.mean(axis=0) - 0.3), tol)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_relevant_token_mean_is_mu_y(geometry):
    X, y, mask = _big(geometry=geometry)
    mu_plus, mu_minus, _ = class_means(D, signal=1.5, geometry=geometry)
    for label, mu in [(1.0, mu_plus), (-1.0, mu_minus)]:
        tokens = X[mask & (y == label)[:, None]]  # (k, d)
        # each coordinate's mean has sd noise / sqrt(d k); allow 5 sd
        tol = 5 * 1.0 / math.sqrt(D * tokens.shape[0])
        np.testing.assert_allclose(tokens.mean(axis=0), np.asarray(mu), atol=tol)


@pytest.mark.parametrize("M", [0, 1, 4])
def test_irrelevant_token_mean_is_mean_of_nu(M):
    X, _, mask = _big(M=M)
    _, _, nu = class_means(D, signal=1.5, n_irrelevant=M)
    nu = np.asarray(nu, np.float64)
    target = nu.mean(axis=0) if M else np.zeros(D)
    tokens = X[~mask]  # (k, d)
    # per coordinate: the variance of the random mean nu_j plus the noise variance
    mean_var = (nu**2).mean(axis=0) - target**2 if M else 0.0
    tol = 5 * np.sqrt((mean_var + 1.0 / D) / tokens.shape[0])
    np.testing.assert_array_less(np.abs(tokens.mean(axis=0) - target), tol)


@pytest.mark.parametrize("noise", [0.5, 2.0])
def test_noise_variance_per_coordinate(noise):
    X, y, mask = _big(geometry="orthogonal", noise=noise)
    mu_plus, mu_minus, _ = class_means(D, signal=1.5, geometry="orthogonal")
    mu_y = np.where(y[:, None] > 0, np.asarray(mu_plus), np.asarray(mu_minus))  # (n, d)
    relevant = (X - mu_y[:, None, :])[mask]  # (k, d) residuals of relevant tokens
    # coordinates >= M + 2 = 6 carry no mean, so irrelevant tokens are pure noise there
    irrelevant = X[~mask][:, 6:]  # (k', d - 6)
    for sample in (relevant, irrelevant):
        k = sample.shape[0]
        # a sample variance of k Gaussians has relative sd sqrt(2 / k); allow 5 sd
        np.testing.assert_allclose(sample.var(axis=0), noise**2 / D, rtol=5 * math.sqrt(2 / k))
        np.testing.assert_allclose(sample.mean(axis=0), 0.0, atol=5 * noise / math.sqrt(D * k))


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("M", [0, 3])
def test_noiseless_tokens_are_exact_means(geometry, M):
    X, y, mask = _big(geometry=geometry, M=M, noise=0.0, r=2)
    means = class_means(D, signal=1.5, n_irrelevant=M, geometry=geometry)
    mu_plus, mu_minus, nu = (np.asarray(a, np.float64) for a in means)
    mu_y = np.where(y[:, None] > 0, mu_plus, mu_minus)  # (n, d)
    np.testing.assert_array_equal(X[mask], np.broadcast_to(mu_y[:, None, :], X.shape)[mask])
    irrelevant = X[~mask]  # (k, d)
    if M == 0:
        np.testing.assert_array_equal(irrelevant, 0.0)
        return
    # each irrelevant token is exactly one nu_j, and j is uniform on [M]
    which = np.argmax(irrelevant[:, 2 : 2 + M], axis=1)  # (k,)
    np.testing.assert_array_equal(irrelevant, nu[which])
    freq = np.bincount(which, minlength=M) / which.size
    np.testing.assert_array_less(np.abs(freq - 1 / M), _binomial_tol(1 / M, which.size))


def test_same_key_same_data_different_key_different_data():
    a, b, c = _draw(key=7, r=2), _draw(key=7, r=2), _draw(key=8, r=2)
    for u, v in zip(a, b, strict=True):
        np.testing.assert_array_equal(u, v)
    for u, v in zip(a, c, strict=True):
        assert not np.array_equal(u, v)


def test_jit_and_vmap_over_keys_and_noise():
    """Trials as a vmapped key axis, noise swept as an array: one compiled program."""

    def gen(key, noise):
        return tokenized_mixture(key, N, T=T, d=D, r=2, noise=noise)

    keys = jax.random.split(jax.random.key(9), 3)
    noises = [0.0, 1.0, 2.5]
    X, y, mask = jax.jit(jax.vmap(gen), compiler_options=FAST_COMPILE)(keys, jnp.array(noises))
    assert X.shape == (3, N, T, D) and mask.shape == (3, N, T)
    X, y, mask = np.asarray(X), np.asarray(y), np.asarray(mask)  # sliced in numpy, not op by op
    for i in range(3):
        eager = gen(keys[i], noises[i])
        np.testing.assert_allclose(X[i], eager[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(y[i], eager[1])
        np.testing.assert_array_equal(mask[i], eager[2])


def test_dm1_defaults_and_overrides():
    key = jax.random.key(11)
    X, y, mask = dm1(key, N)
    ref = tokenized_mixture(
        key,
        N,
        T=10,
        d=32,
        zeta=0.1,
        signal=1.0,
        noise=1.0,
        n_irrelevant=4,
        geometry="antipodal",
    )
    for u, v in zip((X, y, mask), ref, strict=True):
        np.testing.assert_array_equal(u, v)
    assert X.shape == (N, 10, 32)
    np.testing.assert_array_equal(np.asarray(mask).sum(axis=1), 1)
    assert DM1_DEFAULTS["T"] == 10 and DM1_DEFAULTS["n_irrelevant"] == 4
    _, _, mask2 = dm1(key, N, zeta=0.2, geometry="orthogonal")
    np.testing.assert_array_equal(np.asarray(mask2).sum(axis=1), 2)
    with pytest.raises(TypeError):
        dm1(key, 3, heads=2)


# Arrays the generators drew at commit bbcc2fb (before tokenized_mixture was split into
# helpers). Data must stay bit for bit the same for the same key: every saved result,
# checkpoint and cache key assumes it. Regenerate only for a deliberate change of numerics
# (and bump NUMERICS_VERSION): python -c "import tests.test_datamodels as t; t._save_reference()"
REFERENCE = Path(__file__).parent / "data" / "generators_reference.npz"


def _reference_draws() -> dict[str, np.ndarray]:
    """Small draws over the grid of the mixture's options, DM1's defaults and the planted model."""
    out = {}
    grid = itertools.product(GEOMETRIES, [0, 4], [False, True], [None, 3])
    for i, (geometry, M, first_relevant, r) in enumerate(grid):
        X, y, mask = tokenized_mixture(
            jax.random.key(100 + i),
            5,
            T=7,
            d=8,
            zeta=0.3,
            r=r,
            signal=1.5,
            noise=0.7,
            n_irrelevant=M,
            geometry=geometry,
            first_relevant=first_relevant,
        )
        out |= {f"mixture{i}_X": X, f"mixture{i}_y": y, f"mixture{i}_mask": mask}
    out["dm1_X"], out["dm1_y"], out["dm1_mask"] = dm1(jax.random.key(7), 4)
    teacher = planted_teacher(jax.random.key(8), d=6, heads=2, scale=1.5)
    out["planted_X"], out["planted_y"], _ = planted(jax.random.key(9), 6, teacher, T=5, label_noise=0.2)
    return {k: np.asarray(v) for k, v in out.items()}


def _save_reference() -> None:
    REFERENCE.parent.mkdir(exist_ok=True)
    np.savez(REFERENCE, **_reference_draws())


@pytest.mark.slow
def test_generators_draw_the_reference_arrays_bit_for_bit():
    with np.load(REFERENCE) as z:
        saved = {k: z[k] for k in z.files}
    drawn = _reference_draws()
    assert drawn.keys() == saved.keys()
    for k, v in drawn.items():
        assert v.dtype == saved[k].dtype, k
        assert_users_numbers(v, saved[k], err_msg=k)  # bit for bit at the users' level, on the CPU


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(geometry="foo"), r"geometry='foo' is not one of \('antipodal', 'orthogonal'\)"),
        (dict(n=0), r"n=0 must be >= 1"),
        (dict(n=2.5), r"n=2.5 must be a Python integer"),
        (dict(n=True), r"n=True must be an integer, not a bool"),
        (dict(T=0), r"T=0 must be >= 1"),
        (dict(r=0), r"r=0 must be in \[1, 10\]"),
        (dict(r=11), r"r=11 must be in \[1, 10\]"),
        (dict(zeta=1.5), r"zeta=1.5 must be finite and in \[0.0, 1.0\]"),
        (dict(zeta=-0.1), r"zeta=-0.1"),
        (dict(noise=-1.0), r"noise=-1.0 must be finite and >= 0"),
        (dict(noise=float("nan")), r"noise=nan"),
        (dict(signal=-1.0), r"signal=-1.0"),
        (dict(n_irrelevant=-1), r"n_irrelevant=-1 must be >= 0"),
        (dict(d=0), r"d=0"),
        (dict(first_relevant="yes"), r"first_relevant='yes'"),
    ],
)
def test_mixture_rejects_bad_arguments(kwargs, pattern):
    args = dict(n=5, T=10, d=32)
    args.update(kwargs)
    n = args.pop("n")
    with pytest.raises(ValueError, match=pattern):
        tokenized_mixture(jax.random.key(0), n, **args)


# --------------------------------------------------------------------------- planted


def _numpy_teacher_logits(U: np.ndarray, W: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Float64 loop over examples and heads: the model's formula (docs/model.md), written out."""
    H = U.shape[0]
    out = np.zeros(X.shape[0])
    for i in range(X.shape[0]):
        x_q = X[i, 0]
        for h in range(H):
            scores = X[i] @ (W[h] @ x_q)  # (T,)
            p = np.exp(scores - scores.max())
            p /= p.sum()
            out[i] += U[h] @ (X[i].T @ p)
    return out / math.sqrt(H)


# the teachers drawn by one jitted program per number of heads (the scale a traced argument)
_planted_teacher = jax.jit(planted_teacher, static_argnames=("d", "heads"), compiler_options=FAST_COMPILE)


@functools.cache
def _teacher(heads: int, scale: float = 1.0) -> Teacher:
    return _planted_teacher(jax.random.key(heads), d=D, heads=heads, scale=scale)


@functools.cache
def _planted(heads: int, label_noise: float = 0.0, key: int = 5):
    return planted(jax.random.key(key), N, _teacher(heads), label_noise=label_noise)


@pytest.mark.parametrize("heads", [1, 4])
def test_planted_teacher_shapes(heads):
    teacher = _teacher(heads)
    assert isinstance(teacher, Teacher)
    assert teacher.U.shape == (heads, D)
    assert teacher.W.shape == (heads, D, D)
    assert teacher.U.dtype == teacher.W.dtype == jnp.float32


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_planted_teacher_entry_statistics(scale):
    teacher = _teacher(4, scale)
    W = np.asarray(teacher.W, np.float64).ravel()
    U = np.asarray(teacher.U, np.float64).ravel()
    # a sample sd of k normals has relative sd ~ 1/sqrt(2k); allow 5 of those
    np.testing.assert_allclose(W.std(), scale, rtol=5 / math.sqrt(2 * W.size))
    np.testing.assert_allclose(U.std(), 1.0, rtol=5 / math.sqrt(2 * U.size))
    assert abs(W.mean()) < 5 * scale / math.sqrt(W.size)
    assert abs(U.mean()) < 5 / math.sqrt(U.size)
    # the scale multiplies one draw of G: same key, same G
    np.testing.assert_allclose(teacher.W / scale, _teacher(4).W, rtol=1e-6)


# one compiled program per number of heads, which the three scales share (op by op, each of the
# einsums and the softmax compiled on its own per shape)
_teacher_logits = jax.jit(teacher_logits, compiler_options=FAST_COMPILE)


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
def test_teacher_logits_match_float64_loop(heads, scale):
    teacher = _teacher(heads, scale)
    X = np.asarray(_planted(1)[0])[:50]  # (50, T, d) float32, sliced in numpy (not an eager op)
    with jax.default_matmul_precision("highest"):
        got = np.asarray(_teacher_logits(teacher, X))
    want = _numpy_teacher_logits(
        np.asarray(teacher.U, np.float64),
        np.asarray(teacher.W, np.float64),
        np.asarray(X, np.float64),
    )
    assert got.shape == (50,)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_teacher_logits_rejects_bad_shapes():
    teacher = _teacher(1)
    zeros = functools.partial(np.zeros, dtype=np.float32)  # numpy: no eager op to compile
    with pytest.raises(ValueError, match=rf"d={D}"):
        teacher_logits(teacher, zeros((3, 5, 6)))
    with pytest.raises(ValueError, match=rf"\(n, T, d={D}\)"):
        teacher_logits(teacher, zeros((5, D)))
    with pytest.raises(ValueError, match=r"teacher must have"):
        teacher_logits(Teacher(U=teacher.U, W=np.asarray(teacher.W)[:, :3]), zeros((3, 5, D)))


@pytest.mark.parametrize("heads", [1, 4])
def test_planted_clean_labels_are_teacher_signs(heads):
    X, y, mask = _planted(heads)
    assert mask is None
    assert X.shape == (N, T, D) and X.dtype == jnp.float32
    assert y.shape == (N,) and y.dtype == jnp.float32
    logits = np.asarray(teacher_logits(_teacher(heads), X))
    np.testing.assert_array_equal(np.asarray(y), np.where(logits >= 0, 1.0, -1.0))
    # a random teacher gives both labels in reasonable proportion
    assert 0.05 < float(np.mean(np.asarray(y) == 1.0)) < 0.95


def test_planted_sign_zero_is_plus_one():
    teacher = Teacher(U=jnp.zeros((1, D)), W=_teacher(1).W)
    _, y, _ = planted(jax.random.key(5), N, teacher)
    np.testing.assert_array_equal(y, 1.0)


def test_planted_token_distribution():
    X = np.asarray(_planted(1)[0], np.float64).reshape(-1, D)  # (n T, d)
    k = X.shape[0]
    np.testing.assert_allclose(X.var(axis=0), 1 / D, rtol=5 * math.sqrt(2 / k))
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=5 / math.sqrt(D * k))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_planted_label_flip_rate(p):
    X0, y0, _ = _planted(4)
    Xp, yp, _ = _planted(4, p)
    np.testing.assert_array_equal(X0, Xp)  # the label noise does not move the tokens
    rate = float(np.mean(np.asarray(y0) != np.asarray(yp)))
    assert abs(rate - p) < _binomial_tol(p, N)


def test_planted_is_deterministic_and_jit_friendly_in_the_key():
    a, c = _planted(1, 0.2, key=5), _planted(1, 0.2, key=6)
    again = planted(jax.random.key(5), N, _teacher(1), label_noise=0.2)
    np.testing.assert_array_equal(a[0], again[0])
    np.testing.assert_array_equal(a[1], again[1])
    assert not np.array_equal(a[0], c[0])
    jitted = jax.jit(lambda k: planted(k, N, _teacher(1), label_noise=0.2)[:2], compiler_options=FAST_COMPILE)
    X, y = jitted(jax.random.key(5))
    np.testing.assert_allclose(X, a[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(y, a[1])


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda t: planted(jax.random.key(0), 5, t, label_noise=0.6), r"label_noise=0.6"),
        (lambda t: planted(jax.random.key(0), 5, t, label_noise=-0.1), r"label_noise=-0.1"),
        (lambda t: planted(jax.random.key(0), 0, t), r"n=0"),
        (lambda t: planted(jax.random.key(0), 5, t, T=0), r"T=0"),
        (lambda t: planted_teacher(jax.random.key(0), heads=0), r"heads=0"),
        (lambda t: planted_teacher(jax.random.key(0), d=0), r"d=0"),
        (lambda t: planted_teacher(jax.random.key(0), scale=-1.0), r"scale=-1.0"),
    ],
)
def test_planted_rejects_bad_arguments(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(_teacher(1))


# --------------------------------------------------------------------------- npz


def _valid_arrays(labels=(-1, 1)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "X_train": rng.normal(size=(6, 5, 3)),  # float64 on purpose: loaded as float32
        "y_train": rng.choice(labels, size=6),
        "X_test": rng.normal(size=(4, 5, 3)),
        "y_test": rng.choice(labels, size=4),
    }


def _save(tmp_path, arrays, name="data.npz"):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_load_npz_round_trip(tmp_path):
    arrays = _valid_arrays()
    arrays["y_train"][:2] = (-1, 1)  # both labels present
    data = load_npz(_save(tmp_path, arrays))
    assert isinstance(data, UserData)
    for key in ("X_train", "y_train", "X_test", "y_test"):
        got = getattr(data, key)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        np.testing.assert_array_equal(got, arrays[key].astype(np.float32))
    # str paths work too, and extra keys are ignored
    np.savez(tmp_path / "extra.npz", **arrays, notes=np.arange(3))
    np.testing.assert_array_equal(load_npz(str(tmp_path / "extra.npz")).y_test, data.y_test)


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.bool_])
def test_load_npz_maps_01_labels(tmp_path, dtype):
    arrays = _valid_arrays(labels=(0, 1))
    arrays["y_train"][:2] = (0, 1)
    arrays["y_train"] = arrays["y_train"].astype(dtype)
    data = load_npz(_save(tmp_path, arrays))
    np.testing.assert_array_equal(data.y_train, np.where(arrays["y_train"], 1.0, -1.0))
    assert set(np.unique(data.y_test)) <= {-1.0, 1.0}


def test_load_npz_checks_the_task_it_is_given(tmp_path):
    path = _save(tmp_path, _valid_arrays(labels=(0, 2)))  # targets that are no labels
    assert load_npz(path).task == load_npz(path, "regression").task == "regression"
    with pytest.raises(DataError, match="classification needs ±1 or 0/1 labels"):
        load_npz(path, "classification")
    for bad in ("bogus", 5, "Classification"):
        with pytest.raises(DataError, match=f"task={bad!r}: expected None"):
            load_npz(path, bad)
    labels = _save(tmp_path, _valid_arrays(labels=(0, 1)), "labels.npz")
    assert load_npz(labels, "classification").task == "classification"


def _drop(key):
    def edit(a):
        del a[key]

    return edit


def _set(key, value):
    def edit(a):
        a[key] = value(a) if callable(value) else value

    return edit


def _poke(key, index, value):
    def edit(a):
        a[key] = a[key].copy()
        a[key][index] = value

    return edit


MALFORMED = {
    "missing X_test": (_drop("X_test"), "X_test", r"required: X_train, y_train, X_test, y_test"),
    "missing y_train": (_drop("y_train"), "y_train", r"missing"),
    "X_train 2-D": (_set("X_train", lambda a: a["X_train"][:, :, 0]), "X_train", r"3-D"),
    "X_test 4-D": (_set("X_test", lambda a: a["X_test"][..., None]), "X_test", r"3-D"),
    "y_train 2-D": (_set("y_train", lambda a: a["y_train"][:, None]), "y_train", r"1-D"),
    "len(y_test) != n": (_set("y_test", lambda a: a["y_test"][:3]), "y_test", r"3 labels.*n=4"),
    "T mismatch": (_set("X_test", lambda a: a["X_test"][:, :4]), "X_test", r"\(4, 3\).*\(5, 3\)"),
    "d mismatch": (_set("X_test", lambda a: a["X_test"][:, :, :2]), "X_test", r"\(5, 2\)"),
    "NaN in X_train": (_poke("X_train", (0, 0, 0), np.nan), "X_train", r"non-finite"),
    "inf in X_test": (_poke("X_test", (1, 2, 0), np.inf), "X_test", r"non-finite"),
    "float32 overflow": (_poke("X_train", (0, 0, 0), 1e300), "X_train", r"non-finite"),
    "labels NaN": (_poke("y_test", 0, np.nan), "y_test", r"labels must be"),
    "string labels": (_set("y_train", np.array(list("abcdef"))), "y_train", r"numeric"),
    "empty X_train": (
        _set("X_train", np.zeros((0, 5, 3))),
        "X_train",
        r"empty",
    ),
    "empty y_test": (_set("y_test", np.zeros((0,))), "y_test", r"empty"),
    "object array": (_set("y_train", np.array([1, -1, None, 1, 1, 1], dtype=object)), "y_train", r"pickle"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_load_npz_malformed(tmp_path, case):
    edit, key, detail = MALFORMED[case]
    arrays = _valid_arrays()
    arrays["y_test"] = arrays["y_test"].astype(np.float64)  # so NaN can be poked in
    edit(arrays)
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)  # object arrays are pickled by savez, refused by load_npz
    with pytest.raises(DataError, match=detail) as info:
        load_npz(path)
    message = str(info.value)
    assert f"'{key}'" in message and str(path) in message
    assert "\n" not in message
    assert isinstance(info.value, ValueError)


def test_load_npz_missing_file(tmp_path):
    path = tmp_path / "nope.npz"
    with pytest.raises(DataError, match="no such file") as info:
        load_npz(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "content",
    [b"this is not a zip file", b"PK\x03\x04 truncated zip", b""],
)
def test_load_npz_not_a_zip(tmp_path, content):
    path = tmp_path / "garbage.npz"
    path.write_bytes(content)
    with pytest.raises(DataError, match="not a valid .npz") as info:
        load_npz(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_load_npz_bare_npy(tmp_path):
    path = tmp_path / "array.npy"
    np.save(path, np.zeros((2, 3, 4)))
    with pytest.raises(DataError, match=r"single \.npy array"):
        load_npz(path)
