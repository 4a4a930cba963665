"""The parts' registries: lookup and errors, metadata without JAX, and compiled programs keyed by
the parts they use. Every part's fast-path and packing rule, checked on the engine, is in
test_properties.py."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from helpers import DEFAULT_CONFIG_HASH

from dynamics import parts
from dynamics.config.schema import Config, ConfigError, DataConfig
from dynamics.core import program
from dynamics.parts.registry import Part, Registry


def test_registry_lookup_errors_are_one_line_with_a_suggestion():
    with pytest.raises(
        ConfigError, match=r"^optim.optimizer='adan' is not one of 'gd', 'adam'.*did you mean 'adam'"
    ) as e:
        parts.OPTIMIZERS.get("adan")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"loss=3 is not one of"):
        parts.LOSSES.get(3, "loss")
    from dynamics.core.losses import Loss

    assert parts.LOSSES.get(Loss.EXP).name == "exp"  # an enum member counts by its value


def test_registry_refuses_a_duplicate_and_non_parts():
    reg = Registry("thing", "x.thing", (Part("a", "first"),))
    with pytest.raises(ConfigError, match="registered already"):
        reg.register(Part("a", "again"))
    reg.register(Part("a", "swapped"), replace=True)
    assert reg["a"].help == "swapped" and reg.names == ("a",)
    with pytest.raises(TypeError):
        reg.register("b")  # type: ignore[arg-type]


def test_every_part_has_help_and_loads():
    for kind, registry in parts.REGISTRIES.items():
        assert registry.names, kind
        for part in registry.values():
            assert part.help, (kind, part.name)
            if part.impl:
                obj = part.load()  # a function, or a data model object (setup and sample)
                methods = [getattr(obj, m, None) for m in ("setup", "sample")]
                assert callable(obj) or all(map(callable, methods)), (kind, part.name)


def test_metadata_loads_without_jax():
    code = (
        "import sys; import dynamics.parts, dynamics.config.schema;"
        "from dynamics.parts import REGISTRIES; [r.help() for r in REGISTRIES.values()];"
        "assert 'jax' not in sys.modules, 'jax imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_registry_is_the_choices_of_the_one_field_it_declares():
    """The field -> registry map has one home (``Registry.field``): every knob whose choices are a
    registry is that registry's declared field, every registry is some knob's choices, and the
    config layer's ``part_fields`` is read from the same declarations."""
    from dynamics.config import schema

    by_knob = {k.key: k.spec.choices for k in schema.declared() if isinstance(k.spec.choices, parts.Registry)}
    assert {key: reg.field for key, reg in by_knob.items()} == {key: key for key in by_knob}
    assert sorted(by_knob) == sorted(r.field for r in parts.REGISTRIES.values())
    assert all(by_knob[key] is reg for key, reg in schema.part_fields().items())


def test_a_symmetric_init_is_refused_where_zero_is_a_saddle():
    with pytest.raises(ConfigError, match="saddle"):
        parts.check_init("factored", "zero")
    parts.check_init("full", "zero")


def test_program_key_covers_the_parts_it_was_built_from(monkeypatch):
    from dynamics.infra import executables

    prog = program.Program(1, 1, True, 8, "first", "sqrt", "full", "split", "zero", "gd", "logistic", (0, 5))
    before = executables.program_key("engine.x", {"prog": prog}, {})
    assert before == executables.program_key("engine.x", {"prog": prog}, {})  # deterministic
    # a part replaced by another implementation (a user's patch) gets another program
    swapped = dataclasses.replace(parts.LOSSES["logistic"], impl="dynamics.core.losses:squared_hinge")
    monkeypatch.setitem(parts.LOSSES._parts, "logistic", swapped)
    assert executables.program_key("engine.x", {"prog": prog}, {}) != before
    # a part whose source cannot be read is never kept on disk
    typed = dataclasses.replace(swapped, impl="builtins:abs")
    monkeypatch.setitem(parts.LOSSES._parts, "logistic", typed)
    assert executables.program_key("engine.x", {"prog": prog}, {}) is None


def test_section_types_are_checked_by_the_schema_in_one_line():
    from dynamics import with_overrides
    from dynamics.config.schema import validate

    with pytest.raises(ConfigError, match=r"^optim.steps=2.5 has the wrong type; expected int$"):
        validate(with_overrides(steps=2.5))
    with pytest.raises(ConfigError, match=r"^model.init_scale=True has the wrong type"):
        validate(with_overrides(init_scale=True))  # strict: a bool is no number
    with pytest.raises(ConfigError, match=r"^steps='1e3': '1e3' is not an integer$"):
        with_overrides(steps="1e3")  # the keyword's name, not argparse's bare message
    with pytest.raises(ConfigError, match=r"^optim=\{.*\} must be a OptimConfig$"):
        validate(dataclasses.replace(Config(), optim={"lr": 1.0}))
    assert validate(with_overrides(lr=1)).optim.lr == 1  # an int is a number: kept as given (same hash)


