"""Config helpers shared by every algorithm: the schedules that follow from a Config's
fields, and ``field=value`` parsing (``--set``)."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any

from jaxrl_par.networks import ACTION_STDS, ACTIVATIONS, TORSOS, ActorCritic


def algorithm_name(cfg) -> str:
    """The name of the algorithm ``cfg`` configures: its module's, e.g. ``"ppo"``."""
    return type(cfg).__module__.rsplit(".", 1)[-1]


class RolloutSchedule:
    """For the Config of an algorithm whose update acts ``num_envs x num_steps`` env steps
    (PPO, IMPALA): its batch and number of updates, and the checks of the actor-critic
    fields they share (``check_actor_critic``)."""

    @property
    def batch_size(self) -> int:
        """Env steps per update (all envs, all devices)."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    def check_actor_critic(self) -> None:
        """``ValueError`` for an unknown torso, activation or ``action_std``, a bad
        ``normalize_rewards``, or a run shorter than one update."""
        if self.normalize_rewards not in (True, False, "auto"):
            raise ValueError(f"normalize_rewards={self.normalize_rewards!r}; choose True, "
                             "False or 'auto' (on for continuous actions)")
        if self.torso not in TORSOS:
            raise ValueError(f"torso={self.torso!r}; choose from {TORSOS}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}; choose from {sorted(ACTIVATIONS)}")
        if self.action_std not in ACTION_STDS:
            raise ValueError(f"action_std={self.action_std!r}; choose from {ACTION_STDS}")
        if self.num_updates < 1:
            raise ValueError(
                f"total_timesteps={self.total_timesteps} is less than one update of "
                f"num_envs*num_steps={self.batch_size} steps"
            )

    def normalizes_rewards(self, env) -> bool:
        """Whether rewards are normalised for ``env``: ``normalize_rewards``, with
        ``"auto"`` on for continuous actions and off for discrete ones."""
        if self.normalize_rewards == "auto":
            return not env.discrete
        return bool(self.normalize_rewards)

    def actor_critic(self, env):
        """The :class:`~jaxrl_par.networks.ActorCritic` of these fields for ``env`` (a
        :class:`~jaxrl_par.envs.VecEnv`)."""
        return ActorCritic(num_actions=env.num_actions, discrete=env.discrete,
                           obs_shape=env.observation_shape,
                           hidden_sizes=tuple(self.hidden_sizes), activation=self.activation,
                           shared_torso=self.shared_torso, torso=self.torso,
                           action_std=self.action_std,
                           policy_init_scale=self.policy_init_scale)


class ReplaySchedule:
    """For the Config of a replay learner that acts ``num_envs x num_steps`` env steps per
    update and takes a gradient step per ``train_frequency`` of them (DQN, SAC)."""

    @property
    def env_steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def gradient_steps_per_update(self) -> int:
        return self.env_steps_per_update // self.train_frequency

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.env_steps_per_update

    @property
    def warmup_updates(self) -> int:
        """Updates that end before ``learning_starts`` env steps: no learning in them
        (``Algorithm.warmup_updates``)."""
        if self.learning_starts <= 0:
            return 0
        ending_at_or_past = -(-self.learning_starts // self.env_steps_per_update)  # ceil
        return min(self.num_updates, ending_at_or_past - 1)

    def check_continuous_actor(self) -> None:
        """``ValueError`` for an unknown env id, an env with discrete actions, or an
        unknown activation (SAC, DDPG, TD3)."""
        from jaxrl_par import envs  # gymnax computes at import; configs are made without it

        name = algorithm_name(self)
        envs.check_env_id(self.env)
        if envs.spec(self.env).discrete:
            raise ValueError(f"{name}.Config: {self.env} has discrete actions; {name} takes a "
                             "continuous (Box) action space: train dqn or ppo on it "
                             f"(jaxrl-par train dqn --env {self.env})")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}; choose from {sorted(ACTIVATIONS)}")

    def check_replay(self) -> None:
        """``ValueError`` unless a batch fits in the replay and the run holds one update."""
        name = algorithm_name(self)
        if self.batch_size > self.buffer_size:
            raise ValueError(f"{name}.Config.batch_size={self.batch_size} exceeds buffer_size="
                             f"{self.buffer_size}: the replay could never fill a batch")
        if self.num_updates < 1:
            raise ValueError(f"total_timesteps={self.total_timesteps} is less than one update "
                             f"of num_envs*num_steps={self.env_steps_per_update} steps")

    def check_train_frequency(self) -> None:
        """``ValueError`` unless every update takes a whole number of gradient steps."""
        if self.env_steps_per_update % self.train_frequency:
            name = algorithm_name(self)
            raise ValueError(
                f"{name}.Config.train_frequency={self.train_frequency} does not divide the "
                f"num_envs*num_steps={self.env_steps_per_update} env steps of one update; "
                "pick a divisor so every update takes a whole number of gradient steps")


def _sequence_items(text: str) -> list[str]:
    """The comma-separated items of ``text``, without enclosing brackets or parentheses."""
    text = text.strip()
    if text[:1] in "([" and text[-1:] in ")]":
        text = text[1:-1]
    return text.split(",")


def _parse_value(text: str, annotation: Any, default: Any):
    """Parses ``text`` as the type of a config field (from its default or annotation)."""
    if isinstance(annotation, str):
        kind = annotation
    else:
        kind = getattr(annotation, "__name__", str(annotation))
    if text.lower() in ("none", "null") and ("None" in kind or default is None):
        return None
    if isinstance(default, bool) or kind == "bool":
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean (true/false), got {text!r}")
    if "bool" in kind.split(" | ") and text.lower() in ("true", "false"):  # bool | str
        return text.lower() == "true"
    if kind.startswith("tuple[str") or (typing.get_origin(annotation) is tuple
                                        and typing.get_args(annotation)[:1] == (str,)):
        # names, e.g. sweep=learning_rate,ent_coef or the form config.json writes,
        # sweep=["learning_rate", "ent_coef"]
        return tuple(p.strip().strip("'\"") for p in _sequence_items(text) if p.strip())
    if isinstance(default, tuple) or kind.startswith("tuple"):
        # 64,64 or (64, 64) or [64, 64] (the form config.json writes)
        parts = [p for p in _sequence_items(text) if p.strip()]
        return tuple(int(p) if p.strip().lstrip("-").isdigit() else float(p) for p in parts)
    members = kind.split(" | ")  # an optional field, e.g. "int | None", defaults to None
    if isinstance(default, int) or kind == "int" or (default is None and "int" in members):
        try:
            return int(text)
        except ValueError:
            value = float(text)  # "1e6" style; "abc" raises here
        if not value.is_integer():  # 1.5, inf, nan
            raise ValueError(f"expected a whole number, got {text!r}")
        return int(value)
    if isinstance(default, float) or kind == "float" or (default is None
                                                          and "float" in members):
        return float(text)
    return text


def apply_overrides(cfg, overrides: dict[str, str] | list[str]):
    """Returns ``cfg`` with ``field=value`` strings applied, parsed to each field's type.

    An unknown field or an unparsable value raises ``ValueError`` listing the fields.
    """
    if isinstance(overrides, list):
        pairs = {}
        for item in overrides:
            if "=" not in item:
                raise ValueError(f"--set expects field=value, got {item!r}")
            k, v = item.split("=", 1)
            pairs[k.strip()] = v.strip()
        overrides = pairs
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    hints = typing.get_type_hints(type(cfg))
    listing = ", ".join(f"{n}={getattr(cfg, n)!r}" for n in fields)
    changes = {}
    for name, text in overrides.items():
        if name not in fields:
            close = difflib.get_close_matches(name, list(fields), n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise ValueError(f"unknown config field {name!r}; {hint}valid fields: {listing}")
        try:
            changes[name] = _parse_value(text, hints.get(name), getattr(cfg, name))
        except ValueError as e:
            raise ValueError(f"bad value for {name}: {e}; valid fields: {listing}") from None
    return dataclasses.replace(cfg, **changes)
