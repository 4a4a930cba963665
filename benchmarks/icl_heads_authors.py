"""The icl-heads preset beside the authors' code (He, Pan, Chen, Yang, ICML 2025;
github.com/XintianPan/ICL_linear).

Their training loop lives in a notebook (``icl_linear.ipynb``), their model and data in modules:
this script loads ``src/models.py`` (``MultiHeadAttentionStack``) and ``utils/data_utils.py``
(``LinearReg``) from a checkout of theirs and trains them as the notebook's settings say: d = 5,
L = 40, σ² = 0.1, one layer, H heads, PyTorch's default init, ``torch.optim.Adam`` at η = 10⁻³
(its defaults otherwise), ``MSELoss`` on y_q, a fresh batch of 256 of their ``LinearReg`` every
step, one seed per run (``torch.manual_seed``). Their notebook validates on one fresh batch of
256 every 1000 steps; here each run is measured on one fixed test set of their own draw (10 000
sequences, ``TEST_SEED``) at mhsim's logged steps. mhsim's side is the preset ``icl-heads`` at
the same steps, H and number of trials (``run_sweep``), or a run folder of it (``--mhsim DIR``,
e.g. written by ``python -m dynamics.run --preset icl-heads --steps N --heads 1,2 --trials S``).

It prints the test mse at the logged steps (mean ± std over seeds / trials, σ² included), each
head's structure at the last step (KQ diagonal share, OV y-share, ω_h and μ_h: the scale of the
x–x block's diagonal times the temperature and the y entry of the readout, whose signs pair the
heads) and the reference predictors: mhsim's (``dynamics.experiments.icl_heads``) beside their
estimators (``utils/funcs.py``'s ``TFEst``, Monte Carlo as their ``plots.ipynb`` draws it, at the
ω, μ their plots use). Nothing of theirs is copied; torch (CPU) must be importable::

    PYTHONPATH=. python benchmarks/icl_heads_authors.py CHECKOUT --steps 5000 --heads 1,2 --seeds 3

``--lengths`` compares instead the trained models of a full-length run folder (``--mhsim DIR``)
with the test mse against the context length stored in their ``plots.ipynb`` (its outputs, less
the σ² that notebook adds twice): at each of their lengths L = 10, 15, …, 100, mhsim's models on
``--sets`` fresh test sets of their size (10⁵ sequences at H = 1, 2·10⁴ otherwise), and per H the
mean and spread over the lengths of the relative difference, which one length's draw does not
move much::

    PYTHONPATH=. python benchmarks/icl_heads_authors.py CHECKOUT --lengths --mhsim RUN --sets 3
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import os
import sys
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from dynamics.core import model as mdl
from dynamics.errors import ConfigError
from dynamics.experiments import icl_heads

ENV = "MHSIM_ICL_HEADS_CHECKOUT"
D, L, SIGMA2, BATCH, LR = 5, 40, 0.1, 256, 1e-3  # their notebook's setting, the preset's
TEST_SEED = 2**20  # their fixed test set's torch seed (apart from every training seed)
THEIR_OMEGA, THEIR_MU = 0.13, 3.45  # the paired heads' ω, μ their plots.ipynb evaluates
THEIR_FILES = ("src/models.py", "utils/data_utils.py", "utils/funcs.py")
THEIR_LENGTHS = tuple(range(10, 101, 5))  # the context lengths of their plots.ipynb's curves
THEIR_LENGTH_SETS = {1: 100_000}  # their test sequences per length at H (20 000 at other H)


def whole(text: str, least: int = 1) -> int:
    value = int(text) if text.strip().lstrip("-").isdigit() else None
    if value is None or value < least:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {least}")
    return value


def positive_int(text: str) -> int:
    return whole(text, 1)


def seed_int(text: str) -> int:
    return whole(text, 0)


def heads_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(positive_int(part) for part in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}: need whole numbers >= 1, comma-separated") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkout", nargs="?", help=f"the authors' repository (default ${ENV})")
    p.add_argument("--steps", type=positive_int, default=5000, help="Adam steps of every run")
    p.add_argument("--heads", type=heads_list, default=(1, 2), help="H values, comma-separated")
    p.add_argument("--seeds", type=positive_int, default=3, help="their seeds and mhsim's trials")
    p.add_argument("--first-seed", type=seed_int, default=0, help="their first torch seed (then +1 …)")
    p.add_argument("--log-points", type=positive_int, default=30, help="mhsim's logged steps (about)")
    p.add_argument("--test", type=positive_int, default=10_000, help="their test sequences")
    p.add_argument("--mc", type=positive_int, default=20_000, help="their estimators' Monte Carlo draws")
    p.add_argument("--mhsim", default=None, help="an icl-heads run folder to read instead of running")
    p.add_argument("--csv", default=None, help="write every run's curve here: side, H, seed, step, mse")
    p.add_argument(
        "--lengths",
        action="store_true",
        help="compare --mhsim's trained models with their stored test mse against L (no training)",
    )
    p.add_argument("--sets", type=positive_int, default=3, help="with --lengths: fresh test sets per L")
    return p


def checkout(path: str | None = None) -> Path | None:
    """The authors' checkout (the argument, else $MHSIM_ICL_HEADS_CHECKOUT), None when absent."""
    path = path or os.environ.get(ENV)
    return Path(path) if path and all((Path(path) / f).is_file() for f in THEIR_FILES) else None


