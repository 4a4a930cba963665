"""User parts (``"module:attribute"``) checked from their registry's declared probe when first named:
a part of each kind is called as the engine calls it on a tiny input, and one that returns another
shape or type, or lacks what its kind declares, is refused in one line naming the field, the
user's name and what was expected; one that passes runs to the numbers of the built-in it copies.
A head normalisation given for a sweep of H = 1 alone has no effect and is refused."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics import api, parts
from dynamics.errors import ConfigError
from dynamics.parts import probes
from dynamics.parts.registry import NO_PROBE, Probe, Registry

USER = "tests.hostile_cases.probed"


def _refusal(field: str, name: str, **overrides) -> str:
    """The one-line ConfigError ``with_overrides`` raises for the user part ``name`` in ``field``."""
    keyword = {"data.model": "data_model"}.get(field, field.split(".")[1])
    with pytest.raises(ConfigError) as info:
        api.with_overrides(**{keyword: f"{USER}:{name}"}, **overrides)
    message = str(info.value)
    assert "\n" not in message and f"{field}='{USER}:{name}'" in message, message
    return message


@pytest.mark.parametrize(
    "field,name,expected",
    [
        ("model.query", "query_summed", "shape (2, 4) of dtype float32 (expected (2, 3, 4)"),
        ("model.norm", "norm_negative", "returned -0.5 for H = 2"),
        ("model.norm", "norm_text", "returned '1/H' for H = 2"),
        ("model.init", "init_no_w", "returned a dict of ['U'] (for the full layout: U and W)"),
        ("optim.optimizer", "optimizer_function", "returned a function, without init and update"),
        ("optim.sampling", "sampling_one", "returned shape (2, 4, 5) of dtype float32 when"),
        ("optim.constraint", "sphere_drops_k", "returned a dict of ['U', 'b'] for a dict of ['U', 'b', 'k']"),
    ],
)
def test_a_part_of_another_shape_or_type_is_refused_naming_what_its_kind_returns(field, name, expected):
    message = _refusal(field, name)
    assert expected in message and "it must return" in message, message
    assert parts.REGISTRIES[field.split(".")[1]].probe.returns in message, message


@pytest.mark.parametrize(
    "field,name,expected",
    [
        ("optim.constraint", "no_params", "does not declare params: a constraint declares params"),
        ("optim.constraint", "listed_params", "declares params=['U']; a constraint holds a non-empty tuple"),
        ("optim.constraint", "unknown_params", "declares params=('U', 'Z')"),
        ("optim.constraint", "bias_params", "tuple of per-head parameters among U, W, Q, K, k, a"),
        ("optim.sampling", "fresh_sampling", "declares fresh = True"),
        ("model.init", "drawless_init", "declares random = False"),
        ("model.key_query", "factored_layout", "is refused: the engine builds W_h itself"),
    ],
)
def test_a_part_that_lacks_or_misdeclares_its_kinds_rules_is_refused(field, name, expected):
    """What the engine would read and then ignore (a constraint holding nothing, a sampling or an
    init the engine never calls, any key-query layout: the engine calls none) is refused, never run
    as a built-in."""
    assert expected in _refusal(field, name)


def test_a_constraint_on_a_parameter_the_model_lacks_is_refused():
    message = _refusal("optim.constraint", "sphere", query="first")
    assert "holds k, which this model does not have (its parameters: U, W)" in message, message


@pytest.mark.parametrize("layout", [dict(key_query="factored", head_size=2), dict(query="learned")])
def test_an_init_that_ignores_the_models_layout_is_refused_before_it_runs(layout):
    """The probe asks the full layout's U and W; a model with Q and K, or k, gets its draw checked
    where the program is traced: refused in one line (not run with a W nothing reads, or failing
    deep)."""
    cfg = api.with_overrides(init=f"{USER}:init_full_only", heads=[2], steps=2, **layout)
    with pytest.raises(ConfigError) as info:
        api.run_sweep(cfg, progress=False)
    message = str(info.value)
    assert f"model.init='{USER}:init_full_only' returned a dict of ['U', 'W']" in message, message
    assert "this model's layout draws U (" in message and "\n" not in message, message


def test_every_registry_declares_its_probe_and_one_that_does_not_refuses_user_parts():
    for registry in parts.REGISTRIES.values():
        assert registry.probe is not NO_PROBE, registry.field
        probe = registry.probe  # each refuses, or checks a declaration or a call
        assert probe.refuse or probe.declares or (probe.check and probe.calls and probe.returns), (
            registry.field
        )
    bare = Registry("thing", "x.thing", (parts.Part("a", "first"),))
    with pytest.raises(
        ConfigError, match=r"x.thing='tests.hostile_cases.probed:norm_mean' is refused: no probe"
    ):
        bare.get(f"{USER}:norm_mean")
    with pytest.raises(ConfigError, match=r"x.thing='.*:norm_mean' does not declare size: it needs one"):
        Registry("thing", "x.thing", probe=Probe(declares=("size",), why="it needs one")).get(
            f"{USER}:norm_mean"
        )


def test_the_constraint_probe_has_a_shape_for_every_parameter_of_the_groups():
    assert set(probes.PARAMETERS) == {name for names in parts.GROUPS.values() for name in names}


def test_a_probe_refuses_a_part_that_raises_in_one_line_with_its_error():
    for registry in parts.REGISTRIES.values():
        probe = registry.probe
        if probe.check:
            message = str(probe.failed("f='m:x'", RuntimeError("no\nway")))
            assert message.startswith("f='m:x' fails when called as ") and "(RuntimeError: no way)" in message
            assert message.endswith(probe.returns) and "\n" not in message


def _run(**knobs):
    small = dict(heads=[1, 2], steps=3, trials=1, n_train=8, n_test=8, T=3, d=4, n_irrelevant=1)
    return api.run_sweep(**small, **knobs, progress=False)


@pytest.mark.slow
def test_user_copies_of_the_built_ins_run_to_their_numbers_bit_for_bit():
    """A query, a norm, an init, an optimiser and a sampling of a user's that copy built-ins run to
    the built-ins' numbers: each is called by the engine, none changes a number."""
    built_in = _run(
        optimizer="sgd", query="first", norm="mean", init="normal", sampling="replace", batch_size=4
    )
    user = _run(
        optimizer=f"{USER}:optimizer_sgd",
        query=f"{USER}:query_first",
        norm=f"{USER}:norm_mean",
        init=f"{USER}:init_normal",
        sampling=f"{USER}:sampling_replace",
        batch_size=4,
    )
    assert np.array_equal(built_in.curves["train_loss"], user.curves["train_loss"])


