"""The max-margin SVM and view with a query outside the keys (``--query outside``: x_T queries the
context x_1…x_{T−1}), Tarzanagh et al.'s cross-attention setting: W^mm posed on the keys the model
attends, checked by its KKT certificate in float64, and a small run beside the float64 reference."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.max_margin import corr, reference
from dynamics.core import model
from dynamics.errors import ConfigError
from dynamics.theory import maxmargin, svm


def _tokens(seed: int, n: int, T: int, d: int) -> np.ndarray:
    g = np.random.default_rng(seed).standard_normal((n, T, d))
    return g / np.linalg.norm(g, axis=-1, keepdims=True)  # (n, T, d) on the unit sphere


@pytest.mark.parametrize("seed", [0, 1])
def test_outside_W_mm_separates_the_keys_by_the_query_token_and_is_optimal(seed):
    """Every margin (x_{i,α} − x_{i,t})ᵀ W x_{i,T} ≥ 1 over the keys t < T alone, and the KKT
    certificate (W = Σ α_c a_c b_cᵀ, α ≥ 0, α_c = 0 off the active margins) that makes W^mm the
    optimum of the strictly convex problem; in float64 from the returned W and duals."""
    n, T, d = 4, 5, 4
    X = _tokens(seed, n, T, d)
    sel = np.random.default_rng(seed + 10).integers(0, T - 1, n)  # keys 0..T-2: never the query
    W, status, dual = svm.max_margin_W(X, sel, "outside")
    assert status == "optimal" and W.shape == (d, d) and dual.shape == (n, T - 1, T - 1)
    keys, z = X[:, :-1], X[:, -1]
    margins = np.einsum("ntd,de,ne->nt", keys[np.arange(n), sel][:, None] - keys, W, z)  # (n, T - 1)
    others = np.arange(T - 1)[None, :] != sel[:, None]
    assert margins[others].min() >= 1 - 1e-6 and margins[others].min() <= 1 + 1e-6
    rest = dual.copy()
    rest[np.arange(n), sel] = 0  # the duals of constraints (i, α_i, t); none elsewhere
    assert np.all(dual >= -1e-9) and np.all(rest == 0)
    built = np.einsum("nrt,nrtd,ne->de", dual, keys[:, :, None] - keys[:, None], z)  # Σ α a bᵀ
    assert np.allclose(built, W, rtol=1e-6, atol=1e-8)
    slack = np.where(others, margins - 1, 0.0)  # (n, T - 1) complementary slackness: α_c (m_c − 1) = 0
    assert np.abs(dual[np.arange(n), sel] * slack).max() <= 1e-6
    # the model's own outside query, at a large multiple of W^mm, attends the selected keys
    A = model.attention({"W": jnp.asarray(50 * W[None], jnp.float32)}, jnp.asarray(X, jnp.float32), "outside")
    assert A.shape == (n, 1, T - 1) and np.array_equal(np.argmax(np.asarray(A)[:, 0], axis=1), sel)
    # the query among the keys ("last") is another problem: its key set holds x_T
    assert not np.allclose(svm.max_margin_W(X, sel, "last").W, W, atol=1e-3)


def test_outside_refuses_the_query_token_as_a_selection_and_one_token():
    X = _tokens(0, 3, 4, 3)
    with pytest.raises(ValueError, match=r"selected tokens must be in 0\.\.2"):
        svm.max_margin_W(X, np.array([0, 1, 3]), "outside")
    with pytest.raises(ValueError, match="needs T >= 2 tokens"):
        svm.max_margin_W(X[:, :1], np.array([0, 0, 0]), "outside")
    with pytest.raises(ValueError, match="'first', 'last' or 'outside'"):
        svm.max_margin_W(X, np.array([0, 1, 2]), "all")


def test_the_mask_selection_is_among_the_keys_or_refused():
    mask = np.zeros((3, 5), bool)
    mask[[0, 1, 2], [1, 0, 3]] = True
    assert maxmargin._mask_selection(mask, 4, "outside").tolist() == [1, 0, 3]
    mask[2] = False
    mask[2, 4] = True  # example 2's relevant token is x_T, the query: no key to select
    with pytest.raises(ConfigError, match=r"example\(s\) \[2\] is not among the 4 keys"):
        maxmargin._mask_selection(mask, 4, "outside")


@pytest.mark.slow  # a compile and two SVM solves: about 15 s here
def test_a_small_outside_run_follows_the_float64_reference_and_its_view_is_the_svms():
    from dynamics import run_sweep
    from dynamics.sweeps.trials import trial_data

    res = run_sweep(
        data_model="max-margin", T=5, d=3, n_train=4, n_test=4, query="outside", optimizer="normalized-gd",
        lr=0.1, loss="logistic", steps=200, readout_lr_factor=0.0, heads=(1,), trials=2, log_every=10,
        save_params=True, diagnostics=("maxmargin",), progress=False,
    )  # fmt: skip
    W = np.asarray(res.curves["param_W"], np.float64)[0, :, :, 0]  # (trials, L, d, d)
    view = maxmargin.alignment(res)
    assert np.array_equal(res.curves["maxmargin_cos"][0], view.corr)
    for t in range(2):
        data = trial_data(res.config, t)
        lat = data.world.latents
        X = np.asarray(data.X_train, np.float64)
        ref = reference(X, data.y_train, lat["v"], lat["W0"], lr=0.1, steps=200, every=10, query="outside")
        flat, rflat = W[t].reshape(len(ref), -1), ref.reshape(len(ref), -1)  # (L, d·d) each
        between = np.sum(flat * rflat, 1) / (np.linalg.norm(flat, axis=1) * np.linalg.norm(rflat, axis=1))
        assert between.min() >= 0.9999, between.min()  # the engine's outside query is the reference's
        sel = np.argmax(np.einsum("ntd,de,ne->nt", X[:, :-1], W[t, -1], X[:, -1]), axis=1)
        assert np.array_equal(view.selected[t], sel) and sel.max() < 4
        assert np.allclose(view.corr[t], corr(W[t], svm.max_margin_W(X, sel, "outside").W))
    from figures.max_margin import max_margin_figure

    fig = max_margin_figure(res)  # the preset's figure draws the outside query's run and says so
    assert "the query x_T outside the keys x_1…x_4" in fig._suptitle.get_text()
