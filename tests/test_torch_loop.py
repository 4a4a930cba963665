"""The PyTorch loop of ``benchmarks.logging_cost`` (``benchmarks.torch_loop``): the same model, data,
θ(0) and metrics as mhsim, and the FLOP formulas the benchmark's floor is computed from. Skipped
without torch (the ``bench`` extra)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from benchmarks import loop_inputs, torch_loop  # noqa: E402
from benchmarks.logging_cost import forward_flops, step_flops  # noqa: E402

SWEEP = (
    "--data-model dm1 --n-train 24 --n-test 40 --init normal --init-scale 1 --optimizer gd --lr 0.5 "
    "--heads 1,3 --trials 2 --steps 25 --log-every 1 --head-every 2 --head-sims"
).split()


@pytest.fixture(scope="module")
def both():
    """(mhsim's curves (len(heads), trials, L, …), the loop's, reshaped alike) of one small sweep."""
    from dynamics.api import run_sweep
    from dynamics.cli.run import build_parser, config_from_args

    result = run_sweep(config_from_args(build_parser().parse_args(SWEEP)).config, progress=False)
    inputs = loop_inputs.build(SWEEP)
    torch.set_num_threads(1)
    ours = torch_loop.run(inputs)
    mh = {k: np.asarray(v, np.float64) for k, v in result.curves.items()}
    return mh, {k: np.asarray(v, np.float64).reshape(mh[k].shape) for k, v in ours.items()}


@pytest.mark.slow
def test_train_loss_curve_agrees_with_mhsim(both):
    mh, ours = both
    assert mh["train_loss"].shape == (2, 2, 26)
    assert np.all(np.isfinite(mh["train_loss"]))
    assert mh["train_loss"][..., -1].max() < mh["train_loss"][..., 0].min()  # it trained
    np.testing.assert_allclose(ours["train_loss"], mh["train_loss"], rtol=1e-5, atol=0)


@pytest.mark.slow
def test_every_metric_agrees_with_mhsim(both):
    """The loop logs every curve mhsim logs on this sweep (per-head metrics on: H ≤ 16, at the per-head
    view's steps, the head–head matrices asked for), the same values to float32 rounding (the key
    direction's to its stated accuracy); the heads mhsim pads (H = 1 of a sweep up to 3) are NaN in both."""
    mh, ours = both
    assert set(ours) == set(mh) - {"heads", "steps", "diverged_at", "head_steps"}
    assert mh["head_u_norm"].shape[2] == 14  # the per-head view at every 2nd logged step and the last
    assert {"head_key_cos", "head_attn_sim", "diversity"} <= set(ours)
    for name, value in ours.items():
        np.testing.assert_array_equal(np.isnan(value), np.isnan(mh[name]), err_msg=name)
        # the key direction: mhsim's power iteration to its stated accuracy (an angle below 1e-4)
        atol = 1e-4 if name in ("head_key_cos", "head_key_sim", "head_uk_cos") else 2e-6
        np.testing.assert_allclose(value, mh[name], rtol=1e-4, atol=atol, equal_nan=True, err_msg=name)


def test_flop_formulas_match_torch_flop_counter():
    """torch's own count of the loop's matmuls: the forward is exactly ``forward_flops``; a training
    step is ``step_flops`` plus 2·n·H·T: the counter counts the backward's products ∂A_t = ∂f·v_t and
    ∂v_t = ∂f·A_t as matmuls of inner size 1 (2 FLOPs each), the formula as T multiplies each."""
    from torch.utils.flop_counter import FlopCounterMode

    for n, T, d, H in ((7, 5, 4, 3), (11, 10, 32, 2)):
        X, y = torch.randn(n, T, d), torch.sign(torch.randn(n))
        U, W = torch.randn(H, d, requires_grad=True), torch.randn(H, d, d, requires_grad=True)
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            torch_loop.head_outputs(U, W, X)
        assert counter.get_total_flops() == forward_flops(n, T, d, H)
        with FlopCounterMode(display=False) as counter:
            f, _ = torch_loop.head_outputs(U, W, X)
            torch.autograd.grad(torch_loop.loss_of(y * f.sum(1)), (U, W))
        assert counter.get_total_flops() == step_flops(n, T, d, H) + 2 * n * H * T


def test_key_directions_are_the_top_singular_vectors():
    """The twelve squarings give W_h's top left singular vector (float64 SVD as the reference)."""
    gen = torch.Generator().manual_seed(0)
    W = torch.randn(4, 6, 6, generator=gen, dtype=torch.float64)
    keys = torch_loop.key_directions(W)
    top = torch.linalg.svd(W).U[:, :, 0]
    np.testing.assert_allclose((keys * top).sum(1).abs().numpy(), 1.0, atol=1e-10)
