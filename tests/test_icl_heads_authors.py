"""benchmarks/icl_heads_authors.py without the authors' code: its argument handling, its reading of
both layouts' heads (their nn.Linear weights, mhsim's Q, K, V, O), and the one-GD-step closed form at
a given step that explains their 0.2414."""

from __future__ import annotations

import math
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import icl_heads_authors as bench
from dynamics.core import model as mdl
from dynamics.experiments import icl_heads

D, L, S2, V = 5, 40, 0.1, 0.2  # the preset's setting: x ∈ R^5, 40 context tokens, σ² = 0.1, v = 1/D
E = D + 1


def test_the_best_step_gives_the_default_gd_mse_and_any_other_step_more():
    eta = icl_heads.best_gd_step(D, L, S2, V)
    best = icl_heads.gd_step_mse(D, L, S2, V)
    assert icl_heads.gd_step_mse(D, L, S2, V, eta=eta) == pytest.approx(best, rel=1e-12)
    for other in (eta - 0.05, eta + 0.05, 2 * bench.THEIR_OMEGA * bench.THEIR_MU):
        assert icl_heads.gd_step_mse(D, L, S2, V, eta=other) > best + 1e-4


def test_gd_mse_at_a_given_step_is_the_monte_carlo_of_that_predictor():
    """ŷ = η (1/L) Σ_ℓ y_ℓ x_ℓᵀ x_q at their η = 2ωμ = 0.897 on float64 draws: within 3 standard errors."""
    eta = 2 * bench.THEIR_OMEGA * bench.THEIR_MU
    x, y, xq, yq = icl_heads._draw(np.random.default_rng(3), 40_000, D, L, S2, V)
    pred = eta * np.einsum("nl,nld,nd->n", y, x, xq) / L
    sq = (pred - yq) ** 2
    se = sq.std(ddof=1) / math.sqrt(sq.size)
    assert abs(sq.mean() - icl_heads.gd_step_mse(D, L, S2, V, eta=eta)) < 3 * se


def _heads(rng):
    """Two heads of known structure: W_h = c_h·I on the x–x block (a y row and column beside it)
    and U_h reading y with μ_h (a small x part beside it)."""
    c, mu = np.array([0.4, -0.3]), np.array([3.0, -2.5])
    W = np.zeros((2, E, E))
    W[:, :D, :D] = c[:, None, None] * np.eye(D)
    W[:, D, :] = rng.standard_normal((2, E))  # the key's y row: outside the x–x block
    U = np.zeros((2, E))
    U[:, D], U[:, 0] = mu, 0.1
    A = rng.standard_normal((2, E, E)) + 3 * np.eye(E)  # invertible factors
    return c, mu, W, U, A


def test_their_layout_is_read_per_head():
    c, mu, W, U, A = _heads(np.random.default_rng(0))
    q = A  # (h, a, input): their q_proj rows per head
    k = np.swapaxes(np.linalg.inv(A), 1, 2) @ np.swapaxes(W, 1, 2)  # kᵀ q = W
    v = A
    o = np.einsum("hi,hia->ha", U, np.linalg.inv(A))  # o v = U
    state = {
        "q_proj.weight": q.reshape(2 * E, E),
        "k_proj.weight": k.reshape(2 * E, E),
        "v_proj.weight": v.reshape(2 * E, E),
        "o_proj.weight": o.reshape(1, 2 * E),
    }
    s = bench.their_structure(state, 2)
    np.testing.assert_allclose(s["diag"], 1.0, rtol=1e-10)
    np.testing.assert_allclose(s["yshare"], mu**2 / (mu**2 + 0.01), rtol=1e-10)
    np.testing.assert_allclose(s["omega"], c / math.sqrt(E), rtol=1e-10)
    np.testing.assert_allclose(s["mu"], mu, rtol=1e-10)


def test_mhsim_layout_gives_the_same_numbers():
    c, mu, W, U, A = _heads(np.random.default_rng(1))
    Q = W @ np.swapaxes(np.linalg.inv(A), 1, 2)  # Q Kᵀ = W with K = A
    V = A
    O = np.einsum("hi,hia->ha", U, np.linalg.inv(A))  # Oᵀ V = U
    params = {name: a[None, None, None] for name, a in {"Q": Q, "K": A, "V": V, "O": O}.items()}
    result = SimpleNamespace(
        heads=np.array([2]), params=params, config=SimpleNamespace(model=SimpleNamespace(temperature=E**-0.5))
    )
    s = bench.mhsim_structure(result, 0, 0)
    np.testing.assert_allclose(s["diag"], 1.0, rtol=1e-10)
    np.testing.assert_allclose(s["yshare"], mu**2 / (mu**2 + 0.01), rtol=1e-10)
    np.testing.assert_allclose(s["omega"], c / math.sqrt(E), rtol=1e-10)
    np.testing.assert_allclose(s["mu"], mu, rtol=1e-10)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["x", "--steps", "0"], "'0' is not a whole number >= 1"),
        (["x", "--seeds", "two"], "'two' is not a whole number >= 1"),
        (["x", "--heads", "1,-2"], "'1,-2': need whole numbers >= 1"),
        (["x", "--first-seed", "-1"], "'-1' is not a whole number >= 0"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(argv, named, capsys):
    with pytest.raises(SystemExit) as err:
        bench.parser().parse_args(argv)
    assert err.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert named in last


def test_a_folder_without_their_code_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(bench.ENV, raising=False)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "models.py").write_text("")
    assert bench.checkout(str(tmp_path)) is None  # utils/ missing
    with pytest.raises(SystemExit) as err:
        bench.main([str(tmp_path), "--steps", "3"])
    assert err.value.code == 2
    assert "no checkout with src/models.py" in capsys.readouterr().err


