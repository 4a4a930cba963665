"""The open boundary: what a user's part hands mhsim, checked against what mhsim can simulate.

One module for every check of a part's *output* (the parts' own parameters are checked by
``dynamics.parts.value_checks``). Each refusal is one ``ConfigError`` line naming the part, the value and
what is allowed; a value that passes is used exactly as it came (no check changes a number).

A data model's ``sample(world, key, n) -> (X, y, mask)`` (``datamodels.protocol``):

- ``X``: a real floating array of shape (n, T, d): exactly the n examples asked for (training set,
  test set and every online batch alike), and the T and d of the config (declared by the model,
  given, or inferred from one traced sample: ``infer_sizes``);
- ``y``: shape (n,), real (floating or integer; integers are read as float32); classification
  labels exactly ±1 (0/1 or ±3 labels are refused: map them yourself), regression targets any
  finite real number; a regression model may return vector targets y of shape (n, o), o >= 2 (the
  model then has a matrix readout U_h ∈ R^{d×o});
- ``mask``: None, or bool of shape (n, T) (the relevant tokens) or (n, F, T) (per feature);
- finite: no NaN or inf in X or y (checked on the drawn arrays, ``check_values``);
- the test set's targets of the training set's shape per example (``check_test_targets``: a
  ``sample_test`` returning (n, 2) targets for a model trained on (n,) ones is refused).

A data model's ``noise_floor`` (a number, or a function of the world): NaN (unknown) or a finite
real >= 0, one number per world (``check_noise_floor`` for a number; a function's value checked for
its shape where it is traced, ``check_floor_shape``, and for its value on every trial's,
``check_floor_values``).

A data model's optional ``initial_params(world, shapes) -> {name: array}`` (θ(0) from its world):
a dict whose names are among ``shapes`` (one head's parameters: U, W; U, Q, K; U, k; or U, a for the
position query; U is (d, o) for vector targets), each a real
floating array of exactly that head's shape (``check_initial_params``, static), its values finite
(``check_initial_values``, on every trial's arrays).

Shapes and dtypes are checked where ``sample`` is traced (``sample``, static: free), and before any
compile by ``jax.eval_shape`` of one trial (``dynamics.core.data.make_data``); values once per
draw, on the concrete arrays. A user metric's result must be real (``check_metric``). The other
user parts (a loss, an attention, a query, …) are probed when first named, each as its registry
declares (``dynamics.parts.probes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dynamics.errors import ConfigError

LABELS = (-1.0, 1.0)  # classification labels: y·Φ is the margin only for these


def where(name: str, n: int | None = None, what: str = "") -> str:
    """How a refusal names a data model's sample: ``data.model='m:x': sample(world, key, n=8)``."""
    call = f"sample(world, key, n={n})" if n is not None else "sample"
    return f"data.model={name!r}: {call}{f' ({what})' if what else ''}"


class _Dtype:
    """An array's dtype with ``kind`` as numpy's ('f' real floating, bfloat16 included, 'c', 'i',
    'u', 'b', else 'V')."""

    def __init__(self, a: Any):
        import jax.numpy as jnp  # lazy: the parts load no JAX at import

        self.dtype = a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype
        kinds = ((jnp.bool_, "b"), (jnp.complexfloating, "c"), (jnp.floating, "f"))
        kinds += ((jnp.unsignedinteger, "u"), (jnp.signedinteger, "i"))
        self.kind = next((k for t, k in kinds if jnp.issubdtype(self.dtype, t)), "V")

    def __str__(self) -> str:
        return str(self.dtype)


def _dtype(a: Any) -> _Dtype:
    return _Dtype(a)


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in np.shape(a))


