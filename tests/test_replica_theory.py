"""The replica solver of positional versus semantic attention (dynamics.theory.positional_semantic):
its exact properties on a small rule (quick), one α solved (slow), and against the authors' theory
CSV when a checkout of theirs is named by $MHSIM_PSA_CHECKOUT (slow, skipped otherwise)."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest

from benchmarks import replica_theory
from dynamics.config.grid_axes import grid_preset
from dynamics.errors import ConfigError
from dynamics.experiments.positional_semantic import NAME, theory, theory_for
from dynamics.theory import positional_semantic as ps

# A generic point (every overlap non-zero, so no symmetry makes a hat vanish), small rule.
PB = ps.problem(1.5, 0.3)
OV = ps.Overlaps(q=0.08, m=0.15, V=12.0, theta=0.1)
RULE = ps.rule(6, 6)


def mean_envelope(**change) -> float:
    return ps.channel(PB, OV._replace(**change), RULE)[1]


@pytest.mark.parametrize(("name", "hat", "factor"), [("m", "mhat", -1.0), ("V", "qhat", -2.0)])
def test_hats_are_the_envelopes_derivatives(name, hat, factor):
    """m̂ = −α ∂E M/∂m and q̂ = −2α ∂E M/∂V hold node by node (the envelope theorem), so on any
    rule they equal central differences of E M to the differences' own error."""
    hats = ps.channel(PB, OV, RULE)[0]
    eps = 1e-5
    value = getattr(OV, name)
    diff = (mean_envelope(**{name: value + eps}) - mean_envelope(**{name: value - eps})) / (2 * eps)
    assert getattr(hats, hat) == pytest.approx(factor * PB.alpha * diff, rel=1e-6)
    assert abs(getattr(hats, hat)) > 1e-5  # not a vacuous zero


def test_overlaps_make_the_free_energy_stationary_in_the_hats():
    """The prior's equations are ∂Φ/∂(q̂, m̂, V̂, θ̂) = 0: at overlaps_from(hats) each central
    difference of Φ in a hat vanishes, though each of Φ's two hat-dependent terms has a slope of
    its own (the trace term's: −V/2, −m, q/2, −θ)."""
    hats = ps.Hats(qhat=2e-4, mhat=5e-3, Vhat=0.04, thetahat=0.03)
    ov = ps.overlaps_from(PB, hats)
    trace_slopes = {"qhat": -ov.V / 2, "mhat": -ov.m, "Vhat": ov.q / 2, "thetahat": -ov.theta}
    for name, value in hats._asdict().items():
        eps = 1e-4 * value
        up = ps.free_energy(PB, ov, hats._replace(**{name: value + eps}), 0.002)
        down = ps.free_energy(PB, ov, hats._replace(**{name: value - eps}), 0.002)
        assert abs((up - down) / (2 * eps)) < 1e-6 * abs(trace_slopes[name]), name


def test_symmetric_points_keep_their_zero_overlaps():
    """θ = 0 gives θ̂ = 0 (the loss is even in h*) and m = 0 gives m̂ = 0 (A is symmetric under
    swapping the tokens): the two branches' zero overlaps are exact, up to rounding (where two
    starts reach minima equal to rounding, either is kept: 1e-9 of the other hat at most)."""
    hats = ps.channel(PB, OV._replace(theta=0.0), RULE)[0]
    assert abs(hats.thetahat) < 1e-9 * abs(hats.mhat) and abs(hats.mhat) > 1e-4
    hats = ps.channel(PB, OV._replace(m=0.0), RULE)[0]
    assert abs(hats.mhat) < 1e-9 * abs(hats.thetahat) and abs(hats.thetahat) > 1e-4


def test_proximal_fields_minimise_the_envelope():
    """The Newton minimiser has zero gradient and no nearby point is lower."""
    omega, hstar, _ = ps._fields(PB, OV, RULE)
    T = ps.teacher_matrix(PB, hstar)
    x, env = ps.proximal(PB, omega, T, OV.V)
    rng = np.random.default_rng(0)
    for _ in range(4):
        y = x + 1e-3 * rng.standard_normal(x.shape)
        other = ps.sample_loss(PB, y, T) + np.sum((y - omega) ** 2, -1) / (2 * OV.V)
        assert np.all(other >= env - 1e-15)