def test_a_missing_mhsim_folder_is_refused_in_one_line(tmp_path, capsys):
    for rel in bench.THEIR_FILES:  # a stand-in checkout: only the files' presence is checked first
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    with pytest.raises(SystemExit) as err:
        bench.main([str(tmp_path), "--mhsim", str(tmp_path / "no-run")])
    assert err.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no-run" in last and "does not exist" in last


def test_their_weights_in_mhsim_layout_give_their_forward():
    """as_mhsim's Q, K, V, O under mhsim's Φ (query outside, summed heads, temperature 1/√6) equal
    the forward of their layer written out with its nn.Linear weights: per head q = W_Q z_q,
    k_ℓ = W_K z_ℓ, v_ℓ = W_V z_ℓ, out = W_O [Σ_ℓ softmax_ℓ(q·k_ℓ/√6) v_ℓ]_heads."""
    rng = np.random.default_rng(2)
    H, n = 2, 16
    state = {f"{a}_proj.weight": rng.standard_normal((H * E, E)) for a in "qkv"}
    state["o_proj.weight"] = rng.standard_normal((1, H * E))
    z = rng.standard_normal((n, L, E))
    zq = np.concatenate([rng.standard_normal((n, 1, D)), np.zeros((n, 1, 1))], axis=2)
    w = {a: state[f"{a}_proj.weight"].reshape(H, E, E) for a in "qkv"}
    q = np.einsum("hai,ni->nha", w["q"], zq[:, 0])  # (n, h, a)
    k = np.einsum("hai,nli->nhla", w["k"], z)  # (n, h, l, a)
    v = np.einsum("hai,nli->nhla", w["v"], z)
    s = np.einsum("nha,nhla->nhl", q, k) / math.sqrt(E)
    att = np.exp(s - s.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    heads = np.einsum("nhl,nhla->nha", att, v).reshape(n, H * E)
    theirs = heads @ state["o_proj.weight"][0]
    X = np.concatenate([z, zq], axis=1)  # (n, L + 1, E): the query last
    params = {k: jnp.asarray(a, jnp.float32) for k, a in bench.as_mhsim(state, H).items()}
    phi = mdl.logits(params, jnp.asarray(X, jnp.float32), query="outside", norm="sum", beta=E**-0.5)
    np.testing.assert_allclose(np.asarray(phi), theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())


def _notebook(path, lines):
    import json

    cell = {"cell_type": "code", "source": [], "outputs": [{"output_type": "stream", "text": lines}]}
    path.write_text(json.dumps({"cells": [cell]}))


def test_their_length_curves_are_read_from_the_notebook_less_the_doubled_noise(tmp_path):
    values = [round(0.5 + 0.01 * i, 4) for i in range(len(bench.THEIR_LENGTHS))]
    _notebook(tmp_path / "plots.ipynb", [f"Errors for n_head=2: {values}\n", "other output\n"])
    curves = bench.their_length_curves(tmp_path)
    assert list(curves) == [2]
    np.testing.assert_allclose(curves[2], np.asarray(values) - S2, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    ("lines", "named"),
    [
        (["Errors for n_head=2: [0.5, 0.4]\n"], "H=2 has 2 lengths, not 19"),
        (["nothing stored\n"], "no stored 'Errors for n_head=H' output"),
    ],
)
def test_a_notebook_without_their_curves_is_refused(tmp_path, lines, named):
    _notebook(tmp_path / "plots.ipynb", lines)
    with pytest.raises(bench.ConfigError, match=named):
        bench.their_length_curves(tmp_path)


def test_lengths_without_a_run_folder_is_refused_in_one_line(tmp_path, capsys):
    for rel in bench.THEIR_FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    with pytest.raises(SystemExit) as err:
        bench.main([str(tmp_path), "--lengths"])
    assert err.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--lengths reads trained models: give --mhsim DIR" in last


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "100"])
def test_mse_at_length_refuses_a_bad_number_of_sequences(bad):
    with pytest.raises(icl_heads.ConfigError, match="sequences="):
        icl_heads.mse_at_length(None, {}, 40, sequences=bad)
