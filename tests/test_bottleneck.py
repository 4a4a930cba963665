"""The low-rank bottleneck: parameter counts, ranks, the attention fit and both presets."""

import dataclasses
import itertools
import json
import math
import subprocess
import sys
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DEFAULT_CONFIG_HASH, child_env

from dynamics.cli import bottleneck as bottleneck_cli
from dynamics.cli import run as cli
from dynamics.config.schema import PRESETS
from dynamics.core import inits, model, rng
from dynamics.experiments import bottleneck

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = [("full", "split"), ("factored", "split"), ("factored", 1), ("factored", 3), ("factored", 9)]


@pytest.mark.parametrize("H,d,layout", list(itertools.product([1, 2, 3, 4], [4, 6, 8], LAYOUTS)))
def test_param_count_counts_the_arrays_of_init_params(H, d, layout):
    key_query, head_size = layout
    if head_size == "split" and H > d:
        pytest.skip("split needs H <= d")
    size = {"head_size": head_size} if key_query == "factored" else {}  # a full W has no head size
    init = partial(inits.init_params, n_heads=H, d=d, init="normal", key_query=key_query, **size)
    shapes = jax.eval_shape(init, jax.random.PRNGKey(0))  # the arrays' shapes, nothing computed
    assert inits.param_count(H, d, key_query, **size) == sum(math.prod(v.shape) for v in shapes.values())


def test_param_count_of_the_two_layouts():
    # split keeps about 2d² key-query parameters for every H; a fixed d_h grows linearly in H.
    assert [inits.param_count(h, 32, "factored", "split") for h in (1, 2, 32)] == [2080, 2112, 3072]
    assert [inits.param_count(h, 32, "factored", 10) for h in (1, 2, 32)] == [672, 1344, 21504]
    with pytest.raises(ValueError, match="n_heads=0 must be a positive integer"):
        inits.param_count(0, 4)
    with pytest.raises(ValueError, match="key_query='low' is not one of 'full', 'factored'"):
        inits.param_count(1, 4, "low")


@partial(jax.jit, static_argnums=(0, 1, 2))
def key_query_and_scores(H, d, head_size, raw_key, X):
    """init_params' factored heads from ``raw_key``, their key-query matrices and query-"all" scores:
    one compiled program a case, where op by op they compiled ~20 programs. The key draws with
    dynamics.core.rng's Threefry, as the engine's data do: jax.random's numbers, with the hash
    written out (JAX's own CPU hash compiles slowly)."""
    params = inits.init_params(
        rng.wrap(raw_key), H, d, init="normal", key_query="factored", head_size=head_size
    )
    return model.key_query_matrix(params), model.attention_scores(params, X, "all")


@pytest.mark.parametrize(
    "H,d,T,head_size", [(2, 6, 4, 1), (2, 6, 4, 3), (1, 6, 4, 6), (3, 5, 7, 2), (4, 8, 3, "split")]
)
def test_rank_of_key_query_and_scores_at_most_head_size(x64, H, d, T, head_size):
    """rank Q_h K_hᵀ = min(d_h, d) for generic Q, K (so ≤ d_h), and the T×T scores have rank ≤ d_h."""
    a = model.resolve_head_size(head_size, d, H)
    X = np.random.default_rng(2).normal(size=(3, T, d))  # float64 (x64)
    W_all, scores = key_query_and_scores(H, d, head_size, rng.seed(1), X)  # jax.random.PRNGKey(1)
    scores = np.asarray(scores)  # (n, h, s, t)
    for h, W in enumerate(np.asarray(W_all)):
        assert np.linalg.matrix_rank(W) == min(a, d)
        for S in scores[:, h]:
            assert np.linalg.matrix_rank(S) == min(a, d, T)


@jax.jit
def head_attention_and_kl(Q, K, X, P):
    """model.attention (query "all") of one factored head on tokens X (T, d), and row_kl of the
    target P against it: one compiled program, where op by op they compiled ~25."""
    A = model.attention({"Q": Q[None], "K": K[None]}, X[None], "all")[0, 0]
    return A, bottleneck.row_kl(P, jnp.log(A))


