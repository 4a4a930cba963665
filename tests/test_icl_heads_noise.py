"""icl-heads over the label noise: ``noise_table`` reads a grid over ``--epsilon`` (each point's
final test mse per H) and puts the reference predictors at each σ beside it."""

from __future__ import annotations

import types

import numpy as np
import pytest

from dynamics.config.schema import preset
from dynamics.errors import ConfigError
from dynamics.experiments import icl_heads


@pytest.mark.slow  # a tiny grid's compile: about 10 s here
def test_noise_table_reads_each_point_and_its_own_references():
    from dynamics.api import run_grid

    res = run_grid(
        "icl-heads", epsilon=[0.1, 1.0], heads=[1, 2], steps=3, n_test=64, batch_size=8, T=6, d=3,
        head_size=3, temperature=3**-0.5, trials=2, progress=False,
    )  # fmt: skip
    rows = icl_heads.noise_table(res, sequences=2000, fit_sequences=500)
    assert [r["sigma2"] for r in rows] == pytest.approx([0.01, 1.0])  # σ² = ε², the axis' values
    final = np.asarray(res.curves["test_loss"], np.float64)[..., -1]  # (H values, points, trials)
    for k, row in enumerate(rows):
        assert row["v"] == pytest.approx(0.2) and row["L"] == 5  # the preset's v = 1/5; L = T − 1
        for i, h in enumerate((1, 2)):
            assert row[f"trials_H{h}"] == final[i, k].tolist()
            assert row[f"mse_H{h}"] == pytest.approx(final[i, k].mean(), rel=1e-12)
        # one GD step in closed form at D = 2, L = 5: vD − (vD)²/E‖g‖² + σ², E‖g‖² = vD + ((D+1)vD + σ²D)/L
        b2 = 0.2 * 2
        g2 = b2 + (3 * b2 + row["sigma2"] * 2) / 5
        assert row["ref_gd_step"] == pytest.approx(b2 - b2 * b2 / g2 + row["sigma2"], rel=1e-12)
        assert row["se_gd_step"] is None and row["se_ridge"] > 0
    assert rows[1]["ref_ridge"] > rows[0]["ref_ridge"] + 0.5  # more label noise, a larger Bayes error
    table = icl_heads.noise_markdown(rows).splitlines()
    assert table[0].startswith("| σ² | v | H = 1 | H = 2 | one GD step") and len(table) == 4


def test_noise_table_refuses_a_plain_sweep_and_other_data():
    with pytest.raises(ConfigError, match="reads a grid"):
        icl_heads.noise_table(object())
    other = types.SimpleNamespace(grid=None, config=preset("max-margin"))
    with pytest.raises(ConfigError, match="reads an icl-linreg grid; got data.model='max-margin'"):
        icl_heads.noise_table(other)
