"""The library's programs are float32 and int32, whatever ``jax_enable_x64`` says.

Every state, buffer and network here is built in 32 bits, as on accelerators. With
``jax.config.update("jax_enable_x64", True)`` set globally (common in scientific
notebooks), jax would make Python scalars, ``jnp.arange`` and gymnax's env states 64-bit
while the state stays 32-bit, and tracing fails (a scan carry that changes dtype).
:func:`float32` runs an entry point with x64 turned off for its duration: the setting
is thread-local and restored on exit, so the caller's own code keeps 64 bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import jax

F = TypeVar("F", bound=Callable)


def float32(fn: F) -> F:
    """``fn`` run with ``jax_enable_x64`` off (what it builds, traces and returns is 32-bit)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.enable_x64(False):
            return fn(*args, **kwargs)

    return wrapped  # type: ignore[return-value]
