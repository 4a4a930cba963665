"""The teaching demos on their --quick settings: they run, write readable pictures, and show what
they claim (zero-init heads never differ, the tangent model is first-order exact, H heads at
step η are one head with key-query step η/H). Each demo's compute returns the arrays its result
type documents, and its draw functions render from given arrays alone."""

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from dynamics import demo
from dynamics.core import inits
from dynamics.core import model as mdl
from dynamics.demo import attention, common, lazy_rich, step_size, symmetry
from dynamics.demo.__main__ import main
from dynamics.demo.common import Animation, first_heads, schedule

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


@pytest.mark.slow_cases("step-size")
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


@pytest.mark.slow
def test_attention_demo_has_a_gif_and_attention_moves_to_relevant_tokens(ran):
    _, result = ran("attention")
    assert {p.suffix for p in result.files} == {".png", ".gif"}
    quick = demo.attention.QUICK
    assert result.numbers["mass_uniform"] == pytest.approx(1 / quick.T)  # r = max(1, round(0.1·T)) = 1
    assert result.numbers[f"mass_final_H{quick.heads[0]}"] > result.numbers["mass_uniform"]


@pytest.mark.slow
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


@pytest.mark.slow
def test_lazy_demo_more_heads_move_less(ran):
    _, result = ran("lazy-vs-rich")
    small, large = demo.lazy_rich.QUICK.heads
    assert result.numbers[f"movement_H{large}"] < result.numbers[f"movement_H{small}"]
    assert result.numbers[f"loss_gap_H{large}"] < result.numbers[f"loss_gap_H{small}"]


def result_shapes(module, s) -> dict[str, tuple[int, ...]]:
    """The shape of every field of ``module``'s compute result for settings ``s``, as its result
    type's comments document them (``()`` for a plain number)."""
    H, L = len(s.heads), len(schedule(s.steps, s.log_points)[0])
    if module is attention:
        k, T = s.examples, s.T
        curve = (H, L)
        return dict(
            heads=(H,), steps=(L,), attn=(H, L, k, T), mass=curve, train_loss=curve, test_loss=curve,
            mask=(k, T), labels=(k,), uniform=(),
        )  # fmt: skip
    if module is symmetry:
        grid = (2, H, s.trials, L)
        return dict(heads=(H,), steps=(L,), diversity=grid, train_loss=grid, test_loss=grid)
    if module is lazy_rich:
        grid = (H, s.trials, L)
        names = ("model_loss", "lin_loss", "model_movement", "lin_movement")
        return dict(heads=(H,), steps=(L,), **{n: grid for n in names})
    assert module is step_size
    curve, per_head = (H, L), (len(step_size.QUANTITIES), H)
    names = ("loss_many", "loss_one", "w_norm_many", "w_norm_one")
    return dict(heads=(H,), steps=(L,), **{n: curve for n in names}, max_diff=per_head, max_value=per_head)


MODULES = [attention, symmetry, lazy_rich, step_size]


@pytest.mark.slow_cases("step-size")
@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_compute_returns_the_documented_arrays(ran, module):
    """run() passes compute's result on in DemoResult.arrays: check it there (no second training)."""
    r = ran(module.NAME)[1].arrays
    expected = result_shapes(module, module.QUICK)
    assert list(r._fields) == list(expected)
    for name, shape in expected.items():
        value = getattr(r, name)
        assert np.shape(value) == shape, name
        if shape:
            assert isinstance(value, np.ndarray), name
    np.testing.assert_array_equal(r.heads, module.QUICK.heads)
    np.testing.assert_array_equal(r.steps, schedule(module.QUICK.steps, module.QUICK.log_points)[0])


def hand_made(module, s, seed=0):
    """A result of ``module``'s type for settings ``s``, made of random numbers: no training."""
    rng = np.random.default_rng(seed)
    fields = {}
    for name, shape in result_shapes(module, s).items():
        fields[name] = float(rng.uniform(0.05, 0.3)) if shape == () else rng.uniform(0.01, 1.0, shape)
    fields["heads"] = np.array(s.heads)
    fields["steps"] = schedule(s.steps, s.log_points)[0]
    if module is attention:
        k, T = fields["mask"].shape
        fields["mask"] = np.arange(T)[None, :] == rng.integers(0, T, (k, 1))  # one relevant token a row
        fields["labels"] = np.where(np.arange(k) % 2 == 0, 1.0, -1.0)
    if module is symmetry:
        fields["diversity"][0] = 0.0  # zero-init heads stay equal
    return fields


RESULT_TYPES = {
    attention: attention.AttentionRun,
    symmetry: symmetry.SymmetryRun,
    lazy_rich: lazy_rich.LazyRichRun,
    step_size: step_size.StepSizeRun,
}

