"""The environment registry: every gymnax id, the probes, and the library's own envs."""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable
from typing import Any

import gymnax
import jax
import jax.numpy as jnp

from jaxrl_par.envs import brax_envs, host
from jaxrl_par.envs.core import VecEnv
from jaxrl_par.envs.probes import PROBES

# id -> factory returning (env, default_params)
_REGISTRY: dict[str, Callable[[], tuple[Any, Any]]] = {}
# id -> dtype the observations are delivered in (see ``register``)
_OBS_DTYPE: dict[str, str] = {}
# id -> the module whose import registers it, for ids registered outside this library
# (see ``source_record``)
_SOURCE: dict[str, str] = {}
# MinAtar's observation is a grid of 0/1 channels (Young & Tian 2019); gymnax hands it
# over as float32, but each value fits a byte.
_BINARY_OBS_SUFFIX = "-MinAtar"


def register(env_id: str, factory: Callable[[], tuple[Any, Any]],
             obs_dtype: str = "float32") -> None:
    """Registers ``factory() -> (env, default_params)`` under ``env_id``.

    ``obs_dtype`` is the dtype :class:`VecEnv` delivers observations in; the env's own
    values must be exact in it. ``"uint8"`` suits images and 0/1 grids: rollouts and
    replay then hold a quarter of the bytes, and the networks convert to float32 at
    their input (the same values, so the same results).
    """
    if env_id in _REGISTRY:
        raise ValueError(f"environment id {env_id!r} is already registered")
    _REGISTRY[env_id] = factory
    _OBS_DTYPE[env_id] = jnp.dtype(obs_dtype).name
    module = getattr(factory, "__module__", None)
    if module and module != "__main__" and module.partition(".")[0] != "jaxrl_par":
        _SOURCE[env_id] = module


def source_record(env_id: str | None) -> dict[str, str]:
    """``{"env_module": MODULE}`` when ``env_id`` was registered by a module outside
    this library (its factory's module; not ``__main__``, which cannot be imported
    again), else ``{}``: what a run's records keep so that loading the run later can
    register the env again (:func:`import_source`)."""
    module = _SOURCE.get(env_id) if isinstance(env_id, str) else None
    return {"env_module": module} if module else {}


def import_source(env_id: str, record: dict) -> None:
    """Imports the module a run's record names for ``env_id`` (:func:`source_record`)
    unless the id is registered already; an import that fails is a ``ValueError``
    naming the module and the fix."""
    import importlib
    import os
    import sys

    module = record.get("env_module")
    if not module or env_id in _REGISTRY:
        return
    if os.getcwd() not in sys.path:  # as `python -m` has it
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"the run's environment {env_id!r} is registered by module "
                         f"{module!r}, which cannot be imported here ({e}): run from the "
                         "directory it was trained in, or put the module on PYTHONPATH"
                         ) from None


def list_envs() -> list[str]:
    """All registered environment ids, sorted."""
    return sorted(_REGISTRY)


def _gymnax_factory(env_id: str):
    return lambda: gymnax.make(env_id)


def _probe_factory(cls):
    def factory():
        env = cls()
        return env, env.default_params

    return factory


for _id in gymnax.registered_envs:
    register(_id, _gymnax_factory(_id),
             obs_dtype="uint8" if _id.endswith(_BINARY_OBS_SUFFIX) else "float32")
for _id, _cls in PROBES.items():
    register(_id, _probe_factory(_cls))


def check_env_id(env_id: str) -> None:
    """Raises ``ValueError`` naming the closest known ids if ``env_id`` is unknown
    (``"gymnasium:<id>"``: unknown to gymnasium, see :mod:`jaxrl_par.envs.host`;
    ``"brax:<name>"``: unknown to Brax, see :mod:`jaxrl_par.envs.brax_envs`)."""
    if env_id in _REGISTRY:
        return
    if brax_envs.is_brax(env_id):  # registered on first use, once Brax knows the name
        brax_envs.check_env_id(env_id)
        register(env_id, brax_envs.factory(env_id))
        return
    if host.is_host(env_id):
        host.check_env_id(env_id)
        return
    lowered = {k.lower(): k for k in _REGISTRY}
    close = difflib.get_close_matches(env_id.lower(), list(lowered), n=5, cutoff=0.4)
    hint = ", ".join(lowered[c] for c in close) if close else "none close"
    raise ValueError(
        f"unknown environment {env_id!r}; closest known ids: {hint}. "
        "`jaxrl-par list` (or jaxrl_par.envs.list_envs()) prints them all; your own env "
        "must be registered first (jaxrl_par.envs.register; on the command line, --import "
        "the module that registers it: see examples/corridor.py)."
    )


def spec(env_id: str):
    """What networks and configs read of an env (spaces, dtype, bounds): a one-env
    :class:`VecEnv`, or for host envs (``"gymnasium:<id>"``) their
    :class:`~jaxrl_par.envs.host.HostSpec`."""
    check_env_id(env_id)
    return host.spec(env_id) if host.is_host(env_id) else make(env_id, 1)


def observation_numbers(env_id: str, num_envs: int) -> int:
    """How many numbers the observations of ``num_envs`` copies of ``env_id`` hold at one
    step together: ``num_envs`` x the observation's size (CartPole: 4 per env, a MinAtar
    grid: 400 or more)."""
    return num_envs * math.prod(spec(env_id).observation_shape)


def make(env_id: str, num_envs: int = 1, **env_params: Any) -> VecEnv:
    """Builds ``num_envs`` vectorised, auto-resetting copies of ``env_id``.

    Args:
      env_id: a registered id (``list_envs()``), e.g. ``"CartPole-v1"``.
      num_envs: number of parallel copies.
      **env_params: overrides of the environment's ``EnvParams`` fields, e.g.
        ``max_steps_in_episode=200``.
    """
    check_env_id(env_id)
    if host.is_host(env_id):
        raise ValueError(f"{env_id} is stepped on the host (gymnasium), not inside a "
                         f"compiled program: {host.RUNTIMES}")
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    # Built with concrete values even when called inside a trace (an algorithm's init
    # makes its envs there): some gymnax constructors branch on jnp arrays in Python
    # (FourRooms-misc and MetaMaze-misc read their maps with `if`), which fails on tracers.
    with jax.ensure_compile_time_eval():
        env, params = _REGISTRY[env_id]()
    if env_params:
        valid = {f.name for f in dataclasses.fields(params)}
        unknown = sorted(set(env_params) - valid)
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {unknown} for {env_id}; valid: {sorted(valid)}"
            )
        params = params.replace(**env_params)
    return VecEnv(env_id=env_id, env=env, params=params, num_envs=num_envs,
                  obs_dtype=_OBS_DTYPE[env_id])
