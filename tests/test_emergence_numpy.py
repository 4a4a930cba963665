"""The independent numpy sampler of ``benchmarks.emergence_numpy --independent``: the emergence
model's definition, checked on its own draws (not mhsim's)."""

import numpy as np

from benchmarks.emergence_numpy import draw_examples, haar_orthogonal


def test_independent_sampler_follows_the_models_definition():
    """W* orthogonal; the last B tokens one token x_r; y = W* x_r exactly without noise; x_r the
    trial's x̄ in a share of examples within 5 binomial standard deviations of p, fresh otherwise."""
    rng = np.random.Generator(np.random.SFC64(0))
    k, d, T, B, n, p = 3, 5, 6, 2, 4000, 0.3
    W, x_bar = haar_orthogonal(rng, k, d), rng.standard_normal((k, d))
    np.testing.assert_allclose(W @ W.transpose(0, 2, 1), np.broadcast_to(np.eye(d), (k, d, d)), atol=1e-12)
    X, y = draw_examples(rng, W, x_bar, n, T=T, copies=B, repetition=p, noise=0.0)
    assert X.shape == (k, n, T, d) and y.shape == (k, n, d)
    x_r = X[:, :, T - 1]
    assert np.array_equal(X[:, :, T - 2], x_r)
    np.testing.assert_allclose(y, np.einsum("kod,knd->kno", W, x_r), atol=1e-12)
    repeated = np.all(x_r == x_bar[:, None, :], axis=-1)  # (k, n)
    assert np.all(np.abs(repeated.mean(axis=1) - p) <= 5 * np.sqrt(p * (1 - p) / n))
    assert not np.any(X[:, :, : T - B] == x_bar[:, None, None, :])  # the other tokens are fresh
    X0, y_noisy = draw_examples(rng, W, x_bar, n, T=T, copies=B, repetition=0.0, noise=0.5)
    assert not np.any(np.all(X0[:, :, T - 1] == x_bar[:, None, :], axis=-1))  # p = 0: never x̄
    resid = y_noisy - np.einsum("kod,knd->kno", W, X0[:, :, T - 1])
    assert abs(resid.std() - 0.5) < 0.02