def test_attention_errors_use_the_models_attention(x64):
    """The float64 error evaluation sees the same T×T attention as model.attention (query 'all')."""
    rng = np.random.default_rng(3)
    T, d, a = 4, 6, 2
    Q, K = rng.normal(size=(2, d, a)), rng.normal(size=(2, d, a))
    X = rng.normal(size=(T, d)) / math.sqrt(d)
    P = rng.dirichlet(np.ones(T), size=(2, T))  # (2, s, t)
    got = bottleneck.attention_errors(Q, K, X, P)
    for i in range(2):
        A, loss = head_attention_and_kl(Q[i], K[i], X, P[i])
        A = np.asarray(A)
        kl = np.mean([sum(p * math.log(p / q) for p, q in zip(P[i, s], A[s], strict=True)) for s in range(T)])
        assert got["kl"][i] == pytest.approx(kl, rel=1e-10)
        assert got["tv"][i] == pytest.approx(np.mean(0.5 * np.abs(A - P[i]).sum(-1)), rel=1e-12)
        assert got["max_abs"][i] == pytest.approx(np.abs(A - P[i]).max(), rel=1e-12)
        # the float32 training loss of the same head, against the float64 value
        assert float(loss) == pytest.approx(kl, rel=1e-10)


@pytest.mark.slow
def test_fit_reaches_zero_error_from_T_minus_1_and_not_below():
    """T = 4: d_h = T − 1 and T fit every target (row shift: T − 1 suffices); d_h = 1, 2 cannot."""
    T, d, sizes = 4, 8, (1, 2, 3, 4)
    fits = bottleneck.expressivity_fits(
        jax.random.PRNGKey(0),
        T=T,
        d=d,
        head_sizes=sizes,
        targets=2,
        restarts=2,
        steps=400,
        lr=0.1,
        lr_final=0.01,
        init_scale=1.0,
        dirichlet=1.0,
    )
    Q, K = np.asarray(fits["Q"]), np.asarray(fits["K"])  # (n_a, M, R, d, A)
    for i, a in enumerate(sizes):  # padded columns never move: each fit is exactly a size-d_h head
        assert not Q[i, ..., a:].any() and not K[i, ..., a:].any()
    P = np.asarray(fits["P"], np.float64)
    P /= P.sum(-1, keepdims=True)
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=1e-12)
    err = bottleneck.attention_errors(Q, K, np.asarray(fits["X"]), P[None, :, None])
    best = err["tv"].min(axis=2).max(axis=1)  # (n_a,): best restart, worst target
    assert best[2] < 1e-3 and best[3] < 1e-3, best
    assert best[0] > 3e-2 and best[1] > 3e-3, best
    assert best[0] > 100 * best[3]


def test_matched_heads_is_the_closest_parameter_count():
    for d, T in ((32, 10), (64, 10), (8, 4)):
        for h in (1, 2, 4, 8, d):
            target = inits.param_count(h, d, "factored", "split")
            got = bottleneck.matched_heads(h, d, T)
            gaps = [abs(inits.param_count(k, d, "factored", T) - target) for k in range(1, 4 * d)]
            assert abs(inits.param_count(got, d, "factored", T) - target) == min(gaps)
    assert [bottleneck.matched_heads(h, 32, 10) for h in (1, 32)] == [3, 5]


def test_presets_are_listed(capsys):
    assert cli.main(["--list-presets"]) == 0
    out = capsys.readouterr().out
    assert bottleneck.EXPRESSIVITY in out and bottleneck.HEADS in out
    assert set(bottleneck.NAMES) <= set(PRESETS)


@pytest.mark.parametrize(
    "argv,name",
    [
        (["--preset", "bottleneck-heads", "--quick"], "bottleneck-heads"),
        (["--quick", "--preset=bottleneck-expressivity"], "bottleneck-expressivity"),
        (["--preset", "fig2"], None),
        (["--heads", "1,2"], None),
    ],
)
def test_requested(argv, name):
    assert bottleneck_cli.requested(argv) == name


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--preset", "bottleneck-heads", "--tokens", "5"], "--tokens do(es) not apply"),
        (["--preset", "bottleneck-heads", "--quick", "--heads", "1,16"], "heads=[16] exceed width=8"),
        (["--preset", "bottleneck-heads", "--quick", "--heads", "0,2"], "heads=0 must be a positive integer"),
        (
            ["--preset", "bottleneck-heads", "--quick", "--width", "4", "--heads", "1"],
            "data.d=4 is too small",
        ),
        (["--preset", "bottleneck-expressivity", "--tokens", "1"], "tokens=1 must be an integer >= 2"),
        (["--preset", "bottleneck-expressivity", "--targets", "0"], "targets=0 must be an integer >= 1"),
        (["--preset", "bottleneck-expressivity", "--steps", "x"], "'x'"),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, capsys, args, needle):
    try:
        code = cli.main([*args, "--out", str(tmp_path / "o"), "--quiet"])
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "o").exists()