def check_sample(out: Any, n: int, T: int | None, d: int | None, at: str) -> tuple[Any, Any, Any]:
    """``sample``'s output (arrays, tracers or ``jax.ShapeDtypeStruct``) checked for shapes and
    dtypes: (X, y, mask) as they are, or a one-line ConfigError naming the bad value."""
    if not isinstance(out, tuple | list) or len(out) != 3:
        raise ConfigError(
            f"{at} returned {type(out).__name__}; it must return a tuple (X, y, mask) (mask None if unknown)"
        )
    X, y, mask = out
    if not hasattr(X, "shape") or not hasattr(y, "shape"):
        raise ConfigError(f"{at} returned X of {type(X).__name__} and y of {type(y).__name__}: arrays")
    shape = _shape(X)
    if len(shape) != 3:
        raise ConfigError(f"{at} returned X of shape {shape}; X must be (n, T, d) = {(n, T, d)}")
    if shape[0] != n:
        raise ConfigError(
            f"{at} returned {shape[0]} examples (X of shape {shape}); it must return exactly n={n}"
        )
    if (T is not None and shape[1] != T) or (d is not None and shape[2] != d):
        given = ", ".join(f"{k}={v}" for k, v in (("T", T), ("d", d)) if v is not None)
        want = f"({n}, {'T' if T is None else T}, {'d' if d is None else d})"
        raise ConfigError(
            f"{at} returned X of shape {shape}, but the config has {given}: X must be (n, T, d) = "
            f"{want} (declare the sizes the model returns, or leave T and d out to infer them)"
        )
    if _dtype(X).kind != "f":
        raise ConfigError(f"{at} returned X of dtype {_dtype(X)}; X must be a real floating array")
    if len(_shape(y)) == 2 and _shape(y)[0] == n and _shape(y)[1] >= 2:
        pass  # vector targets (regression: ``sample`` checks the model's task)
    elif _shape(y) != (n,):
        raise ConfigError(
            f"{at} returned y of shape {_shape(y)}; y must be (n,) = ({n},), one target per example "
            "(reshape an (n, 1) y with y[:, 0]), or (n, o) with o >= 2 vector targets (regression)"
        )
    if _dtype(y).kind not in "fiu":
        raise ConfigError(
            f"{at} returned y of dtype {_dtype(y)}; y must be real (floating or integer): ±1 labels "
            "or regression targets"
        )
    if mask is not None:
        m = _shape(mask)
        if _dtype(mask).kind != "b":
            raise ConfigError(
                f"{at} returned a mask of dtype {_dtype(mask)}; the mask must be bool (True on the relevant "
                "tokens; e.g. mask > 0), or None"
            )
        if not (m == (n, shape[1]) or (len(m) == 3 and m[0] == n and m[2] == shape[1] and m[1] >= 1)):
            raise ConfigError(
                f"{at} returned a mask of shape {m}; the mask must be (n, T) = {(n, shape[1])} or "
                f"(n, F, T) per feature, or None"
            )
    return X, y, mask


def sample(
    model: Any, world: Any, key: Any, n: int, T: int | None, d: int | None, at: str, test: bool = False
):
    """``model.sample(world, key, n)`` checked (``check_sample``); an integer y as float32. ``test``:
    the test set, drawn by the model's ``sample_test`` where it declares one (a test distribution
    of its own), else by ``sample``."""
    draw = getattr(model, "sample_test", None) if test else None
    if draw is not None and not callable(draw):
        raise ConfigError(f"{at}: the data model's sample_test is {type(draw).__name__}, not a function")
    X, y, mask = check_sample((draw or model.sample)(world, key, n), n, T, d, at)
    if len(_shape(y)) == 2 and getattr(model, "task", "classification") != "regression":
        raise ConfigError(
            f"{at} returned vector targets y of shape {_shape(y)} for a classification model; vector "
            "targets need task = 'regression' (a classification label is one ±1 per example)"
        )
    if _dtype(y).kind in "iu":
        import jax.numpy as jnp  # lazy: the parts load no JAX at import

        y = jnp.asarray(y, jnp.float32)
    return X, y, mask


def check_values(name: str, task: str, arrays: dict[str, Any]) -> None:
    """The drawn arrays by name (``X_train``, ``y_train``, …, each with any leading trial axis):
    X and y finite, classification labels ±1. A one-line ConfigError naming the array."""
    for key, a in arrays.items():
        if a is None or key.startswith("mask"):
            continue
        v = np.asarray(a)
        finite = np.isfinite(v)
        if not finite.all():
            bad = v[~finite]
            raise ConfigError(
                f"data.model={name!r}: {key} has {bad.size} non-finite values (e.g. {bad.flat[0]}); X and y "
                "must be finite"
            )
        if key.startswith("y") and task == "classification":
            wrong = v[(v != LABELS[0]) & (v != LABELS[1])]
            if wrong.size:
                seen = np.unique(v)[:6].tolist()
                raise ConfigError(
                    f"data.model={name!r}: {key} has labels {seen} ({wrong.size} entries not ±1); "
                    "classification labels must be -1 or +1 (map 0/1 labels with 2*y - 1), or give the model "
                    "task = 'regression'"
                )