def load(root: Path, rel: str):
    """Their module ``rel`` under a name of its own (their ``utils`` and ``src`` are common names)."""
    spec = importlib.util.spec_from_file_location("icl_heads_authors_" + Path(rel).stem, root / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _their_heads(state: dict, H: int) -> tuple[np.ndarray, ...]:
    """Their per-head q, k, v (h, a, input) and o (h, a), float64, from the state dict's arrays."""
    e = D + 1
    w = {k.split(".")[-2][0]: np.asarray(v, np.float64) for k, v in state.items()}
    return (*(w[name].reshape(H, e, e) for name in "qkv"), w["o"].reshape(H, e))


def as_mhsim(state: dict, H: int) -> dict[str, np.ndarray]:
    """Their heads in mhsim's layout: score (K_h z_q)·(Q_h z_ℓ), so K_h = W_{Q,h}ᵀ and Q_h = W_{K,h}ᵀ
    (d, d_h); V_h = W_{V,h} and O_h = W_{O,h}, so that U_h = V_hᵀ O_h."""
    q, k, v, o = _their_heads(state, H)
    return {"Q": np.swapaxes(k, 1, 2), "K": np.swapaxes(q, 1, 2), "V": v, "O": o}


def same_forward(model, test, H: int) -> float:
    """max |Φ_mhsim − theirs| / max |theirs| of their ``model`` on ``test`` (z_q, z, y_q), mhsim's
    Φ (``query="outside"``, summed heads, temperature 1/√(D+1)) on the same weights, float32."""
    import torch

    with torch.no_grad():
        theirs = model(test[0], test[1]).numpy().reshape(-1)
    state = {k: v.detach().numpy() for k, v in model.attention_layer.state_dict().items()}
    X = np.concatenate([test[1].numpy(), test[0].numpy()], axis=1)  # (n, L + 1, D + 1): the query last
    params = {name: jnp.asarray(a, jnp.float32) for name, a in as_mhsim(state, H).items()}
    phi = mdl.logits(params, jnp.asarray(X), query="outside", norm="sum", beta=(D + 1) ** -0.5)
    return float(np.max(np.abs(np.asarray(phi) - theirs)) / np.max(np.abs(theirs)))


def structure(params: dict, beta: float) -> dict[str, np.ndarray]:
    """Each head's KQ diagonal share, OV y-share, ω_h, μ_h from mhsim-layout ``params`` (Q, K
    (h, d, d_h), V (h, d, d), O (h, d)): W_h = Q_h K_hᵀ, U_h = V_hᵀ O_h; ω_h = β tr(W_xx)/D (the
    head's kernel softmax_ℓ(ω_h x_ℓᵀx_q)), μ_h = U_y."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    W = np.einsum("hda,hea->hde", p["Q"], p["K"])  # (h, d, d)
    U = np.einsum("he,hed->hd", p["O"], p["V"])  # (h, d)
    diag, yshare = icl_heads.head_structure({"W": W, "U": U}, D)
    return {
        "diag": diag,
        "yshare": yshare,
        "omega": beta * np.einsum("hii->h", W[:, :D, :D]) / D,
        "mu": U[:, D],
    }


def their_structure(state: dict, H: int) -> dict[str, np.ndarray]:
    """``structure`` of their heads (state dict arrays ``q_proj.weight``, …), temperature 1/√(D+1)."""
    return structure(as_mhsim(state, H), (D + 1) ** -0.5)


def run_theirs(root: Path, heads, seeds: int, log_steps, n_test: int, show=print, first: int = 0) -> dict:
    """H -> {"mse" (seeds, len(log_steps)), "structure": per seed ``their_structure``}; torch seeds
    ``first`` … ``first + seeds − 1``."""
    import torch

    torch.set_num_threads(1)  # one core, as one mhsim trial-step loop: a small model gains nothing from more
    models, data_utils = load(root, "src/models.py"), load(root, "utils/data_utils.py")
    torch.manual_seed(TEST_SEED)
    test = data_utils.LinearReg(
        {"L": L, "dx": D, "dy": 1, "number_of_samples": n_test, "noise_std": math.sqrt(SIGMA2)}
    ).__generatedata__()
    train = data_utils.LinearReg(
        {"L": L, "dx": D, "dy": 1, "number_of_samples": BATCH, "noise_std": math.sqrt(SIGMA2)}
    )
    marks = {int(s): j for j, s in enumerate(log_steps)}
    out = {}
    for H in heads:
        mse = np.full((seeds, len(marks)), np.nan)
        structure = []
        for seed in range(seeds):
            t0 = time.perf_counter()
            torch.manual_seed(first + seed)
            model = models.MultiHeadAttentionStack(1, D + 1, H, 1, False)
            opt = torch.optim.Adam(model.parameters(), lr=LR)
            loss_fn = torch.nn.MSELoss()
            for step in range(max(marks) + 1):
                if step in marks:
                    with torch.no_grad():
                        mse[seed, marks[step]] = loss_fn(model(test[0], test[1]), test[2]).item()
                if step == max(marks):
                    break
                zq, z, yq = train.__generatedata__()
                opt.zero_grad()
                loss_fn(model(zq, z), yq).backward()
                opt.step()
            state = {k: v.detach().numpy() for k, v in model.attention_layer.state_dict().items()}
            structure.append(their_structure(state, H))
            structure[-1]["forward"] = same_forward(model, test, H)
            show(
                f"theirs H={H} seed {first + seed}: {max(marks)} steps in {time.perf_counter() - t0:.0f} s; "
                f"mhsim's Φ on their weights and test set within {structure[-1]['forward']:.1e} of theirs"
            )
        out[H] = {"mse": mse, "structure": structure}
    return out


def run_mhsim(heads, seeds: int, steps: int, log_points: int, folder: str | None):
    """The preset's result: run here, or read from ``folder``."""
    from dynamics.api import load_results, run_sweep, with_overrides

    if folder is not None:
        return load_results(folder)
    cfg = with_overrides("icl-heads", steps=steps, heads=list(heads), trials=seeds, log_points=log_points)
    return run_sweep(cfg)


def trained_run(folder: str):
    """An icl-heads run folder with its trained parameters (``--save-params``, as the preset saves)."""
    from dynamics.api import load_results

    result = load_results(folder)
    if result.config.data.model != "icl-linreg" or not result.params:
        raise ConfigError(f"--mhsim {folder}: need an icl-linreg run with its parameters (--save-params)")
    return result


def mhsim_structure(result, i: int, trial: int) -> dict[str, np.ndarray]:
    """``structure`` of one mhsim run's heads at its last snapshot (H index ``i``, ``trial``)."""
    return structure(icl_heads.final_params(result, i, trial), float(result.config.model.temperature))


def their_estimators(root: Path, n: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Their estimators' test mse at L = 40 (``TFEst`` of their utils/funcs.py, Monte Carlo over n
    of their ``data_generator``'s sequences, as plots.ipynb): name -> (mean, standard error)."""
    funcs = load(root, "utils/funcs.py")
    np.random.seed(seed)
    est = funcs.TFEst(L=L, d=D, var=SIGMA2)
    pair = np.array([1.0, -1.0])
    kernel_mu = math.sqrt(D) / (1 + (1 + SIGMA2) * D / L * math.e)
    sq = {name: np.empty(n) for name in ("paired_heads", "gd_step", "single_kernel", "ridge")}
    for i in range(n):
        beta = np.random.normal(0, 1 / math.sqrt(D), D)
        X, y, xq, yq = funcs.data_generator(L, D, beta, SIGMA2)
        sq["paired_heads"][i] = (est.Est(X, y, xq, THEIR_OMEGA * pair, THEIR_MU * pair) - yq) ** 2
        sq["gd_step"][i] = (est.GDEst(X, y, xq, THEIR_OMEGA, THEIR_MU) - yq) ** 2
        sq["single_kernel"][i] = (est.Est(X, y, xq, np.array([D**-0.5]), np.array([kernel_mu])) - yq) ** 2
        sq["ridge"][i] = (est.RidgeEst(X, y, xq) - yq) ** 2
    return {k: (float(v.mean()), float(v.std(ddof=1) / math.sqrt(n))) for k, v in sq.items()}


def _cell(values: np.ndarray) -> str:
    ok = values[np.isfinite(values)]
    return f"{ok.mean():.4f} ± {ok.std():.4f}" if ok.size else "—"


def print_curves(steps, theirs: dict, result, heads) -> None:
    mh = np.asarray(result.curves["test_loss"])  # (H values, trials, L)
    row_of = {int(h): i for i, h in enumerate(np.asarray(result.heads))}
    print("\ntest mse (σ² included), mean ± std over seeds: theirs | mhsim")
    print("step    " + "".join(f"H={h} theirs        H={h} mhsim         " for h in heads))
    for j, s in enumerate(steps):
        cells = "".join(
            f"{_cell(theirs[h]['mse'][:, j]):18s} {_cell(mh[row_of[h], :, j]):18s} " for h in heads
        )
        print(f"{int(s):<7d} {cells}")


def write_csv(path: str, steps, theirs: dict, result, heads, first: int) -> None:
    """One row per run and logged step: side (theirs, mhsim), H, seed (their torch seed, mhsim's trial)."""
    mh = np.asarray(result.curves["test_loss"])  # (H values, trials, L)
    row_of = {int(h): i for i, h in enumerate(np.asarray(result.heads))}
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["side", "H", "seed", "step", "test_mse"])
        for h in heads:
            for side, runs, offset in (("theirs", theirs[h]["mse"], first), ("mhsim", mh[row_of[h]], 0)):
                for seed, curve in enumerate(runs):
                    out.writerows(
                        [side, h, offset + seed, int(s), f"{m:.6g}"]
                        for s, m in zip(steps, curve, strict=True)
                    )


def print_structure(theirs: dict, result, heads, first: int = 0) -> None:
    print("\nstructure at the last step, per seed and head: KQ diagonal share, OV y-share, ω_h, μ_h")
    row_of = {int(h): i for i, h in enumerate(np.asarray(result.heads))}
    for h in heads:
        sides = {
            "theirs": theirs[h]["structure"],
            "mhsim": [
                mhsim_structure(result, row_of[h], t)
                for t in range(np.asarray(result.curves["test_loss"]).shape[1])
            ],
        }
        for side, runs in sides.items():
            for seed, s in enumerate(runs, start=first if side == "theirs" else 0):
                heads_text = "; ".join(
                    f"{s['diag'][k]:.4f} {s['yshare'][k]:.4f} ω {s['omega'][k]:+.4f} μ {s['mu'][k]:+.3f}"
                    for k in range(h)
                )
                print(f"H={h} {side:6s} seed {seed}: {heads_text}")


def print_references(root: Path, n: int) -> None:
    ours = icl_heads.reference_predictors(D, L, SIGMA2, 1.0 / D)
    theirs = their_estimators(root, n)
    eta = 2 * THEIR_OMEGA * THEIR_MU
    print(f"\nreference predictors at L = {L} (test mse, σ² included): mhsim | theirs (TFEst, {n} draws)")
    for name, (mean, se) in theirs.items():
        ref = ours[name]
        mine = f"{ref['mse']:.4f}" + (f" ± {ref['se']:.4f}" if ref["se"] is not None else " (closed form)")
        print(f"{name:14s} {mine:22s} {mean:.4f} ± {se:.4f}")
    print(
        f"one GD step at their η = 2ωμ = {eta:.4f} (closed form): "
        f"{icl_heads.gd_step_mse(D, L, SIGMA2, 1.0 / D, eta=eta):.4f}; at the best η "
        f"{icl_heads.best_gd_step(D, L, SIGMA2, 1.0 / D):.4f}: {ours['gd_step']['mse']:.4f}"
    )


def their_length_curves(root: Path) -> dict[int, np.ndarray]:
    """{H: test mse at ``THEIR_LENGTHS``} as printed in their plots.ipynb's outputs, σ² taken off
    (the notebook adds it to an mse whose targets already carry the noise)."""
    import ast
    import json
    import re

    path = root / "plots.ipynb"
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"{path}: not a notebook with stored outputs ({err})") from None
    curves = {}
    for cell in cells:
        for out in cell.get("outputs", []):
            for line in "".join(out.get("text", "")).splitlines():
                match = re.match(r"Errors for n_head=(\d+): (\[.*\])$", line.strip())
                if match:
                    values = np.asarray(ast.literal_eval(match.group(2)), np.float64) - SIGMA2
                    if values.shape != (len(THEIR_LENGTHS),):
                        raise ConfigError(f"{path}: H={match.group(1)} has {values.size} lengths, not 19")
                    curves[int(match.group(1))] = values
    if not curves:
        raise ConfigError(f"{path}: no stored 'Errors for n_head=H' output")
    return curves