def test_the_origin_envelope_is_a_minimum_no_lower_than_the_lowest():
    """The "origin" envelope is a stationary point of each node's envelope, and its E M is at least
    the lowest-of-five-starts one (which includes the start 0); the warm start from the lowest
    fields gives back the same hats."""
    hats, env, x = ps._channel(PB, OV, RULE, "lowest", None)
    o_hats, o_env, o_x = ps._channel(PB, OV, RULE, "origin", None)
    assert o_env >= env - 1e-15 and np.all(np.isfinite(o_x))
    warm_hats, warm_env, _ = ps._channel(PB, OV, RULE, "lowest", x)
    assert warm_env == pytest.approx(env, abs=1e-15)
    np.testing.assert_allclose(warm_hats, hats, rtol=1e-9)


def test_crossing_bisects_the_objectives_difference(monkeypatch):
    """With a stand-in solver whose objectives differ by α − 1.2345 (semantic − positional),
    ``crossing`` finds 1.2345 to its tolerance, and every α after the first two starts from the
    nearest solved one."""
    inits = []

    def fake(pb, branch, init=None, **solver):
        inits.append(init)
        obj = (pb.alpha - 1.2345) if branch == "semantic" else 0.0
        raw = {"q": 0.1, "m": 0.0, "V": pb.alpha, "theta": 0.1}
        return ps.ReplicaPoint(pb.alpha, branch, 0.0, 0.4, 0.0, obj, 1, raw)

    monkeypatch.setattr(ps, "solve", fake)
    assert ps.crossing(0.3, 1.0, 2.0, xtol=1e-6) == pytest.approx(1.2345, abs=1e-9)
    assert inits[0] is None and all(init is not None for init in inits[2:])
    assert inits[4].V in (1.0, 2.0)  # α = 1.5 started from a bracket's end
    with pytest.raises(ConfigError, match="no crossing"):
        ps.crossing(0.3, 1.5, 2.0)


def test_a_curve_starts_each_alpha_from_its_neighbour(monkeypatch):
    """``curve`` solves the α in the order given, the first from the branch's start and each next
    one from the previous fixed point's overlaps."""
    calls = []

    def fake(pb, branch, init=None, **solver):
        calls.append((pb.alpha, init))
        raw = {"q": pb.alpha, "m": 0.2, "V": 10.0, "theta": 0.0}
        return ps.ReplicaPoint(pb.alpha, branch, 0.2, 0.0, 0.0, 0.0, 1, raw)

    monkeypatch.setattr(ps, "solve", fake)
    points = ps.curve(0.3, [2.0, 1.5, 1.0], "positional", nodes=6)
    assert [p.alpha for p in points] == [2.0, 1.5, 1.0]
    assert calls[0][1] is None and [c[1].q for c in calls[1:]] == [2.0, 1.5]


def test_the_stroud_secrest_plane_is_exact_to_degree_seven():
    """The 12-point rule integrates every monomial x^a y^b of degree ≤ 7 against N(0, I) exactly
    (E x^a = (a − 1)!! for even a, 0 for odd), its weights sum to 1, and it is not exact at degree 8
    (E x⁸ = 105): its degree is 7, not more."""
    nodes, weights = ps.stroud_secrest_plane()
    assert nodes.shape == (12, 2) and np.all(weights > 0)

    def moment(a):
        return 0.0 if a % 2 else float(np.prod(np.arange(a - 1, 0, -2)))

    for a in range(8):
        for b in range(8 - a):
            got = np.sum(weights * nodes[:, 0] ** a * nodes[:, 1] ** b)
            assert got == pytest.approx(moment(a) * moment(b), abs=1e-12), (a, b)
    assert abs(np.sum(weights * nodes[:, 0] ** 8) - 105.0) > 1.0
    rule = ps.stroud_secrest_rule()
    assert rule.weight.shape == (12, 12) and rule.weight.sum() == pytest.approx(1.0, abs=1e-15)


# Two of the authors' theory CSV values (ω = 0.3; their θ is σ²·Q*ᵀQ/d), quoted in docs/frontier.md.
# Each is where the product rule's fixed point is far from theirs (θ 0.0166 on 12 × 6) or where
# their positional branch has two fixed points on their rule.
THEIRS = [
    ("semantic", 0.5690909090909091, "theta", 0.0456718),
    ("positional", 0.9045454545454545, "m", 0.248535),
]