def run_cli(args, cwd):
    env = child_env()
    return subprocess.run(
        [sys.executable, "-m", "dynamics.run", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.stress  # long: `make stress` and CI run it
def test_expressivity_preset_end_to_end(tmp_path):
    proc = run_cli(
        ["--preset", "bottleneck-expressivity", "--quick", "--tokens", "3", "--quiet", "--out", "o"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "o"
    meta = json.loads((out / "results.json").read_text())
    assert {"versions", "device", "wall_time_s"} <= set(meta)
    quick = dataclasses.replace(bottleneck.QUICK_EXPRESSIVITY, tokens=(3,))
    assert meta["config_hash"] == bottleneck.expressivity_key(quick)
    (row,) = meta["summary"]
    assert row["T"] == 3 and row["head_sizes"] == list(range(1, 7))
    assert row["param_count"] == [inits.param_count(1, 6, "factored", a) for a in range(1, 7)]
    assert row["best_tv_max"][0] > 1e-2 and row["reached_at"] == 2  # T − 1
    with np.load(out / "expressivity.npz") as z:
        assert z["T3_best_tv"].shape == (6, 2) and z["T3_kl"].shape == (6, 2, 2)
    for suffix in (".png", ".pdf"):
        assert (out / f"figure{suffix}").stat().st_size > 1000
    # the same config and seed give the same numbers
    again = bottleneck.run_expressivity(
        dataclasses.replace(bottleneck.QUICK_EXPRESSIVITY, tokens=(3,)), progress=False
    )
    assert again["results"]["summary"][0]["best_tv_mean"] == row["best_tv_mean"]


@pytest.mark.stress  # long: `make stress` and CI run it
def test_heads_preset_end_to_end(tmp_path):
    proc = run_cli(
        ["--preset", "bottleneck-heads", "--quick", "--heads", "2", "--quiet", "--out", "o"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "planted" in proc.stdout and "split" in proc.stdout
    out = tmp_path / "o"
    meta = json.loads((out / "results.json").read_text())
    args = ["--preset", "bottleneck-heads", "--quick", "--heads", "2"]
    cfg = bottleneck_cli.config_from_args(bottleneck_cli.build_parser().parse_args(args))
    assert meta["config_hash"] == bottleneck.heads_key(cfg)  # the figures cache can key on it
    rows = {(r["data_model"], r["layout"], r["heads"]): r for r in meta["summary"]}
    # width 8, T = 4: split H=2 has d_h = 4 = T, the same layout and count as fixed H=2 (and H' = 2)
    assert set(rows) == {(m, lay, 2) for m in ("dm1", "planted") for lay in ("split", "fixed")}
    assert meta["matched"] == [{"split_heads": 2, "split_params": 144, "fixed_heads": 2, "fixed_params": 144}]
    for (m, _, h), r in rows.items():
        assert r["param_count"] == 144 and r["head_size"] == 4
        assert np.isfinite(r["train_loss"]["mean"]) and np.isfinite(r["test_loss"]["mean"])
        # same data, same seed, same shapes: the two layouts are the same run here
        assert r["train_loss"] == rows[(m, "split", h)]["train_loss"]
    with np.load(out / "heads.npz") as z:
        assert z["dm1__split__train_loss"].shape[:2] == (1, 2)
    assert (out / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# The figures cache and --resume key on these hashes: a refactor must leave them unchanged.
# They change only with NUMERICS_VERSION or a config field/default, and then deliberately
# (last: NUMERICS_VERSION 4).
CACHE_KEYS = {
    "Config()": DEFAULT_CONFIG_HASH,
    "fig2": "9a5a514a740752bf",
    "planted-adam": "473e541eca04d9e6",
    "heads_key()": "9ef9f26a744e13ea",
    "expressivity_key()": "40a5da3d06cc5ab1",
    "heads_key(QUICK_HEADS)": "4cc51fba7f9b6f43",
    "expressivity_key(QUICK_EXPRESSIVITY)": "068e97bd1e7e2e01",
}


def test_cache_keys_are_unchanged():
    from dynamics.config.schema import Config, preset

    got = {
        "Config()": Config().hash(),
        "fig2": preset("fig2").hash(),
        "planted-adam": preset("planted-adam").hash(),
        "heads_key()": bottleneck.heads_key(),
        "expressivity_key()": bottleneck.expressivity_key(),
        "heads_key(QUICK_HEADS)": bottleneck.heads_key(bottleneck.QUICK_HEADS),
        "expressivity_key(QUICK_EXPRESSIVITY)": bottleneck.expressivity_key(bottleneck.QUICK_EXPRESSIVITY),
    }
    assert got == CACHE_KEYS
