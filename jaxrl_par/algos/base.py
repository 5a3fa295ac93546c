"""The protocol every synchronous algorithm follows (see DESIGN.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax


class Algorithm(NamedTuple):
    """An algorithm as a pair of pure functions plus its config.

    Attributes:
      config: the frozen, validated config it was made from.
      init: ``init(key) -> state``: the whole training state as a pytree.
      update: ``update(state) -> (state, metrics)``: one iteration (act + learn). Pure,
        jit/vmap/scan-safe. ``metrics`` is a dict of scalar arrays and always holds
        ``episode_return`` (mean undiscounted return of episodes that finished during
        the iteration, NaN if none did) and ``num_episodes``.
      num_updates: iterations in a full run (``config.total_timesteps`` worth).
      env_steps_per_update: environment steps one iteration takes (over all envs).
      act: ``act(state, obs, key) -> action`` for evaluation with the current parameters.
      parts: named pure pieces of ``update`` (e.g. ``"rollout"``), for benchmarks and the
        asynchronous runtimes that compose them differently.
    """

    config: Any
    init: Callable[[jax.Array], Any]
    update: Callable[[Any], tuple[Any, dict[str, jax.Array]]]
    num_updates: int
    env_steps_per_update: int
    act: Callable[[Any, jax.Array, jax.Array], jax.Array] | None = None
    parts: Mapping[str, Callable] = MappingProxyType({})