def infer_sizes(model: Any, name: str, cfg: Any) -> dict[str, int]:
    """T and d of a data model that declares none, from one traced sample (``jax.eval_shape`` of
    ``setup`` and ``sample`` with the config's n_train; T and d not given are None in ``cfg``)."""
    import jax  # lazy: the parts load no JAX at import

    def one(key):
        world = model.setup(key, cfg)
        return model.sample(world, key, cfg.n_train)

    try:
        with jax.enable_x64(False):
            out = jax.eval_shape(one, jax.random.PRNGKey(0))
    except Exception as err:  # noqa: BLE001 -- a user's code may raise anything
        missing = " and ".join(k for k in ("T", "d") if getattr(cfg, k) is None)
        raise ConfigError(
            f"data.{missing[0]}=None: data model {name!r} has no default {missing}; give data.T (--tokens) "
            f"and data.d (--width), or declare sizes = {{'T': ..., 'd': ...}}: one traced sample did not "
            f"give them ({type(err).__name__}: {' '.join(str(err).split())[:160]})"
        ) from None
    X = check_sample(out, cfg.n_train, cfg.T, cfg.d, where(name, cfg.n_train, "one traced sample"))[0]
    return {"T": int(X.shape[1]), "d": int(X.shape[2])}


def check_noise_floor(name: str, value: Any) -> None:
    """A data model's declared ``noise_floor`` (the Bayes risk its excess risk is measured from):
    None or NaN (unknown), a finite real >= 0, or a function of the world (its value is traced)."""
    if value is None or callable(value):
        return
    ok = not isinstance(value, bool | str | bytes) and np.ndim(value) == 0 and _dtype(value).kind in "fiu"
    if ok:
        v = float(value)
        ok = np.isnan(v) or (np.isfinite(v) and v >= 0)
    if not ok:
        raise ConfigError(
            f"data.model={name!r} has noise_floor={value!r}; allowed: a finite real >= 0 (the Bayes risk "
            "of the square loss), None or NaN if unknown, or a function of the world"
        )


def check_test_targets(name: str, y: Any, y_test: Any) -> None:
    """The test set's targets of the training targets' kind: y_test (n_test,) for y (n,), (n_test, o)
    for (n, o) (static). A test loss of other targets (a test distribution of its own,
    ``sample_test``) would be a number of another model."""
    if _shape(y)[1:] != _shape(y_test)[1:]:

        def form(s):
            return "(n,)" if len(s) == 1 else f"(n, {s[1]})"

        raise ConfigError(
            f"data.model={name!r}: the test set's y is {form(_shape(y_test))} {_shape(y_test)}, the "
            f"training set's {form(_shape(y))} {_shape(y)}; both must be targets of one shape per "
            "example (sample_test returns the same kind of targets as sample)"
        )


def check_floor_shape(name: str, floor: Any) -> Any:
    """A world's noise floor (a function's value, traced) is one number: shape () (static)."""
    if _shape(floor) != ():
        raise ConfigError(
            f"data.model={name!r}: noise_floor returned shape {_shape(floor)}; it must be one number "
            "(the Bayes risk of the square loss), NaN if unknown"
        )
    return floor


def check_floor_values(name: str, floor: Any) -> None:
    """Every trial's noise floor (drawn, a function's values included) as ``check_noise_floor``
    allows a declared one: NaN (unknown) or a finite real >= 0."""
    if floor is None:
        return
    v = np.asarray(floor, np.float64)
    bad = v[~(np.isnan(v) | (np.isfinite(v) & (v >= 0)))]
    if bad.size:
        raise ConfigError(
            f"data.model={name!r}: noise_floor returned {bad.flat[0]} ({bad.size} trials); allowed: a finite "
            "real >= 0 (the Bayes risk of the square loss), or NaN if unknown"
        )


