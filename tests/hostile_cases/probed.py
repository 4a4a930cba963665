"""User parts for tests/test_user_probes.py (``"tests.hostile_cases.probed:NAME"``): copies of
built-in parts (they must run to the built-ins' numbers), parts that return another shape or
type, and parts that lack or misdeclare what their kind declares."""

from __future__ import annotations

import jax.numpy as jnp
import optax

from dynamics.core import inits, model, sampling, update

# --- copies of built-ins: accepted, and used ------------------------------------------------------


def query_first(W, X):
    """x_1 queries (a copy of the built-in 'first')"""
    return model.scores_first(W, X)


query_first.first_token = True
query_first.token = 0


def norm_mean(H):
    """c_H = 1/H (a copy of the built-in 'mean'); no unit_at_one declared"""
    return model.c_mean(H)


def init_normal(keys, index, d, scale, head_size=None, learned=False, **extra):
    """the built-in 'normal' init"""
    return inits.init_heads(keys, index, d, scale, head_size, learned, **extra)


def init_full_only(keys, index, d, scale, head_size=None, learned=False):
    """U and W whatever the layout (passes the probe, which asks the full layout's)"""
    return inits.init_heads(keys, index, d, scale)


def optimizer_sgd():
    """SGD's direction (the built-in 'sgd')"""
    return optax.identity()


optimizer_sgd.minibatch = True


def sampling_replace(data, key, t, size):
    """the built-in 'replace' sampling"""
    return sampling.replace_batch(data, key, t, size)


def sphere(params, names):
    """U_h and k_h back on the unit sphere (the built-in 'sphere')"""
    return update.project_sphere(params, names)


sphere.params = ("U", "k")


# --- another shape or type -------------------------------------------------------------------------


def query_summed(W, X):
    """scores summed over the heads: (n, T), not (n, H, T)"""
    return jnp.sum(model.scores_first(W, X), axis=1)


def norm_negative(H):
    """c_H = -1/H"""
    return -1.0 / H


def norm_text(H):
    """a string"""
    return "1/H"


def init_no_w(keys, index, d, scale, head_size=None, learned=False):
    """U only: no key-query matrix"""
    return {"U": jnp.zeros((keys.shape[0], d))}


def optimizer_function():
    """a function, not an optax transformation"""
    return lambda grads: grads


def sampling_one(data, key, t, size):
    """X alone, no y"""
    return data.X_train[:size]


def sphere_drops_k(params, names):
    """projects U and forgets k"""
    return {k: v for k, v in update.project_sphere(params, names).items() if k != "k"}


sphere_drops_k.params = ("U", "k")


# --- declarations missing or wrong ---------------------------------------------------------------


def no_params(params, names):
    """a projection that declares no params"""
    return params


def listed_params(params, names):
    return params


listed_params.params = ["U"]


def unknown_params(params, names):
    return params


unknown_params.params = ("U", "Z")  # Z: a parameter no model has


def bias_params(params, names):
    return params


bias_params.params = ("U", "b")


def fresh_sampling(data, key, t, size):
    return sampling.replace_batch(data, key, t, size)


fresh_sampling.fresh = True


def drawless_init(keys, index, d, scale, head_size=None, learned=False):
    return inits.init_heads(keys, index, d, scale, head_size, learned)


drawless_init.random = False


class FactoredLayout:
    """a key-query layout that declares factored"""

    factored = True
    fast_path = False


factored_layout = FactoredLayout()