def print_lengths(result, theirs: dict[int, np.ndarray], sets: int) -> None:
    """mhsim's trial-0 models at every length of theirs, on ``sets`` fresh test sets of their size."""
    Ls = np.asarray(THEIR_LENGTHS)
    print(f"test mse against L (σ² included): mhsim's models, {sets} fresh set(s) per L; theirs, one each")
    for i, H in enumerate(int(h) for h in np.asarray(result.heads)):
        if H not in theirs:
            print(f"H = {H}: not in their notebook ({sorted(theirs)})")
            continue
        params = icl_heads.final_params(result, i, 0)
        n = THEIR_LENGTH_SETS.get(H, 20_000)
        ours = np.array(
            [
                [
                    icl_heads.mse_at_length(
                        result, params, int(Lv), seed=7000 + 100 * k + int(Lv), sequences=n
                    )
                    for Lv in Ls
                ]
                for k in range(sets)
            ]
        ).mean(axis=0)
        rel = ours / theirs[H] - 1
        at40 = rel[Ls == L][0]
        print(
            f"H = {H} ({n} sequences): relative difference over their {Ls.size} lengths mean "
            f"{rel.mean():+.2%}, sd {rel.std(ddof=1):.2%}, largest {rel[np.argmax(abs(rel))]:+.2%} "
            f"(L = {Ls[np.argmax(abs(rel))]}); at L = {L} {ours[Ls == L][0]:.4f} against "
            f"{theirs[H][Ls == L][0]:.4f} ({at40:+.2%})",
            flush=True,
        )
        print("  mhsim  " + " ".join(f"{v:.4f}" for v in ours))
        print("  theirs " + " ".join(f"{v:.4f}" for v in theirs[H]))
    hs = sorted(h for h in theirs if h > 1 and 2 in theirs)
    for H in hs[1:]:
        rel = theirs[H] / theirs[2] - 1
        print(f"theirs, H = {H} against their H = 2 over L: mean {rel.mean():+.2%}, sd {rel.std(ddof=1):.2%}")


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    root = checkout(args.checkout)
    if root is None:
        p.error(f"no checkout with {', '.join(THEIR_FILES)}: pass its path or set ${ENV}")
    t0 = time.perf_counter()
    if args.lengths:
        if args.mhsim is None:
            p.error(
                "--lengths reads trained models: give --mhsim DIR (a run of the preset, its parameters saved)"
            )
        try:
            theirs = their_length_curves(root)
            result = trained_run(args.mhsim)
        except ConfigError as err:
            p.error(str(err))
        print_lengths(result, theirs, args.sets)
        print(f"\n{time.perf_counter() - t0:.0f} s in all")
        return
    try:
        result = run_mhsim(args.heads, args.seeds, args.steps, args.log_points, args.mhsim)
    except ConfigError as err:  # a folder that is not a run, a setting mhsim refuses: one line
        p.error(str(err))
    missing = sorted(set(args.heads) - set(np.asarray(result.heads).tolist()))
    if missing or int(result.steps[-1]) != args.steps:
        p.error(
            f"--mhsim {args.mhsim}: has H {np.asarray(result.heads).tolist()} and "
            f"{int(result.steps[-1])} steps, not H {list(args.heads)} and {args.steps}"
        )
    print(f"mhsim: {time.perf_counter() - t0:.0f} s", flush=True)
    steps = np.asarray(result.steps)
    show = lambda s: print(s, flush=True)  # noqa: E731
    theirs = run_theirs(root, args.heads, args.seeds, steps, args.test, show, args.first_seed)
    print_curves(steps, theirs, result, args.heads)
    print_structure(theirs, result, args.heads, args.first_seed)
    if args.csv:
        write_csv(args.csv, steps, theirs, result, args.heads, args.first_seed)
    print_references(root, args.mc)
    print(f"\n{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main(sys.argv[1:])