# Where each figure shows a given array: (axes index, the first line's y data expected).
FIRST_LINE = {
    symmetry: lambda r: (0, r.diversity[1, 1].mean(axis=0)),  # random init, the first H > 1
    lazy_rich: lambda r: (0, r.model_loss[0].mean(axis=0)),
    step_size: lambda r: (0, r.loss_many[0]),
}


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_draw_renders_from_given_arrays_without_training(monkeypatch, module):
    """draw (and attention's draw_animation) build complete figures from a hand-made result, for
    settings the demo never computed; JAX, the data and the training are replaced by failures in
    the demo's module, so nothing is recomputed."""
    from matplotlib import pyplot as plt

    def no_training(*args, **kwargs):
        raise AssertionError("a draw function trained or drew data")

    trainers = [n for n in vars(module) if n.startswith("train_")]
    for name in ("compute", *trainers):
        monkeypatch.setattr(module, name, no_training)
    for name in ("dm1_data", "train_logged"):  # the shared data and training, looked up in common
        monkeypatch.setattr(common, name, no_training)
    for name in ("jax", "jnp", "mdl"):
        monkeypatch.setattr(module, name, None)
    s = dataclasses.replace(module.QUICK, heads=(1, 2, 8), steps=30, log_points=7)
    r = RESULT_TYPES[module](**hand_made(module, s))
    fig = module.draw(r, s)
    fig.canvas.draw()  # render: layout, ticks and text all resolve
    if module is attention:
        assert len(fig.axes) == len(s.heads) * s.snapshots + 2  # heatmaps, the mass panel, a colorbar
        np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), r.attn[0, 0])
    else:
        assert len(fig.axes) == 3
        ax, expected = FIRST_LINE[module](r)
        np.testing.assert_array_equal(fig.axes[ax].lines[0].get_ydata(), expected)
    plt.close(fig)
    if module is attention:
        anim = module.draw_animation(r, s)
        assert isinstance(anim, Animation) and anim.frames[-1] == len(r.steps) - 1
        for i in anim.frames:
            anim.draw_frame(i)
        anim.fig.canvas.draw()
        np.testing.assert_array_equal(anim.fig.axes[0].images[0].get_array(), r.attn[0, -1])
        plt.close(anim.fig)
    numbers, lines = module.report(r, s)
    assert lines and all(np.isfinite(v) for v in numbers.values())


def _random_problem(seed, n_heads=3, d=6, T=4, n=5):
    """θ₀ (entries N(0, 1/d), init_params' normal init), X (n, T, d) and a direction v, in float64
    from numpy draws: no per-shape random-number programs to compile."""
    rng = np.random.default_rng(seed)
    shapes = inits.head_shapes(d)
    params0 = {k: jnp.asarray(rng.normal(size=(n_heads, *s)) / np.sqrt(d)) for k, s in shapes.items()}
    X = jnp.asarray(rng.normal(size=(n, T, d)))
    direction = {k: jnp.asarray(rng.normal(size=v.shape)) for k, v in params0.items()}
    return params0, X, direction


@pytest.mark.parametrize("which", ["logits", "first_heads"])
def test_linearised_model_agrees_to_first_order(x64, which):
    """|Φ(θ₀ + εv) − Φ_lin(θ₀ + εv)| = O(ε²): the error falls 4× each time ε halves (float64)."""
    params0, X, v = _random_problem(1)
    # The tangent model built inside jit, as the demo's training builds it: jax.linearize evaluates
    # Φ(θ₀), which op by op compiled every primitive of Φ; one compile each for fn and lin.
    if which == "logits":
        fn = lambda p: mdl.logits(p, X, norm="sqrt")  # noqa: E731
        lin = lambda p: lazy_rich.linearized_logits(params0, X)(p)  # noqa: E731
    else:  # the model the demo trains: the first 2 of 3 stored heads, the third of weight 0
        fn = lambda p: mdl.logits(p, X, weight=first_heads(jnp.float64(2), 3), n_heads=jnp.float64(2))  # noqa: E731
        lin = lambda p: lazy_rich.linearized(fn, params0)(p)  # noqa: E731
    fn, lin = jax.jit(fn), jax.jit(lin)
    np.testing.assert_allclose(lin(params0), fn(params0), rtol=1e-15, atol=1e-15)

    def at(eps):
        return jax.tree_util.tree_map(lambda p, d: p + eps * d, params0, v)

    @jax.jit
    def deviations(e):  # (‖Φ − Φ_lin‖_∞, ‖Φ_lin − Φ_lin(θ₀)‖_∞) at θ₀ + εv: one program for every ε
        fe, le = fn(at(e)), lin(at(e))
        return jnp.max(jnp.abs(fe - le)), jnp.max(jnp.abs(le - lin(params0)))

    eps = [2.0**-k for k in range(6, 11)]
    errors, first_order = np.array([[float(x) for x in deviations(jnp.float64(e))] for e in eps]).T
    assert np.all(errors < 0.1 * first_order)  # the linear term dominates
    ratios = errors[:-1] / errors[1:]
    np.testing.assert_allclose(ratios, 4.0, rtol=0.1)


def test_first_heads_weight_is_the_H_head_model_and_empty_slots_get_no_gradient(x64):
    """The demos' padding: weight 0 slots change nothing in Φ and get exactly zero gradient."""
    params, X, _ = _random_problem(2, n_heads=5)
    first3 = {k: np.asarray(v)[:3] for k, v in params.items()}  # numpy: no op-by-op slices
    n_heads = np.float64(3)
    w = jax.jit(first_heads, static_argnums=1)(n_heads, 5)  # one program, not its every op
    np.testing.assert_array_equal(w, [1.0, 1.0, 1.0, 0.0, 0.0])

    def padded(p):
        return mdl.logits(p, X, weight=w, n_heads=n_heads)

    np.testing.assert_allclose(
        jax.jit(padded)(params), jax.jit(mdl.logits)(first3, X), rtol=1e-13, atol=1e-14
    )
    grads = jax.jit(jax.grad(lambda p: jnp.sum(padded(p))))(params)
    for name, g in grads.items():
        g = np.asarray(g)  # the checks in numpy: no op-by-op programs
        assert np.all(g[3:] == 0.0), name
        assert np.any(g[:3] != 0.0), name


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
