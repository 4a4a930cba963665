"""figures/: every figure renders from small saved results; python -m figures caches by config hash."""

import dataclasses
import io
import json
import re
import shutil
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

import figures.registry as registry  # noqa: E402
from dynamics.cli.figures import GALLERY_WIDTH, main  # noqa: E402
from dynamics.config.schema import apply_overrides, preset, validate  # noqa: E402
from dynamics.infra.files import atomic_write_bytes  # noqa: E402
from dynamics.parts.metrics import has_head_axes  # noqa: E402
from dynamics.sweeps.result_files import load_results, write_results  # noqa: E402
from dynamics.sweeps.sweep import run_sweep  # noqa: E402
from figures.registry import FIGURES, PRESET_FIGURES, Entry, ensure_results, sweep_entry  # noqa: E402
from figures.sweep import plot_final_vs_heads, plot_sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# A preset shrunk to seconds: two H, 60 steps (> 50, so the time axis is logarithmic), 2 trials.
TINY = {
    "data": {"n_train": 16, "n_test": 20},
    "optim": {"steps": 60},
    "sweep": {"heads": (1, 4), "trials": 2, "log_points": 12},
}


def tiny(name: str, **sweep):
    cfg = apply_overrides(preset(name), TINY, "test")
    return validate(dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, **sweep)))


def check_png(path: Path) -> None:
    assert path.stat().st_size > 1000
    with Image.open(path) as im:
        im.verify()  # raises on a truncated or corrupt file
    with Image.open(path) as im:
        assert im.format == "PNG" and im.width > 100 and im.height > 100


def pdf_font_types(data: bytes) -> set[str]:
    """The font subtypes a PDF declares (matplotlib writes its font objects uncompressed):
    Type3 for matplotlib's default, Type0/CIDFontType2 (or TrueType) for Type 42 embedding."""
    found = re.findall(rb"/Subtype\s*/(Type3|Type1|TrueType|Type0|CIDFontType0|CIDFontType2)\b", data)
    return {f.decode() for f in found}