@pytest.mark.slow
def test_a_declared_user_constraint_is_called_by_the_engine():
    """A user constraint copying the sphere's projection runs to the built-in sphere's numbers, which
    differ from the unconstrained run's (so it is not ignored)."""
    common = dict(query="learned", init="sphere", attention="softmax")
    built_in, user, free = (_run(**common, constraint=c) for c in ("sphere", f"{USER}:sphere", "none"))
    assert np.array_equal(built_in.curves["train_loss"], user.curves["train_loss"])
    assert not np.array_equal(free.curves["train_loss"], user.curves["train_loss"])


def test_a_head_normalisation_at_h_1_alone_has_no_effect_and_is_refused():
    """c_1 = 1 for every built-in norm: given for a sweep of H = 1 alone it changes nothing and is
    refused as the step-size scaling is; with an H > 1 it is taken; a user's c_H (which need not be
    1 at H = 1) is taken at H = 1 too."""
    with pytest.raises(
        ConfigError, match=r"model.norm='mean' was given but has no effect: sweep.heads=\[1\]"
    ):
        api.with_overrides(heads=[1], norm="mean")
    assert api.with_overrides(heads=[1, 2], norm="mean").model.norm == "mean"
    assert api.with_overrides(heads=[1], norm=f"{USER}:norm_mean").model.norm == f"{USER}:norm_mean"