def test_a_data_models_parameters_are_its_own_section():
    from dynamics.config.schema import apply_overrides, validate

    cfg = validate(Config(data=DataConfig(model="planted", params={"teacher_heads": 2})))
    assert cfg.data.teacher_heads == 2 and cfg.data.zeta is None  # planted has no ζ
    assert dict(cfg.data.params) == {"teacher_heads": 2, "teacher_scale": 1.0, "label_noise": 0.0}
    # the short form, a [data.params] table and the flat [data] table of older files agree
    short = Config(data=DataConfig(model="mixture", zeta=0.3))
    table = apply_overrides(Config(), {"data": {"model": "mixture", "params": {"zeta": 0.3}}}, "test")
    flat = apply_overrides(Config(), {"data": {"model": "mixture", "zeta": 0.3}}, "test")
    assert short == table == flat and short.hash() == flat.hash()
    assert dataclasses.replace(short.data, zeta=0.5).zeta == 0.5  # grids replace a parameter by name
    with pytest.raises(ConfigError, match=r"^data.model='planted' has no parameter data.zeta$"):
        validate(Config(data=DataConfig(model="planted", zeta=0.3)))
    with pytest.raises(ConfigError, match=r"^data.n_irrelevant=1.5 has the wrong type; expected int$"):
        validate(Config(data=DataConfig(model="mixture", n_irrelevant=1.5)))
    with pytest.raises(ConfigError, match=r"^unknown field data.zetaa \(did you mean 'zeta'\?\)"):
        DataConfig(zetaa=1)


def test_the_flat_record_and_its_hash_are_kept_for_every_old_config():
    """results.json's data section lists every built-in parameter (None where unset), as it did
    before the sections: the config hash of the default run is the one recorded then."""
    doc = Config().resolved().to_dict()["data"]
    assert list(doc) == [
        *("model", "path", "n_train", "n_test", "T", "d", "zeta", "r", "signal", "noise"),
        *("n_irrelevant", "geometry", "first_relevant", "teacher_heads", "teacher_scale", "label_noise"),
    ]
    assert Config().hash() == DEFAULT_CONFIG_HASH  # the default run's hash before the sections


def test_an_explicit_value_without_effect_is_refused(tmp_path):
    """Given by a flag, a TOML file, a keyword or a grid axis, a value that changes nothing is
    refused; the same value from a preset or a results file is not (the user did not give it)."""
    from dynamics import run_grid, with_overrides
    from dynamics.config.schema import apply_overrides, load_toml, validate

    cases = [
        (dict(init_scale=0.5), r"^model.init_scale=0.5 was given but has no effect: model.init='zero'"),
        (dict(head_size=2), r"^model.head_size=2 was given but has no effect: model.key_query='full'"),
    ]
    for kw, match in cases:
        with pytest.raises(ConfigError, match=match):
            validate(with_overrides(**kw))
    validate(with_overrides(init="normal", init_scale=0.5))  # with effect: fine
    toml = tmp_path / "c.toml"
    toml.write_text("[model]\ninit_scale = 0.5\n")
    with pytest.raises(ConfigError, match="has no effect"):
        validate(load_toml(toml))
    with pytest.raises(ConfigError, match=r"^init_scales=\[0.1, 1\] was given but has no effect"):
        run_grid(Config(), init_scales=[0.1, 1])
    data = tmp_path / "d.npz"
    X = np.zeros((3, 2, 4), np.float32)
    np.savez(data, X_train=X, y_train=np.ones(3, np.float32), X_test=X, y_test=-np.ones(3, np.float32))
    npz = apply_overrides(Config(), {"data": {"model": "npz", "path": str(data)}}, "test", explicit=False)
    with pytest.raises(ConfigError, match=r"^data.n_train=100 was given but has no effect: data from a file"):
        validate(with_overrides(npz, n_train=100))  # the default's value, given: still refused
    assert validate(npz).data.n_train == 3
    # not given by the user: a preset's or a results file's value is kept as it was
    not_given = apply_overrides(Config(), {"model": {"init_scale": 0.5}}, "preset x", explicit=False)
    assert validate(not_given).model.init_scale == 0.5


def test_a_config_built_in_python_is_held_to_the_same_idle_rules():
    """``Config(...)`` built directly marks nothing as given, yet every value away from its
    default is the user's own: one that changes nothing is refused with the flag's message; a
    preset's value (``apply_overrides(explicit=False)``) is not the user's and stays accepted."""
    from dynamics.config.schema import apply_overrides, validate
    from dynamics.config.sections import ModelConfig, OptimConfig

    cases = [
        (Config(optim=OptimConfig(ngd_eps=0.1)), r"^optim.ngd_eps=0.1 was given but has no effect"),
        (Config(optim=OptimConfig(ngd_per_group=True)), r"^optim.ngd_per_group=True was given but has no"),
        (Config(model=ModelConfig(init_scale=0.5)), r"^model.init_scale=0.5 was given but has no effect"),
        (Config(model=ModelConfig(head_size=2)), r"^model.head_size=2 was given but has no effect"),
    ]
    for cfg, match in cases:
        with pytest.raises(ConfigError, match=match):
            validate(cfg)
    preset_like = apply_overrides(Config(), {"optim": {"ngd_eps": 0.1}}, "preset x", explicit=False)
    assert validate(preset_like).optim.ngd_eps == 0.1
    assert validate(Config(optim=OptimConfig(optimizer="normalized-gd", ngd_eps=0.1))).optim.ngd_eps == 0.1