def check_pdf(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(b"%PDF") and b"%%EOF" in data[-64:]
    fonts = pdf_font_types(data)  # TrueType (Type 42) fonts only: venues reject Type 3
    assert "Type3" not in fonts and fonts & {"TrueType", "CIDFontType2"}, fonts


def rewrite(src: Path, dst: Path, edit) -> Path:
    """Copy saved results from src to dst after ``edit(meta, curves)`` changed them in place."""
    from dynamics.api import config_from_dict

    meta, curves = load_results(src)
    edit(meta, curves)
    meta["config_hash"] = config_from_dict(meta["config"]).hash()  # an edit the figures must draw, not damage
    side = {k: v for k, v in curves.items() if k.startswith(("planted_", "param_"))}
    curves = {k: v for k, v in curves.items() if k not in side}
    for name, prefix in (("directions.npz", "planted_"), ("params.npz", "param_")):
        arrays = {k.removeprefix(prefix): v for k, v in side.items() if k.startswith(prefix)}
        if arrays:  # the side files the run wrote travel with it
            write_npz(dst / name, arrays)
    write_npz(dst / "curves.npz", curves)
    atomic_write_bytes(dst / "results.json", json.dumps(meta).encode())
    return dst


def write_npz(path: Path, arrays: dict) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny saved sweep (one compile), the folder of its results."""
    out = tmp_path_factory.mktemp("results") / "fig2"
    write_results(run_sweep(tiny("fig2"), progress=False), out)
    return out


@pytest.mark.slow_cases("fig3-gd", "planted-adam")
@pytest.mark.parametrize("name", PRESET_FIGURES)
def test_each_preset_figure_renders_from_saved_results(saved, tmp_path, name):
    # The tiny sweep's curves under each preset's (tiny) config: the title, labels and axes
    # follow the config's data model and optimiser, and no extra simulation is needed.
    def as_preset(meta, curves):
        meta["config"] = tiny(name).to_dict()
        if name.startswith("planted"):  # dm1's planted directions are not the planted model's
            meta.pop("directions", None)
            for key in [k for k in curves if k in ("head_u_cos", "head_key_cos")]:
                del curves[key]

    folder = rewrite(saved, tmp_path / "results", as_preset)
    paths = FIGURES[name].plot(folder, tmp_path / name)
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    check_png(paths[0])
    check_pdf(paths[1])


def test_plot_sweep_short_run_uses_linear_time(saved, tmp_path):
    """A run of a few steps (as in the CLI tests) has a linear time axis and still renders."""

    def first_steps(meta, curves):
        keep = curves["steps"] <= 5
        view = curves.get("head_steps", curves["steps"])  # the per-head view's own steps
        for key, arr in curves.items():
            if arr.ndim >= 3:  # (heads, trials, L) and the per-head curves (heads, trials, L_h, H, …)
                curves[key] = arr[:, :, view <= 5] if has_head_axes(key) else arr[:, :, keep]
        curves["steps"] = curves["steps"][keep]
        if "head_steps" in curves:
            curves["head_steps"] = view[view <= 5]
        meta["config"]["optim"]["steps"] = int(curves["steps"][-1])  # the config's schedule, too
        meta["steps"] = [int(s) for s in curves["steps"]]

    folder = rewrite(saved, tmp_path / "results", first_steps)
    png, pdf = plot_sweep(folder, tmp_path / "figure")
    check_png(png)
    check_pdf(pdf)


def with_divergence(meta, curves):
    """Every trial of the first H and one trial of the last diverged (NaN from then on)."""
    steps = curves["steps"]
    div = curves["diverged_at"].copy()
    div[0, :] = steps[3]
    div[-1, 0] = steps[-4]
    for i, j in zip(*np.nonzero(div >= 0), strict=True):
        for arr in curves.values():
            if arr.ndim == 3:
                arr[i, j, steps >= div[i, j]] = np.nan
    curves["diverged_at"] = div
    for i, row in enumerate(meta["summary"]):
        row["n_diverged"] = int((div[i] >= 0).sum())
        row["diverged"] = bool(row["n_diverged"])


def test_diverged_heads_are_marked_not_dropped(saved, tmp_path):
    folder = rewrite(saved, tmp_path / "div", with_divergence)
    png, pdf = plot_sweep(folder, tmp_path / "figure")
    check_png(png)
    check_pdf(pdf)
    meta, curves = load_results(folder)
    fig, (ax_train, ax_test) = plt.subplots(2, 1)
    plot_final_vs_heads(ax_train, ax_test, meta, curves)
    for ax in (ax_train, ax_test):
        texts = sorted(t.get_text() for t in ax.texts)
        assert texts == ["1/2 div.", "2/2 div."]
        assert "diverged trials" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)


@pytest.mark.slow
def test_cache_reused_then_invalidated_by_a_config_change(tmp_path, monkeypatch):
    calls = []

    def counting_run_sweep(exp, progress=True):
        calls.append(exp.config.hash())  # the registry resolves the config once, then runs it
        return run_sweep(exp, progress=False)

    monkeypatch.setattr(registry, "run_sweep", counting_run_sweep)
    cfg = tiny("fig2")
    monkeypatch.setitem(FIGURES, "tiny", sweep_entry(cfg, "a tiny sweep"))
    out = tmp_path / "out"
    assert main(["tiny", "--out", str(out), "--quiet"]) == 0
    assert calls == [cfg.hash()]
    assert json.loads((out / "tiny" / "results.json").read_text())["config_hash"] == cfg.hash()
    check_png(out / "tiny.png")
    check_pdf(out / "tiny.pdf")

    # Same config: the saved results are reused; the simulator must not run.
    def failing_run_sweep(cfg, progress=True):
        raise AssertionError("run_sweep called although cached results match")

    monkeypatch.setattr(registry, "run_sweep", failing_run_sweep)
    (out / "tiny.png").unlink()
    assert main(["tiny", "--out", str(out), "--quiet"]) == 0
    check_png(out / "tiny.png")

    # A changed config (another seed) has another hash: the experiment runs again.
    changed = tiny("fig2", seed=1)
    assert changed.hash() != cfg.hash()
    monkeypatch.setitem(FIGURES, "tiny", sweep_entry(changed))
    with pytest.raises(AssertionError, match="cached results match"):
        main(["tiny", "--out", str(out), "--quiet"])
    monkeypatch.setattr(registry, "run_sweep", counting_run_sweep)
    assert main(["tiny", "--out", str(out), "--quiet"]) == 0
    assert calls == [cfg.hash(), changed.hash()]
    assert json.loads((out / "tiny" / "results.json").read_text())["config_hash"] == changed.hash()

    # --force re-runs even though the results match.
    assert ensure_results(FIGURES["tiny"], out / "tiny", force=True, progress=False) == "forced"
    assert calls == [cfg.hash(), changed.hash(), changed.hash()]


def test_ensure_results_status_and_broken_entry(tmp_path):
    entry = sweep_entry(tiny("fig2"))
    assert ensure_results(entry, tmp_path / "r", progress=False) == "produced"
    assert ensure_results(entry, tmp_path / "r", progress=False) == "reused"
    (tmp_path / "r" / "results.json").write_text("{not json")
    assert ensure_results(entry, tmp_path / "r", progress=False) == "produced"
    other = sweep_entry(tiny("fig2", seed=2))
    assert ensure_results(other, tmp_path / "r", progress=False) == "replaced"

    lazy = Entry("writes nothing", key=lambda: "abc", produce=lambda d, p: None, plot=plot_sweep)
    with pytest.raises(RuntimeError, match="config_hash='abc'"):
        ensure_results(lazy, tmp_path / "empty")


def test_gallery_png_is_small_and_unknown_names_are_refused(saved, tmp_path, monkeypatch, capsys):
    entry = dataclasses.replace(FIGURES["fig2"], key=lambda: load_results(saved)[0]["config_hash"])
    monkeypatch.setitem(FIGURES, "fig2", entry)
    out = tmp_path / "out"
    # Reuse the tiny fig2 results as the cache (their hash is this entry's key).
    shutil.copytree(saved, out / "fig2")
    assert main(["fig2", "--out", str(out), "--gallery", str(tmp_path / "docs"), "--quiet"]) == 0
    small = tmp_path / "docs" / "fig2.png"
    check_png(small)
    with Image.open(small) as im:
        assert im.width == GALLERY_WIDTH
    assert small.stat().st_size < 150_000

    assert main(["fig-2"]) == 2
    assert "unknown figure 'fig-2' (did you mean 'fig2'?)" in capsys.readouterr().err


def test_module_lists_the_figures(capsys):
    from figures.__main__ import main

    assert main(["--list"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(FIGURES)


def test_registry_docstring_example_is_the_registration_code():
    """The ``::`` example of figures.registry's docstring runs and builds the entry the registry holds."""
    lines = registry.__doc__.split("::\n", 1)[1].splitlines()
    block = []
    for line in lines:
        if line and not line.startswith(" "):
            break
        block.append(line)
    namespace = {**vars(registry), "FIGURES": {}}
    exec(textwrap.dedent("\n".join(block)), namespace)
    assert namespace["FIGURES"] and namespace["FIGURES"] == {k: FIGURES[k] for k in namespace["FIGURES"]}


@pytest.mark.stress  # long: `make stress` and CI run it
def test_bottleneck_figure_is_written_through_the_atomic_save(tmp_path, monkeypatch):
    import figures.sweep
    from dynamics.experiments import bottleneck
    from figures.bottleneck import plot_expressivity

    cfg = dataclasses.replace(bottleneck.QUICK_EXPRESSIVITY, tokens=(3,), steps=20)
    bottleneck.produce_expressivity(tmp_path, progress=False, cfg=cfg)
    written, real = [], figures.sweep.atomic_write_bytes
    monkeypatch.setattr(figures.sweep, "atomic_write_bytes", lambda p, b: (written.append(p), real(p, b)))
    paths = plot_expressivity(tmp_path, tmp_path / "figure")
    assert written == paths == [tmp_path / "figure.png", tmp_path / "figure.pdf"]
    check_png(paths[0])
    check_pdf(paths[1])


def test_every_pdf_embeds_truetype_fonts_whatever_the_theme(saved, tmp_path):
    """matplotlib's default writes Type 3 fonts (the check below sees them); save_figure writes
    Type 42 for a figure drawn under matplotlib's defaults too, and the theme sets it for
    anyone's savefig."""
    from figures.sweep import save_figure
    from figures.theme import set_theme

    def text_figure():
        fig = plt.figure(figsize=(3, 2))
        fig.text(0.1, 0.5, "η₀ = 0.5, H = 4: test loss")
        return fig

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        buf = io.BytesIO()
        fig = text_figure()
        fig.savefig(buf, format="pdf")
        plt.close(fig)
        assert "Type3" in pdf_font_types(buf.getvalue())  # what save_figure must not write
        check_pdf(save_figure(text_figure(), tmp_path / "defaults")[1])
        set_theme()
        fig = text_figure()
        fig.savefig(tmp_path / "themed.pdf")
        plt.close(fig)
        check_pdf(tmp_path / "themed.pdf")
    check_pdf(plot_sweep(saved, tmp_path / "sweep")[1])


def test_figures_are_drawn_beside_the_next_experiment(tmp_path, monkeypatch, capsys):
    """A figure is drawn in a thread while the next experiment runs: every figure is written
    and reported, each once, and a plot that fails fails the command (it is not lost)."""
    import threading

    drawn_in = []
    entry = sweep_entry(tiny("fig2"), "a tiny sweep")
    real_plot = entry.plot

    def plot(results_dir, stem):
        drawn_in.append(threading.current_thread().name)
        return real_plot(results_dir, stem)

    for name, seed in (("first", 0), ("second", 1)):
        counted = dataclasses.replace(sweep_entry(tiny("fig2", seed=seed)), plot=plot)
        monkeypatch.setitem(FIGURES, name, counted)
    out = tmp_path / "out"
    assert main(["first", "second", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    for name in ("first", "second"):
        check_png(out / f"{name}.png")
        check_pdf(out / f"{name}.pdf")
        assert printed.count(f"wrote {out / name}.png") == 1
    assert len(drawn_in) == 2 and all(t.startswith("mhsim-figure") for t in drawn_in)

    def broken(results_dir, stem):
        raise RuntimeError("the plot broke")

    monkeypatch.setitem(FIGURES, "first", dataclasses.replace(entry, plot=broken))
    with pytest.raises(RuntimeError, match="the plot broke"):
        main(["first", "second", "--out", str(out), "--quiet"])
