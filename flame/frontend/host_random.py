"""Python's and NumPy's global random draws inside a traced body raise TraceError.

A compiled step runs its Python body once, while tracing, and replays the program it recorded. A
number drawn there by `random.random()` or `np.random.rand()` is a Python value, so it would be a
constant of the program: the same "random" flip, crop or noise level at every step, with no error.
While a body is traced (frontend.context.TRACING_HOOKS), the drawing functions of the `random` module
and NumPy's legacy `numpy.random` functions are wrapped so that a call made from the tracing thread
raises a TraceError at the user's line saying what to write instead (flame's random ops, which draw
anew at every call, or a value drawn outside the step and passed in as a tensor). Calls from other
threads (a DataLoader's workers) and calls outside a trace run the originals; the originals are put
back when the trace ends. Functions imported by name before the trace (`from random import random`)
and Generator objects (`np.random.default_rng()`, `random.Random()`) are not wrapped; their draws
are frozen the same way."""

from __future__ import annotations

import functools
import random
import threading

import numpy as np

from flame.errors import TraceError
from flame.frontend.context import TRACING_HOOKS, current_trace, user_location

# the functions of each module that draw values (seeding and state functions are left alone)
_PYTHON = ("random", "uniform", "randint", "randrange", "choice", "choices", "sample", "shuffle", "gauss",
           "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate", "gammavariate", "betavariate",
           "paretovariate", "weibullvariate", "triangular", "getrandbits", "randbytes", "binomialvariate")
_NUMPY = ("rand", "randn", "randint", "random", "random_sample", "ranf", "sample", "random_integers", "uniform",
          "normal", "standard_normal", "choice", "shuffle", "permutation", "bytes", "beta", "binomial",
          "exponential", "gamma", "geometric", "laplace", "logistic", "lognormal", "multinomial",
          "multivariate_normal", "poisson", "rayleigh", "standard_cauchy", "standard_exponential",
          "standard_gamma", "standard_t", "triangular", "vonmises", "wald", "weibull", "zipf", "dirichlet")

_INSTEAD = ("flame.rand, flame.randn or flame.randint: tensors drawn anew at every call; a random choice is "
            "flame.where(flame.rand(()) < p, a, b)")

_lock = threading.Lock()
_depth = [0]  # bodies being traced (in any thread): the wrappers are installed while it is positive
_saved: list[tuple[object, str, object]] = []  # (module, name, original) of each wrapper installed


def _refusing(module_name: str, name: str, original):
    @functools.wraps(original)
    def draw(*args, **kwargs):
        if current_trace.get() is None:  # another thread, or code outside the traced body
            return original(*args, **kwargs)
        raise TraceError(
            f"{module_name}.{name}() inside @flame.compile runs once, while tracing: its value would be a "
            f"constant of the compiled step, the same at every call. Draw it with flame instead "
            f"({_INSTEAD}), or draw it outside the step and pass it in as a tensor\n"
            f"  at {user_location()}"
        )

    return draw


def _install(tracing: bool) -> None:
    """TRACING_HOOKS: wrap the drawing functions as the first body starts being traced, restore them
    as the last one ends."""
    with _lock:
        if tracing:
            _depth[0] += 1
            if _depth[0] > 1:
                return
            for module, module_name, names in ((random, "random", _PYTHON), (np.random, "numpy.random", _NUMPY)):
                for name in names:
                    original = getattr(module, name, None)
                    if callable(original):
                        _saved.append((module, name, original))
                        setattr(module, name, _refusing(module_name, name, original))
        else:
            _depth[0] -= 1
            if _depth[0] > 0:
                return
            for module, name, original in _saved:
                setattr(module, name, original)
            _saved.clear()


TRACING_HOOKS.append(_install)