@pytest.mark.parametrize(("branch", "alpha", "name", "value"), THEIRS)
def test_the_authors_rule_gives_their_fixed_point(branch, alpha, name, value):
    """With the fixed point on their degree-7 rule (``saddle="stroud-secrest"``) the solver lands
    within 0.5 % of their stored overlap; the point is a fixed point of that rule, and its test
    error and Φ are taken on the product rule at those overlaps."""
    pb = ps.problem(alpha, 0.3)
    point = ps.solve(pb, branch, nodes=6, inner=6, saddle="stroud-secrest")
    assert abs(point.raw[name]) == pytest.approx(value, rel=5e-3)
    ov = ps.overlaps_of(point)
    hats, mean_env = ps.channel(pb, ov, ps.stroud_secrest_rule())
    new = ps._pinned(ps.overlaps_from(pb, hats), branch)
    assert ps._change(ov, new) < 1e-6  # |Δq|, |Δm|, |Δθ|, |ΔV|/V
    assert point.raw["mse"] == 2 * ps.test_error(pb, ov, ps.rule(6, 6))
    product_env = ps.channel(pb, ov, ps.rule(6, 6))[1]
    assert point.raw["Phi"] == ps.free_energy(pb, ov, hats, product_env)
    assert product_env != mean_env  # the two rules' envelopes differ: the test tells them apart


def _stored_rows() -> list[dict]:
    lines = ps.CURVE.read_text().splitlines()
    return list(csv.DictReader(lines[1:]))


def test_the_stored_curve_is_a_fixed_point_at_one_alpha():
    """The package's curve file at α = 2, positional branch: started from its stored overlaps on its
    stored rule, the solver stops at once there (the update moves nothing beyond its tolerance)
    and gives back its Φ and mse."""
    settings = dict(kv.split("=") for kv in ps.CURVE.read_text().splitlines()[0].lstrip("# ").split())
    row = next(r for r in _stored_rows() if r["branch"] == "positional" and float(r["alpha"]) == 2.0)
    init = ps.Overlaps(*(float(row[k]) for k in ("q", "m", "V", "theta")))
    pb = ps.problem(2.0, float(settings["omega"]))
    rule = {"nodes": int(settings["nodes"]), "inner": int(settings["inner"])}
    point = ps.solve(pb, "positional", init=init, envelope=settings["envelope"], **rule)
    assert point.iterations == 1
    assert point.raw["Phi"] == pytest.approx(float(row["Phi"]), rel=1e-9)
    assert point.raw["mse"] == pytest.approx(float(row["mse"]), rel=1e-9)


def test_the_stored_curve_in_the_simulations_units():
    """``stored_curve`` and the experiment's ``theory``: θ/σ², mse/2, −Φ, and d × the objectives'
    difference, crossing where it changes sign."""
    rows = _stored_rows()
    th, d = theory(100), 100
    for branch in ps.BRANCHES:
        mine = sorted((r for r in rows if r["branch"] == branch), key=lambda r: float(r["alpha"]))
        raw = {k: np.array([float(r[k]) for r in mine]) for k in ("alpha", "theta", "mse", "Phi", "m")}
        np.testing.assert_array_equal(th["alpha"], raw["alpha"])
        np.testing.assert_allclose(th[branch]["theta"], np.abs(raw["theta"]) / 0.25)
        np.testing.assert_allclose(th[branch]["test_loss"], raw["mse"] / 2)
        np.testing.assert_allclose(th[branch]["objective"], -d * raw["Phi"])
    gap = th["difference"]
    assert gap[0] > 0 > gap[-1]  # positional lower at small α, semantic at large
    below, above = th["alpha"][gap > 0].max(), th["alpha"][gap < 0].min()
    assert below < th["crossing"] < above