def check_metric(name: str, value: Any) -> None:
    """A user metric's value (a traced array): numeric and real (a complex value is refused, never
    cast to its real part); None, a string or any other object is refused before JAX reads it."""
    if not hasattr(value, "dtype"):
        import jax.numpy as jnp  # lazy: the parts load no JAX at import

        try:
            array = None if value is None or isinstance(value, str | bytes) else jnp.asarray(value)
        except TypeError:
            array = None
        if array is None:
            raise ConfigError(
                f"metric {name!r} returned {type(value).__name__} {value!r:.40}; a metric must return a "
                "real numeric array (a number, or a jnp array of real numbers)"
            )
        value = array
    dtype = _dtype(value)
    if dtype.kind == "c":
        raise ConfigError(
            f"metric {name!r} returned a complex array ({dtype}); metrics must be real: return "
            "jnp.abs(v) or jnp.real(v) yourself"
        )
    if dtype.kind not in "biuf":
        raise ConfigError(
            f"metric {name!r} returned {type(value).__name__} of dtype {dtype}; a metric must return a real "
            "numeric array"
        )


def check_drawn(at: str, out: Any, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """An init's draw (``at``: ``"model.init='m:f'"``): a dict of exactly the arrays of ``shapes``
    (the model's layout: U and W; U, Q and K; U and k; U and a), each real floating of its shape
    (static: tracers or arrays); a one-line ConfigError otherwise."""
    want = ", ".join(f"{k} {v}" for k, v in shapes.items())
    if not isinstance(out, dict) or set(out) != set(shapes):
        got = f"a dict of {sorted(map(str, out))}" if isinstance(out, dict) else type(out).__name__
        raise ConfigError(f"{at} returned {got}; this model's layout draws {want}")
    for key, a in out.items():
        if not hasattr(a, "shape") or _shape(a) != shapes[key] or _dtype(a).kind != "f":
            what = f"of shape {_shape(a)} and dtype {_dtype(a)}" if hasattr(a, "shape") else type(a).__name__
            raise ConfigError(
                f"{at} returned {key!r} {what}; this model's layout draws {want}, real floating"
            )
    return out


INITIAL = "initial_params(world, shapes)"


def check_initial_params(name: str, out: Any, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """A data model's ``initial_params(world, shapes)`` output (arrays, tracers or shape structs)
    checked for names, shapes and dtypes against ``shapes`` (one head's); a one-line ConfigError."""
    at = f"data.model={name!r}: {INITIAL}"
    if not isinstance(out, dict):
        raise ConfigError(
            f"{at} returned {type(out).__name__}; it must return a dict {{name: array}} of one head's "
            f"parameters among {', '.join(shapes)}"
        )
    for key, a in out.items():
        if key not in shapes:
            raise ConfigError(
                f"{at} returned {key!r}, not a parameter of this model; its parameters are "
                f"{', '.join(shapes)} (the query and key-query layout decide which)"
            )
        if not hasattr(a, "shape"):
            raise ConfigError(f"{at} returned {key!r} as {type(a).__name__}; it must be an array")
        if _shape(a) != tuple(shapes[key]):
            raise ConfigError(
                f"{at} returned {key!r} of shape {_shape(a)}; one head's {key} is {tuple(shapes[key])} "
                "(every head of a run starts from it)"
            )
        if _dtype(a).kind != "f":
            raise ConfigError(f"{at} returned {key!r} of dtype {_dtype(a)}; it must be real floating")
    return out


def check_initial_values(name: str, arrays: dict[str, Any]) -> None:
    """Every trial's ``initial_params`` values (name -> (trials, …)) finite; a one-line ConfigError."""
    for key, a in arrays.items():
        v = np.asarray(a)
        bad = v[~np.isfinite(v)]
        if bad.size:
            raise ConfigError(
                f"data.model={name!r}: {INITIAL} returned {key!r} with {bad.size} non-finite values "
                f"(e.g. {bad.flat[0]}); θ(0) must be finite"
            )
