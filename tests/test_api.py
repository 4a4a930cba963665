"""The notebook API: exports, keyword overrides, tables, figures from memory, run records,
no backend switch at import, the demos' room flags and the mhsim console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import dynamics
from dynamics import load_results, preset, run_sweep
from dynamics.config.schema import ConfigError
from dynamics.sweeps.result_files import write_results

ROOT = Path(__file__).resolve().parent.parent
SMALL = dict(heads=[1, 3], steps=6, trials=2, n_train=12, n_test=10, tokens=4, width=8, irrelevant_means=2)


@pytest.fixture(scope="module")
def result():
    # the run tests/test_figures_heads.py draws (init="normal" too): one compile serves both files
    return run_sweep(preset("fig2"), progress=False, head_sims=True, init="normal", **SMALL)


def test_keyword_overrides_use_the_command_lines_names(result):
    cfg = result.config
    assert cfg.name == "fig2" and cfg.sweep.heads == (1, 3) and cfg.optim.steps == 6
    assert (cfg.data.T, cfg.data.d, cfg.data.n_irrelevant) == (4, 8, 2)
    assert cfg.optim.lr == preset("fig2").optim.lr  # untouched fields keep the preset's values
    assert dynamics.with_overrides("fig2", heads="1,2", lr_scaling="linear").sweep.heads == (1, 2)
    with pytest.raises(ConfigError, match=r"unknown override stpes=5 \(did you mean 'steps'\?\)"):
        dynamics.with_overrides(None, stpes=5)
    with pytest.raises(ConfigError, match="optim.lr"):
        run_sweep(None, lr=-1.0)  # validated before anything runs


def test_to_dataframe_is_tidy_and_holds_every_curve_value(result):
    df = result.to_dataframe()
    n_h, trials, L = result.curves["train_loss"].shape
    assert len(df) == n_h * trials * L
    per_run = {k: v for k, v in result.curves.items() if not k.startswith("head_")}
    assert {"H", "trial", "step", "lr", *per_run} <= set(df.columns)
    for i, h in enumerate(result.heads):  # every value at its (H, trial, step), looked up by label
        for t in range(trials):
            rows = df[(df.H == h) & (df.trial == t)].sort_values("step")
            np.testing.assert_array_equal(rows.step.to_numpy(), result.steps)
            for name, values in per_run.items():
                np.testing.assert_array_equal(rows[name].to_numpy(), values[i, t])


def test_head_frame_holds_every_existing_heads_value(result):
    df = result.head_frame()
    n_h, trials, L, h_max = result.curves["head_u_norm"].shape
    assert len(df) == trials * L * int(np.sum(result.heads))  # a row per head that exists
    assert df["head"].max() == h_max - 1 and not (df["head"] >= df.H).any()
    for i, h in enumerate(result.heads):
        for t in range(trials):
            for j in range(h):
                rows = df[(df.H == h) & (df.trial == t) & (df["head"] == j)].sort_values("step")
                np.testing.assert_array_equal(rows.step.to_numpy(), result.head_steps)
                norms = result.curves["head_u_norm"][i, t, :, j]
                np.testing.assert_array_equal(rows.u_norm.to_numpy(), norms)
                for k in range(h_max):  # a head-head matrix becomes one column per other head
                    want = result.curves["head_u_sim"][i, t, :, j, k]
                    np.testing.assert_array_equal(rows[f"u_sim_{k}"].to_numpy(), want)


def test_summary_frame_is_the_summary(result):
    frame = result.summary_frame()
    for row in result.summary():
        got = frame.loc[row["H"]]
        assert got.n_diverged == row["n_diverged"]
        for name in ("train_loss", "test_loss", "train_error", "test_error"):
            final = result.curves[name][list(result.heads).index(row["H"]), :, -1]
            assert got[f"{name}_mean"] == pytest.approx(np.mean(final), rel=1e-12)
            assert got[f"{name}_std"] == pytest.approx(np.std(final), rel=1e-12, abs=1e-15)


def test_a_run_folder_loads_as_the_same_result_and_records_who_made_it(result, tmp_path):
    write_results(result, tmp_path)
    back = load_results(tmp_path)
    assert back.config == result.config and back.config.hash() == result.config.hash()
    np.testing.assert_array_equal(back.heads, result.heads)
    np.testing.assert_array_equal(back.diverged_at, result.diverged_at)
    for name in result.curves:
        np.testing.assert_array_equal(back.curves[name], result.curves[name])
    record = json.loads((tmp_path / "results.json").read_text())["run"]
    assert set(record) == {"mhsim_version", "git_commit", "argv", "created_utc"}
    assert record["argv"] == sys.orig_argv and record["created_utc"].endswith("Z")
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert record["git_commit"] == head.stdout.strip()


def test_figures_come_back_from_memory_unclosed(result, tmp_path):
    import matplotlib.pyplot as plt

    from figures import save_figure, sweep_figure

    fig = sweep_figure(result)
    assert plt.fignum_exists(fig.number)  # not closed: a notebook shows it
    write_results(result, tmp_path)
    from_disk = sweep_figure(tmp_path)
    assert [a.get_title(loc="left") for a in fig.axes] == [a.get_title(loc="left") for a in from_disk.axes]
    paths = save_figure(fig, tmp_path / "f", close=False)
    assert all(p.stat().st_size > 0 for p in paths) and plt.fignum_exists(fig.number)
    plt.close("all")


def test_no_module_switches_the_matplotlib_backend_at_import():
    code = (
        "import matplotlib; matplotlib.use('svg')\n"
        "import figures.sweep, figures.bottleneck, figures.phase, figures.theory, figures.heads\n"
        "import dynamics.demo, dynamics.api\n"
        "print(matplotlib.get_backend())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "svg"


@pytest.mark.slow
def test_demo_slides_with_heads_and_lr_write_a_16_by_9_picture(tmp_path, capsys):
    from dynamics.demo.__main__ import main

    assert (
        main(
            [
                "attention",
                "--quick",
                "--slides",
                "--heads",
                "1,4",
                "--lr",
                "2",
                "--quiet",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    w, h = Image.open(tmp_path / "attention.png").size
    assert w * 9 == h * 16
    assert "H=1" in capsys.readouterr().out and (tmp_path / "attention.gif").exists()
    for bad, needle in (
        (["--heads", "0,2"], "--heads=0,2"),
        (["--lr", "-1"], "--lr=-1.0"),
        (["--steps", "0"], "--steps=0"),
        (["--heads", "1,100000"], "in [1, 256]"),  # 10⁵ heads took 19 GB in lazy-vs-rich
    ):
        assert main(["symmetry", "--quick", "--out", str(tmp_path / "x"), *bad]) == 2
        assert needle in capsys.readouterr().err
        assert not (tmp_path / "x").exists()


def test_mhsim_console_script_dispatches_to_the_python_m_forms(capsys):
    from dynamics.cli.main import main

    assert main(["demo", "--list"]) == 0
    assert "attention" in capsys.readouterr().out
    assert main(["figures", "--list"]) == 0
    assert "fig2" in capsys.readouterr().out
    assert main(["rn"]) == 2
    assert "unknown command 'rn'" in capsys.readouterr().err
    assert main([]) == 2


def test_readme_is_a_short_front_page_whose_links_exist():
    import re

    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 8 * 1024
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert targets
    for target in targets:
        assert (ROOT / target).exists(), target
    for doc in (ROOT / "docs").glob("*.md"):  # the pages it links to link to files that exist
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name}: {target}"
