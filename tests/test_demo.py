"""The teaching demos on their --quick settings: they run, write readable pictures, and show what
they claim (zero-init heads never differ, the tangent model is first-order exact, H heads at
step η are one head with key-query step η/H)."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from dynamics import demo
from dynamics import model as mdl
from dynamics.demo import lazy_rich
from dynamics.demo.__main__ import main
from dynamics.demo.common import first_heads

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Each demo run once (quick), on first use: name -> (output folder, DemoResult)."""
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(name)
            cache[name] = (out, demo.run_demo(name, out, quick=True, progress=False))
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(demo.DEMOS))
def test_demo_writes_readable_pictures(ran, name):
    out, result = ran(name)
    assert result.files and all(Path(p).parent == out for p in result.files)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        Path(p).name for p in result.files
    )  # no temp files
    for path in result.files:
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG_MAGIC
            with Image.open(path) as im:
                im.verify()
            with Image.open(path) as im:
                assert im.size[0] >= 600 and im.size[1] >= 300, im.size
        else:
            assert path.suffix == ".gif"
            with Image.open(path) as im:
                assert im.format == "GIF" and im.n_frames > 1
    assert all(np.isfinite(v) for v in result.numbers.values())


def test_attention_demo_has_a_gif_and_attention_moves_to_relevant_tokens(ran):
    _, result = ran("attention")
    assert {p.suffix for p in result.files} == {".png", ".gif"}
    quick = demo.attention.QUICK
    assert result.numbers["mass_uniform"] == pytest.approx(1 / quick.T)  # r = max(1, round(0.1·T)) = 1
    assert result.numbers[f"mass_final_H{quick.heads[0]}"] > result.numbers["mass_uniform"]


def test_symmetry_demo_zero_init_diversity_is_exactly_zero(ran):
    _, result = ran("symmetry")
    assert result.numbers["zero_init_diversity_max"] == 0.0
    assert result.numbers["random_init_diversity_min"] > 0.0  # the random init does break the symmetry


def test_step_size_demo_runs_agree_to_float_tolerance(ran):
    _, result = ran("step-size")
    for h in demo.step_size.QUICK.heads:
        assert result.numbers[f"w_norm_final_H{h}"] > 0.01  # the key-query matrices did move
        for key in ("train_loss", "U", "W"):
            assert result.numbers[f"max_abs_diff_{key}_H{h}"] < 2e-6, (h, key)  # float32 rounding


def test_lazy_demo_more_heads_move_less(ran):
    _, result = ran("lazy-vs-rich")
    small, large = demo.lazy_rich.QUICK.heads
    assert result.numbers[f"movement_H{large}"] < result.numbers[f"movement_H{small}"]
    assert result.numbers[f"loss_gap_H{large}"] < result.numbers[f"loss_gap_H{small}"]


def _random_problem(key, n_heads=3, d=6, T=4, n=5):
    k_p, k_x, k_v = jax.random.split(key, 3)
    params0 = mdl.init_params(k_p, n_heads, d, init="normal", scale=1.0)
    X = jax.random.normal(k_x, (n, T, d))
    leaves, tree = jax.tree_util.tree_flatten(params0)
    keys = jax.random.split(k_v, len(leaves))
    direction = jax.tree_util.tree_unflatten(
        tree, [jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)]
    )
    return params0, X, direction


@pytest.mark.parametrize("which", ["logits", "first_heads"])
def test_linearised_model_agrees_to_first_order(x64, which):
    """|Φ(θ₀ + εv) − Φ_lin(θ₀ + εv)| = O(ε²): the error falls 4× each time ε halves (float64)."""
    params0, X, v = _random_problem(jax.random.PRNGKey(1))
    if which == "logits":
        fn = lambda p: mdl.logits(p, X, norm="sqrt")  # noqa: E731
        lin = lazy_rich.linearized_logits(params0, X)
    else:  # the model the demo trains: the first 2 of 3 stored heads, the third of weight 0
        w = first_heads(jnp.float64(2), 3)
        fn = lambda p: mdl.logits(p, X, weight=w, n_heads=jnp.float64(2))  # noqa: E731
        lin = lazy_rich.linearized(fn, params0)
    fn, lin = jax.jit(fn), jax.jit(lin)  # one compile each instead of op-by-op dispatch
    np.testing.assert_allclose(lin(params0), fn(params0), rtol=1e-15, atol=1e-15)

    def at(eps):
        return jax.tree_util.tree_map(lambda p, d: p + eps * d, params0, v)

    eps = [2.0**-k for k in range(6, 11)]
    errors = np.array([float(jnp.max(jnp.abs(fn(at(e)) - lin(at(e))))) for e in eps])
    first_order = np.array([float(jnp.max(jnp.abs(lin(at(e)) - lin(params0)))) for e in eps])
    assert np.all(errors < 0.1 * first_order)  # the linear term dominates
    ratios = errors[:-1] / errors[1:]
    np.testing.assert_allclose(ratios, 4.0, rtol=0.1)


def test_first_heads_weight_is_the_H_head_model_and_empty_slots_get_no_gradient(x64):
    """The demos' padding: weight 0 slots change nothing in Φ and get exactly zero gradient."""
    params, X, _ = _random_problem(jax.random.PRNGKey(2), n_heads=5)
    first3 = {k: v[:3] for k, v in params.items()}
    n_heads = jnp.float64(3)
    w = first_heads(n_heads, 5)
    np.testing.assert_array_equal(w, [1.0, 1.0, 1.0, 0.0, 0.0])

    def padded(p):
        return mdl.logits(p, X, weight=w, n_heads=n_heads)

    np.testing.assert_allclose(
        jax.jit(padded)(params), jax.jit(mdl.logits)(first3, X), rtol=1e-13, atol=1e-14
    )
    grads = jax.jit(jax.grad(lambda p: jnp.sum(padded(p))))(params)
    for name, g in grads.items():
        assert bool(jnp.all(g[3:] == 0.0)), name
        assert bool(jnp.any(g[:3] != 0.0)), name


def test_cli_list_unknown_name_and_quick_run(tmp_path, capsys):
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in demo.DEMOS)
    assert main(["atention"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown demo 'atention'" in err and "did you mean 'attention'" in err
    assert main([]) == 2
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["symmetry", "--quiet", "--out", str(blocker / "sub")]) == 2  # refused before computing
    assert "cannot create the output folder" in capsys.readouterr().err
    assert main(["symmetry", "--quick", "--quiet", "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "symmetry.png").read_bytes()[:8] == PNG_MAGIC
    assert "wrote" in capsys.readouterr().out
