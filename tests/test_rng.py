"""dynamics.core.rng against jax.random: the same keys and the same draws, bit for bit."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FAST_COMPILE, assert_users_numbers

from dynamics.config.schema import DataConfig
from dynamics.core import rng
from dynamics.core.data import make_data


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**31, 2**32 - 1])
def test_numpy_keys_are_jax_random_keys(seed):
    key = jax.random.PRNGKey(seed)
    np.testing.assert_array_equal(rng.seed(seed), np.asarray(key))
    np.testing.assert_array_equal(rng.split(rng.seed(seed), 5), np.asarray(jax.random.split(key, 5)))
    for data in (0, 7, 2**32 - 1):
        np.testing.assert_array_equal(
            rng.fold_in(rng.seed(seed), data), np.asarray(jax.random.fold_in(key, data))
        )
    with pytest.raises(ValueError, match="seed=-1"):
        rng.seed(-1)


def _draws(keys: jax.Array) -> dict[str, jax.Array]:
    """One of each draw the data models make (and a few more), per key, vmapped."""

    def one(k):
        a, b, c, d = jax.random.split(k, 4)
        return {
            "normal": jax.random.normal(a, (7, 5, 3)),
            "bits32": jax.random.bits(b, (11,)),
            "bits16": jax.random.bits(b, (5,), jnp.uint16),
            "bits8": jax.random.bits(c, (5,), jnp.uint8),
            "randint": jax.random.randint(c, (13,), 0, 4),
            "bernoulli": jax.random.bernoulli(d, 0.3, (9,)),
            "uniform": jax.random.uniform(d, (3, 2)),
            "fold_in": jax.random.key_data(jax.random.fold_in(a, 5)),
        }

    return jax.vmap(one)(keys)


# Both programs at XLA's backend optimisation level 0 on the CPU (faster to compile, jax.random's
# Threefry loop especially): bit for bit, two programs of the same level are compared.


def test_threefry_impl_draws_what_jax_random_draws():
    raw = np.stack([rng.fold_in(rng.seed(3), i) for i in range(2)])  # (2, 2)
    ours = jax.jit(lambda r: _draws(rng.wrap(r)), compiler_options=FAST_COMPILE)(raw)
    ref = jax.jit(lambda r: _draws(jax.random.wrap_key_data(r)), compiler_options=FAST_COMPILE)(raw)
    assert ours.keys() == ref.keys()
    for name in ref:
        np.testing.assert_array_equal(ours[name], ref[name], err_msg=name)


# make_data's arrays for key PRNGKey(11) and 3 trials, drawn by make_data at commit 79e4929
# (jax.random's own threefry, before dynamics.core.rng): the same seed must keep giving the same data.
REFERENCE = Path(__file__).parent / "data" / "make_data_reference.npz"
CONFIGS = {
    "dm1": DataConfig(model="dm1", n_train=6, n_test=5),
    "mixture": DataConfig(
        model="mixture",
        n_train=4,
        n_test=3,
        T=6,
        d=7,
        r=2,
        n_irrelevant=3,
        geometry="orthogonal",
        noise=0.5,
        signal=2.0,
    ),
    "planted": DataConfig(model="planted", n_train=5, n_test=4, T=4, d=6, teacher_heads=2, label_noise=0.1),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_make_data_draws_the_reference_arrays_bit_for_bit(name):
    with np.load(REFERENCE) as z:
        saved = {k[len(name) + 1 :]: z[k] for k in z.files if k.startswith(name + "_")}
    data, shared = make_data(CONFIGS[name], rng.seed(11), 3)  # PRNGKey(11)'s bits (tested above)
    assert not shared
    # the reference holds the five fields Data had then; the fields added later are checked apart
    old = data._fields[:5]
    drawn = {k: np.asarray(v) for k, v in data._asdict().items() if v is not None and k in old}
    assert drawn.keys() == saved.keys()
    assert np.isnan(np.asarray(data.noise_floor)).all() and data.noise_floor.shape == (3,)
    assert (data.mask_train is None) == (data.mask_test is None)
    for k, v in drawn.items():
        assert v.dtype == saved[k].dtype, k
        assert_users_numbers(v, saved[k], err_msg=f"{name} {k}")  # bit for bit at the users' level
