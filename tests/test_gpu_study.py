"""The accelerator's layout picks its own vmap chunk from the device's memory (``plan.fit_chunk``),
refuses in one line where one pack cannot fit, and ``benchmarks/gpu_study.py`` runs at a tiny size
with every output field (its timings are not checked)."""

import json
from types import SimpleNamespace

import pytest

from dynamics.config.schema import resolve
from dynamics.errors import ConfigError
from dynamics.sweeps import memory
from dynamics.sweeps.plan import plan_points
from tests.helpers import small


def _accelerator(limit: int | None, n_devices: int = 1):
    """What plan_points reads of a BatchPlacer, for an accelerator with ``limit`` bytes per device."""
    kind = SimpleNamespace(device_kind="Test GPU")
    return SimpleNamespace(
        platform="gpu", n_devices=n_devices, memory_limit=limit, devices=[kind] * n_devices
    )


def _plan(limit, n_devices=1):
    exp = resolve(small(init="normal", heads=(1, 2, 3, 4), trials=5))
    cfg = exp.config
    return cfg, plan_points(cfg, range(4), cfg.data.d, list(exp.steps), _accelerator(limit, n_devices))


def test_an_accelerator_vmaps_every_pack_where_they_fit_and_fewer_where_not():
    cfg, (point,) = _plan(None)  # no limit known: every pack of the program at once, as before
    elements = len(point.packs) * cfg.sweep.trials
    assert point.chunk == elements
    _, (roomy,) = _plan(10**12)
    assert roomy.chunk == elements and roomy.batch_size == elements
    element = sum(memory.element_bytes(cfg, point.prog.slots, outputs=1).values())
    fixed = 10**6
    limit = (fixed + 3 * element) * 4 // 3 + 8  # room for three elements beside ~fixed bytes
    tight = memory.accelerator_chunk(cfg, point.prog.slots, elements, fixed, limit, False, "one GPU")
    assert tight <= 3 and -(-elements // tight) == -(-elements // 3)  # equal chunks, no more than fit
    _, (two,) = _plan(10**12, n_devices=2)
    assert two.chunk == -(-elements // 2) and two.batch_size % (2 * two.chunk) == 0


def test_an_accelerator_that_cannot_hold_one_pack_is_refused_before_allocating():
    with pytest.raises(ConfigError, match=r"one batch element .* more than 3/4 of the .* Test GPU") as err:
        _plan(10**5)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_the_gpu_study_runs_at_a_tiny_size_with_every_output_field(tmp_path):
    from benchmarks import gpu_study

    out = tmp_path / "study.json"
    argv = ["--small", "--cpu", "--heads", "1,2", "--lrs", "0.5", "--scales", "1", "--steps", "20"]
    assert gpu_study.main([*argv, "--trials", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["device"].startswith("cpu:") and doc["peak_fp32"] is None
    assert set(doc["cpu_measured"]) == {"slot_step_s", "fixed_s", "slot_step_wall_s"}
    tenth, full = doc["sizes"]
    assert (tenth["runs"], full["runs"]) == (2, 4)  # H ∈ {1, 2} × one grid point × 1 and 2 trials
    for row in doc["sizes"]:
        for field in ("cold_s", "compile_s", "warm_s", "runs_per_hour", "executed_flop_rate", "slot_step_s"):
            assert row[field] > 0, field
        assert row["executed_flops"] >= row["model_flops"] > 0  # empty slots and padding run too
        assert row["groups"] == 1 and row["slots"] == [3] and row["estimate_bytes"] > 0  # H 1 + 2 in one pack


def test_the_peak_table_names_its_source_and_matches_the_device_names():
    from benchmarks.gpu_study import crossover, peak_of

    assert peak_of("NVIDIA H100 80GB HBM3")["flops"] == pytest.approx(66.9e12)
    assert peak_of("NVIDIA H100 PCIe")["flops"] == pytest.approx(51.2e12)
    assert peak_of("NVIDIA H200")["flops"] == pytest.approx(66.9e12)
    assert "non-tensor-core" in peak_of("NVIDIA H200")["source"] and peak_of("TPU v5") is None
    tenth = {"runs": 1000, "warm_s": 2.0, "cold_s": 12.0, "slot_step_s": 1e-9}
    full = {"runs": 10000, "warm_s": 11.0, "cold_s": 21.0, "slot_step_s": 1e-9}  # 1 ms a run + 1 s
    got = crossover(tenth, full, {"slot_step_s": 1e-8, "fixed_s": 0.0})  # 1.1e6 slot-steps: 11 ms a run
    assert got["cpu_s_per_run"] == pytest.approx(0.011) and got["gpu_s_per_run"] == pytest.approx(1e-3)
    assert got["gpu_fixed_s"] == pytest.approx(1.0)
    assert got["runs_warm"] == pytest.approx(100.0) and got["runs_cold"] == pytest.approx(1100.0)
    assert crossover(tenth, full, {"slot_step_s": None}) is None
