"""The per-head metrics against an independent numpy computation from the saved snapshots of θ
(softmax and linear attention, the first and the learned query), their layout per run and head
(NaN past a run's H, the fast path's one slot standing for H heads), and what a zero vector's
cosine is."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from helpers import FAST_COMPILE

from dynamics.config.schema import Config, DataConfig, ModelConfig, OptimConfig, SweepConfig, resolve
from dynamics.core import heads
from dynamics.sweeps import sweep

# The small checks of heads' functions run them in one program each, compiled at XLA's backend
# optimisation level 0 on the CPU (op by op, each primitive compiled alone: a dozen programs).


def tiny(query: str, attention: str, init: str = "normal") -> Config:
    return Config(
        data=DataConfig(n_train=20, n_test=15, T=5, d=6, n_irrelevant=2),
        model=ModelConfig(query=query, attention=attention, init=init, init_scale=0.5),
        optim=OptimConfig(steps=6, lr=0.2),
        sweep=SweepConfig(
            heads=(1, 3),
            trials=2,
            log_every=2,
            head_metrics="on",
            save_params=True,
            head_sims=True,
            head_every=2,  # at steps 0, 4, 6: the key direction warm-started from the last one
        ),
    )


def abs_cos(a, b):
    return abs(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))


def reference(
    params_h: dict, X: np.ndarray, mask: np.ndarray, query: str, attention: str, dirs: np.ndarray
) -> dict:
    """One run's per-head metrics at one step, in float64 numpy, head by head (``dirs`` (P, d):
    the planted directions)."""
    H = params_h["U"].shape[0]
    out = {"head_u_norm": [], "head_key_norm": [], "head_attn_relevant": [], "keys": [], "A": []}
    for h in range(H):
        U = params_h["U"][h]
        if query == "learned":
            k = params_h["k"][h]
            s = X @ k  # (n, T)
            key_norm = np.linalg.norm(k)
        else:
            W = params_h["W"][h]
            s = np.einsum("ntd,de,ne->nt", X, W, X[:, 0])
            k = np.linalg.svd(W)[0][:, 0]
            key_norm = np.linalg.norm(W)
        if attention == "softmax":
            e = np.exp(s - s.max(axis=1, keepdims=True))
            share = A = e / e.sum(axis=1, keepdims=True)
        else:
            A = s
            share = np.abs(s) / np.abs(s).sum(axis=1, keepdims=True)
        out["head_u_norm"].append(np.linalg.norm(U))
        out["head_key_norm"].append(key_norm)
        out["head_attn_relevant"].append(np.mean(np.sum(share * mask, axis=1)))
        out["keys"].append(k)
        out["A"].append(A.ravel())
    pairs = {
        "head_u_sim": params_h["U"],
        "head_key_sim": out.pop("keys"),
        "head_attn_sim": out.pop("A"),
    }
    for name, rows in pairs.items():
        out[name] = np.array([[abs_cos(a, b) for b in rows] for a in rows])
    out["head_u_cos"] = np.array([[abs_cos(u, v) for v in dirs] for u in params_h["U"]])
    out["head_key_cos"] = np.array([[abs_cos(k, v) for v in dirs] for k in pairs["head_key_sim"]])
    out["head_uk_cos"] = np.diag(
        np.array([[abs_cos(a, b) for b in params_h["U"]] for a in np.array(pairs["head_key_sim"])])
    )
    return {k: np.asarray(v) for k, v in out.items()}


@pytest.mark.slow_cases("learned-softmax")  # the other three: make stress
@pytest.mark.parametrize(
    "query,attention", list(itertools.product(["first", "learned"], ["softmax", "linear"]))
)
def test_per_head_metrics_agree_with_numpy_from_the_snapshots(query, attention):
    cfg = tiny(query, attention)
    with jax.enable_x64(True):
        result = sweep.run_sweep(cfg, progress=False)
        data, _, _ = sweep.prepare_data(resolve(cfg).config)
    X_test, mask = np.asarray(data.X_test, np.float64), np.asarray(data.mask_test, np.float64)
    # DM1's planted directions, named in sorted order: the unit class means ±e_0, the irrelevant e_2, e_3
    assert result.extra["directions"] == ["mu_minus", "mu_plus", "nu_0", "nu_1"]
    eye = np.eye(cfg.data.d)
    dirs = np.stack([-eye[0], eye[0], eye[2], eye[3]])
    for p, name in enumerate(result.extra["directions"]):
        np.testing.assert_array_equal(result.planted[name], np.broadcast_to(dirs[p], (cfg.sweep.trials, 6)))
    for i, H in enumerate(cfg.sweep.heads):
        np.testing.assert_array_equal(result.head_steps, [0, 4, 6])
        for t, step in itertools.product(range(cfg.sweep.trials), range(len(result.head_steps))):
            theta = {k: v[i, t, step, :H] for k, v in result.params.items()}
            want = reference(theta, X_test[t], mask[t], query, attention, dirs)
            for name, value in want.items():
                got = result.curves[name][i, t, step]
                got = got[:H, :H] if name.endswith("_sim") else got[:H]
                np.testing.assert_allclose(got, value, rtol=1e-5, atol=1e-9, err_msg=f"{name} H={H}")
            assert np.all(np.isnan(result.curves["head_u_norm"][i, t, step, H:]))  # past the run's H


def test_a_zero_vectors_cosine_is_nan():
    got = np.asarray(
        jax.jit(heads.abs_cos, compiler_options=FAST_COMPILE)(
            np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([[1.0, 1.0]])
        )
    )
    assert np.isnan(got[0, 0]) and got[1, 0] == pytest.approx(2**-0.5)


@pytest.mark.slow
def test_planted_directions_are_named_saved_and_loaded(tmp_path):
    from dynamics import load_results
    from dynamics.config.schema import ConfigError
    from dynamics.sweeps.result_files import write_results

    cfg = Config(
        data=DataConfig(model="multi-location", n_train=16, n_test=8, T=5, d=8),
        model=ModelConfig(query="learned", init="normal", init_scale=0.1),
        optim=OptimConfig(steps=4, lr=0.05),
        sweep=SweepConfig(heads=(2,), trials=2, log_every=1, head_metrics="on", head_every=3),
    )
    result = sweep.run_sweep(cfg, progress=False)
    np.testing.assert_array_equal(result.head_steps, [0, 3, 4])  # every 3rd logged step, the last
    assert result.curves["head_u_cos"].dtype == np.float32 and result.curves["head_u_cos"].shape[2] == 3
    names = [f"k_star_{f}" for f in range(3)] + [f"v_star_{f}" for f in range(3)]
    assert result.extra["directions"] == names
    assert result.curves["head_u_cos"].shape[-1] == result.curves["head_key_cos"].shape[-1] == 6
    for t in range(2):  # the 2F directions of a trial are orthonormal; the trials' worlds differ
        rows = np.stack([result.planted[n][t] for n in names])
        np.testing.assert_allclose(rows @ rows.T, np.eye(6), atol=1e-5)
    assert not np.allclose(result.planted["k_star_0"][0], result.planted["k_star_0"][1])
    write_results(result, tmp_path)
    back = load_results(tmp_path)
    np.testing.assert_array_equal(back.head_steps, result.head_steps)  # the view's own step axis
    np.testing.assert_array_equal(back.curves["head_key_cos"], result.curves["head_key_cos"])
    assert back.extra["directions"] == names and list(back.planted) == names
    for n in names:
        np.testing.assert_array_equal(back.planted[n], result.planted[n])
    (tmp_path / "directions.npz").unlink()
    with pytest.raises(ConfigError, match=r"directions.npz is missing or damaged"):
        load_results(tmp_path)
    np.savez(tmp_path / "directions.npz", k_star_0=result.planted["k_star_0"])
    with pytest.raises(ConfigError, match=r"directions.npz holds \['k_star_0'\], results.json names"):
        load_results(tmp_path)


@pytest.mark.slow_cases("linear")
@pytest.mark.parametrize("attention", ["softmax", "linear"])
def test_attention_per_feature_agrees_with_numpy_from_the_snapshots(attention):
    # Multi-location's mask is per feature (n, F, T): each head's share on feature f's token, over the
    # examples holding f (here all), from θ's snapshots in float64; the features' sum is the relevant mass.
    cfg = Config(
        data=DataConfig(
            model="multi-location", n_train=16, n_test=12, T=5, d=8, params={"strengths": (1.0, 0.6)}
        ),
        model=ModelConfig(query="learned", attention=attention, init="normal", init_scale=0.5),
        optim=OptimConfig(steps=4, lr=0.05, task="regression", loss="mse"),
        sweep=SweepConfig(heads=(2,), trials=2, log_every=2, head_metrics="on", save_params=True),
    )
    with jax.enable_x64(True):
        result = sweep.run_sweep(cfg, progress=False)
        data, _, _ = sweep.prepare_data(resolve(cfg).config)
    feats = np.asarray(data.features_test, np.float64)  # (trials, n, F, T)
    X_test = np.asarray(data.X_test, np.float64)  # numpy: an eager slice of a JAX array compiles
    assert feats.shape == (2, 12, 2, 5) and np.all(feats.sum(axis=-1) == 1)  # one token per feature
    np.testing.assert_array_equal(np.asarray(data.mask_test), feats.any(axis=2))  # the union
    got = result.curves["head_attn_feature"]  # (1, trials, L, H, F)
    for t, step in itertools.product(range(2), range(len(result.head_steps))):
        k = result.params["k"][0, t, step]  # (H, d)
        s = np.einsum("ntd,hd->nht", X_test[t], k)
        if attention == "softmax":
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            share = e / e.sum(axis=-1, keepdims=True)
        else:
            share = np.abs(s) / np.abs(s).sum(axis=-1, keepdims=True)
        want = np.einsum("nht,nft->hf", share, feats[t]) / feats.shape[1]
        np.testing.assert_allclose(got[0, t, step], want, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(got.sum(-1), result.curves["head_attn_relevant"], rtol=1e-6)


def test_a_feature_no_example_holds_is_nan():
    share = np.full((3, 1, 4), 0.25)
    features = np.zeros((3, 2, 4), bool)
    features[:, 0, 1] = True
    per_feature = jax.jit(heads.attention_per_feature, compiler_options=FAST_COMPILE)
    got = np.asarray(per_feature(share.astype(np.float32), features))
    assert got[0, 0] == pytest.approx(0.25) and np.isnan(got[0, 1])


@pytest.mark.slow
def test_every_per_head_metric_is_declared_with_the_kind_its_shape_has():
    """What ``head_metrics`` computes is what the registry declares: each name registered, each
    array's shape the one its kind says (S slots, P planted directions, F features), and every
    declared per-head metric computed."""
    from dynamics.core.inits import init_params
    from dynamics.parts.metrics import REGISTRY, per_head_metrics

    S, P, F, n, T, d = 3, 2, 4, 5, 6, 7
    params = init_params(jax.random.key(0), S, d, init="normal", scale=1.0)
    rng = np.random.default_rng(0)
    A = jax.nn.softmax(rng.normal(size=(n, S, T)), axis=-1)
    mask = rng.random((n, T)) < 0.5
    directions = rng.normal(size=(P, d))
    features = rng.random((n, F, T)) < 0.3
    out = heads.head_metrics(params, A, mask, directions, True, features)
    assert set(out) == {m.name for m in per_head_metrics()}
    for name, value in out.items():
        want = REGISTRY[name].trailing(S, P, F)
        assert value.shape == want, (name, REGISTRY[name].kind)
        assert REGISTRY[name].numbers(S, P, F) == value.size
