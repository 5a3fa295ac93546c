"""Per-environment presets: the settings that size each algorithm for one environment.

One set of defaults per algorithm (each ``Config``'s, PureJaxRL's CartPole numbers for most)
does not learn every task: MinAtar wants wider networks, longer rollouts and a larger
budget, MountainCar many epochs at a high learning rate. A preset is the data that sizes
the whole algorithm for one environment (envs, rollout length, epochs, minibatches,
entropy, learning rate, network, budget), with the place it comes from. They live in
``jaxrl_par/presets/<algo>.toml``, one table per environment id::

    [CartPole-v1]
    source = "gymnax-blines agents/CartPole-v1/ppo.yaml"
    published = 500.0                  # the source's final return, if it gives one
    published_source = "gymnax README (gymnax-blines PPO)"
    [CartPole-v1.fields]               # Config fields; arrays become tuples
    num_envs = 8

How a preset is used:

* ``jaxrl-par train ALGO --env ID`` uses ID's preset when there is one (``--preset auto``,
  the default); ``--set`` overrides its fields; ``--preset none`` gives the plain
  ``Config`` defaults; ``--preset ID2`` takes another environment's preset. The JSON
  summary and ``config.json`` name the preset.
* In Python, :func:`config` builds a Config as the CLI does (preset, then your fields):
  ``presets.config("ppo", "Breakout-MinAtar", learning_rate=1e-3)``.
* A host env id takes the preset of the JAX env of the same id
  (``gymnasium:CartPole-v1`` and ``envpool:CartPole-v1`` that of ``CartPole-v1``):
  gymnax's classic-control envs are ports of gymnasium's, step for step.
* ``train(algo, preset="auto")`` applies the preset to an algorithm already built, under
  the config: a preset field replaces only a field that still holds its ``Config``
  default (:func:`apply`). ``train``'s default is ``preset=None`` (the algorithm exactly
  as built): a Python caller who built a Config chose its fields.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tomllib
from collections.abc import Iterable
from typing import Any, NamedTuple

HERE = os.path.dirname(os.path.abspath(__file__))
AUTO, NONE = "auto", "none"


class Preset(NamedTuple):
    """One algorithm's settings for one environment.

    Attributes:
      algo: the algorithm's name (``jaxrl_par.algos.ALGORITHMS``).
      env: the environment id the preset is for.
      source: where the settings come from (a config file of gymnax-blines, rejax,
        PureJaxRL, CleanRL, a paper, or "our sweep" with the command that ran it).
      fields: ``(name, value)`` pairs of Config fields, sorted by name.
      published: the source's final return on ``env`` (None if it gives none).
      published_source: where ``published`` is stated.
    """

    algo: str
    env: str
    source: str
    fields: tuple[tuple[str, Any], ...]
    published: float | None = None
    published_source: str | None = None

    @property
    def name(self) -> str:
        """``"<algo>:<env>"``, as recorded in summaries and ``config.json``."""
        return f"{self.algo}:{self.env}"

    def without(self, names: Iterable[str]) -> Preset:
        """The preset less the fields ``names`` (fields a caller sets itself)."""
        names = set(names)
        return self._replace(fields=tuple((k, v) for k, v in self.fields if k not in names))

    def record(self) -> dict:
        """``{"preset": name, "preset_source": source}`` for a summary or config.json."""
        return {"preset": self.name, "preset_source": self.source}


def _value(v: Any) -> Any:
    return tuple(_value(x) for x in v) if isinstance(v, list) else v


@functools.cache
def table(algo: str) -> dict[str, Preset]:
    """``env id -> Preset`` of ``algo`` (empty if it has no preset file)."""
    path = os.path.join(HERE, f"{algo}.toml")
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as f:
        data = tomllib.load(f)
    out = {}
    for env, entry in data.items():
        fields = tuple(sorted((k, _value(v)) for k, v in entry.get("fields", {}).items()))
        out[env] = Preset(algo, env, entry["source"], fields, entry.get("published"),
                          entry.get("published_source"))
    return out


#: Prefixes of host env ids whose preset is the JAX env's of the same id: ``envs.host``'s
#: and ``envs.envpool_envs``' ``PREFIX``, spelled here so that this module imports without
#: ``jaxrl_par.envs``, whose import starts jax (gymnax computes at import);
#: tests/test_presets.py holds the two equal.
HOST_PREFIXES = ("gymnasium:", "envpool:")


def _jax_twin(env: str) -> str:
    """``env`` without a host prefix (``"gymnasium:CartPole-v1"`` -> ``"CartPole-v1"``)."""
    for prefix in HOST_PREFIXES:
        if env.startswith(prefix):
            return env[len(prefix):]
    return env


def lookup(algo: str, env: str, preset: str | None = AUTO) -> Preset | None:
    """The preset to use for ``algo`` on ``env``: ``"auto"`` ``env``'s own (for a host env,
    the JAX env's of the same id; None if it has none), ``"none"`` or None no preset, an
    environment id that one's.

    Raises:
      ValueError: ``preset`` names an environment ``algo`` has no preset for.
    """
    if preset is None or preset == NONE:
        return None
    presets = table(algo)
    if preset == AUTO:
        return presets.get(env) or presets.get(_jax_twin(env))
    if preset not in presets:
        have = ", ".join(sorted(presets)) or "none"
        raise ValueError(f"--preset {preset}: {algo} has no preset for it; give auto, none or "
                         f"one of: {have}")
    return presets[preset]


def apply(cfg, preset: Preset | None):
    """``cfg`` with ``preset``'s fields under it: a preset field replaces a field of
    ``cfg`` that holds its Config class's default, and leaves one ``cfg`` changed.
    ``dataclasses.replace`` validates the result (``__post_init__``)."""
    if preset is None:
        return cfg
    defaults = type(cfg)()
    changes = {k: v for k, v in preset.fields if getattr(cfg, k) == getattr(defaults, k)}
    _check_fields(cfg, preset)
    return dataclasses.replace(cfg, **changes)


def _check_fields(cfg, preset: Preset) -> None:
    known = {f.name for f in dataclasses.fields(cfg)}
    unknown = sorted(k for k, _ in preset.fields if k not in known)
    if unknown:
        raise ValueError(f"preset {preset.name} names unknown {type(cfg).__qualname__} "
                         f"field(s) {unknown}")


def config(algo: str, env: str | None = None, preset: str | None = AUTO, **fields):
    """``algo``'s Config for ``env`` (the Config's default env if None) built as the CLI
    builds it: the Config defaults, then the preset (:func:`lookup`), then ``fields``."""
    from jaxrl_par import algos

    cls = algos.get(algo).Config
    base = cls() if env is None else cls(env=env)
    chosen = lookup(algo, base.env, preset)
    if chosen is not None:
        _check_fields(base, chosen)
        base = dataclasses.replace(base, **dict(chosen.fields))
    return dataclasses.replace(base, **fields)


def remake(algo, preset: str | Preset | None):
    """``(algorithm, preset)``: ``algo`` built again with ``preset`` under its config
    (:func:`apply`; a name is looked up for the config's env first), or ``algo`` as it
    is when ``preset`` is None or finds none."""
    if preset is None:
        return algo, None
    name = algo_name(algo.config)
    if isinstance(preset, str):
        preset = lookup(name, algo.config.env, preset)
    if preset is None or not preset.fields:
        return algo, preset
    from jaxrl_par import algos

    return algos.get(name).make(apply(algo.config, preset)), preset


def algo_name(cfg) -> str:
    """The algorithm name (``jaxrl_par.algos.ALGORITHMS`` key) of a Config instance."""
    from jaxrl_par import algos

    module = type(cfg).__module__
    for name, (path, _) in algos.ALGORITHMS.items():
        if path == module:
            return name
    raise ValueError(f"{type(cfg).__qualname__} is not the Config of a named algorithm")


__all__ = ["AUTO", "NONE", "Preset", "algo_name", "apply", "config", "lookup", "remake", "table"]