def test_the_theory_is_given_only_for_the_stored_problem():
    """The preset's config gets the stored curve; another ω, σ, λ or temperature gets none."""
    cfg = grid_preset(NAME)[0].resolved()
    assert theory_for(cfg)["settings"]["omega"] == cfg.data.omega
    for section, change in (
        ("data", {"omega": 0.5}),
        ("data", {"semantic_noise": 0.4}),
        ("optim", {"weight_decay": 0.02}),
        ("model", {"temperature": 0.02}),
    ):
        part = dataclasses.replace(getattr(cfg, section), **change)
        assert theory_for(dataclasses.replace(cfg, **{section: part})) is None, change


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: ps.problem(-1.0, 0.3), "alpha=-1.0"),
        (lambda: ps.problem(1.0, 1.5), "omega=1.5"),
        (lambda: ps.problem(1.0, 0.3, A=np.eye(3)), "A="),
        (lambda: ps.problem(1.0, 0.3, lam=0.0), "lam=0.0"),
        (lambda: ps.start(PB, "mixed"), "branch='mixed'"),
        (lambda: ps.rule(1), "nodes=1"),
        (lambda: ps.solve(PB, "semantic", damping=1.0), "damping=1.0"),
        (lambda: ps.solve(PB, "semantic", envelope="global"), "envelope='global'"),
        (lambda: ps.solve(PB, "semantic", saddle="quadpy"), "saddle='quadpy'"),
        (lambda: ps.solve(PB, "semantic", tol=-1.0), "tol=-1.0"),
        (lambda: ps.solve(PB, "semantic", max_iter=0), "max_iter=0"),
        (lambda: ps.solve(PB, "semantic", init=OV._replace(q=-0.1)), "init="),
        (lambda: ps.solve(PB, "semantic", init=OV._replace(theta=0.2)), "init="),  # θ² > σ² q
        (lambda: ps.crossing(0.3, 2.0, 1.0), "lo=2.0, hi=1.0"),
    ],
)
def test_bad_settings_are_one_line_errors(call, named):
    with pytest.raises(ConfigError) as err:
        call()
    assert named in str(err.value) and "allowed" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_one_alpha_is_a_fixed_point():
    """α = 2, ω = 0.3, the semantic branch: one more update moves nothing, m stays 0, θ and the
    test error are positive, −Φ equals the reported objective (a 10 × 6 rule, to stay under a
    minute); beside the authors' CSV (θ, mse, Phi within 1 % or 2e-4) when a checkout is given."""
    pb = ps.problem(2.0, 0.3)
    point = ps.solve(pb, "semantic", nodes=10, inner=6)
    raw = point.raw
    ov = ps.Overlaps(raw["q"], raw["m"], raw["V"], raw["theta"])
    new = ps.overlaps_from(pb, ps.channel(pb, ov, ps.rule(10, 6))[0])
    assert max(abs(a - b) for a, b in zip(new, ov, strict=True)) < 1e-5
    assert abs(point.m) < 1e-12 and point.theta > 0.1 and point.test_error > 0
    assert point.objective == -raw["Phi"] and point.theta == raw["theta"] / 0.25
    root = replica_theory.checkout()
    if root is None:
        return
    row = next(r for r in replica_theory.theirs(root, 0.3, "semantic") if r["alpha"] == 2.0)
    for col in ("theta", "mse", "Phi"):
        assert replica_theory.agrees(raw[col], row[col]), (col, raw[col], row[col])


@pytest.mark.slow
@pytest.mark.skipif(replica_theory.checkout() is None, reason="no checkout of the authors' repository")
def test_the_authors_rule_gives_every_number_of_their_curve():
    """With $MHSIM_PSA_CHECKOUT: the benchmark's comparison on their degree-7 rule, every α from the
    branch's start (``--saddle stroud-secrest --from-start``, a 6 × 6 product rule for the test
    error and Phi): all of their 160 numbers within 1 % or 2e-4."""
    rows, _ = replica_theory.compare(
        replica_theory.checkout(), 0.3, from_start=True, nodes=6, inner=6, saddle="stroud-secrest"
    )
    assert len(rows) == 40
    bad = [(r["branch"], r["alpha"], c) for r in rows for c in replica_theory.COLUMNS if not r[c + "_ok"]]
    assert not bad


def _fake_checkout(root, omegas=(0.3,), alphas=(0.5, 1.25, 2.0)):
    """A stand-in for the authors' theory folder: both branches' CSVs at each ω, their columns."""
    (root / "theory").mkdir()
    for omega in omegas:
        for suffix in ("", "_para"):
            lines = [",alpha,q,m,V,theta,mse,Phi"]
            lines += [f"{i},{a!r},0.1,0.2,10.0,0.05,0.006,-0.002" for i, a in enumerate(alphas)]
            (root / "theory" / f"repl_softmax_Mixed_sig0.5_lamb0.01_omega{omega:g}{suffix}.csv").write_text(
                "\n".join(lines) + "\n"
            )
    return root


def test_the_benchmark_refuses_an_alpha_or_omega_of_no_csv_in_one_line(tmp_path):
    """``--alphas`` takes only their α (to 1e-6, returned as they spell them) and ``--omega`` only
    an ω with both branches' CSVs; anything else is one line naming it and what they have."""
    root = _fake_checkout(tmp_path, omegas=(0.3, 0.5))
    (root / "theory" / "repl_softmax_Mixed_sig0.5_lamb0.01_omega0.7.csv").write_text(",alpha\n")  # no _para
    assert replica_theory.their_omegas(root) == [0.3, 0.5]
    assert replica_theory.chosen_alphas(root, 0.3, "2,1.2500000001") == [2.0, 1.25]
    for text in ("0.3", "x", "2,"):
        with pytest.raises(ConfigError) as err:
            replica_theory.chosen_alphas(root, 0.3, text)
        assert "allowed: 0.5, 1.25, 2" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"omega=0.7: .*allowed: 0.3, 0.5$"):
        replica_theory.theirs(root, 0.7, "semantic")
