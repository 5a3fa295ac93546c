"""Config fields declared once: each with its meaning and its range, in groups that the
algorithms' Configs share.

An algorithm's ``Config`` is a frozen dataclass made with :func:`configclass` from the
groups it needs (:class:`Run`, :class:`Vectorized`, :class:`Optimizer`,
:class:`Network`, :class:`Replay`, ...) plus its own fields, each declared with
:func:`field`. A Config that wants another default for a group's field redeclares it
with a plain default (``hidden_sizes: tuple[int, ...] = (120, 84)``); its meaning and
range stay the group's. :func:`configclass` checks every field's range at construction
(and after ``dataclasses.replace``) and appends the table of fields to the class
docstring, so ``help(ppo.Config)``, ``jaxrl-par train ppo --help`` and docs/config.md
show the same text.

Dataclasses collect fields from the last base first, so a Config lists its groups from
the most specific to :class:`Run`, which holds ``env`` and comes first in ``repr`` and
in ``config.json``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import textwrap
import typing
from typing import Any, NamedTuple

RANGES = ("positive", "non_negative", "unit_interval")


def field(default: Any, doc: str, *, range: str | None = None) -> Any:  # noqa: A002
    """A Config field with a default, a one-line meaning and an optional range
    (``"positive"``, ``"non_negative"`` or ``"unit_interval"``) checked at
    construction."""
    if range is not None and range not in RANGES:
        raise ValueError(f"range={range!r}; choose from {RANGES}")
    return dataclasses.field(default=default, metadata={"doc": doc, "range": range})


class FieldInfo(NamedTuple):
    """What :func:`describe` tells of one field."""
    name: str
    type: str
    default: Any
    doc: str
    range: str | None
    group: str  # the name of the class that declares the field's meaning
    owner: str  # that class, as module.qualname


def _declaring(cls: type, name: str) -> tuple[dict, type]:
    """The metadata of field ``name`` from the first class in ``cls``'s MRO that
    declares it with :func:`field`, and that class."""
    for klass in cls.__mro__:
        own = klass.__dict__.get("__annotations__", {})
        fields = klass.__dict__.get("__dataclass_fields__", {})
        if name in own and name in fields and fields[name].metadata.get("doc"):
            return dict(fields[name].metadata), klass
    return {}, cls


@functools.cache
def describe(cls: type) -> tuple[FieldInfo, ...]:
    """Every field of the Config class ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta, owner = _declaring(cls, f.name)
        kind = hints.get(f.name, f.type)
        kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
        if kind == "tuple":  # typing.get_type_hints gives tuple[int, ...] this name
            kind = str(hints.get(f.name)).replace("typing.", "")
        out.append(FieldInfo(f.name, kind, f.default, meta.get("doc", ""),
                             meta.get("range"), owner.__name__,
                             f"{owner.__module__}.{owner.__qualname__}"))
    return tuple(out)


def table(cls: type, width: int = 88) -> str:
    """The fields of ``cls`` as plain text: ``name: type = default`` and its meaning,
    grouped by the class that declares each."""
    lines, group = [], None
    own = cls.__module__.rsplit(".", 1)[-1]
    for info in describe(cls):
        if info.group != group:
            group = info.group
            lines.append(f"{own if group == cls.__name__ else group} fields:")
        lines.append(f"  {info.name}: {info.type} = {info.default!r}")
        if info.doc:
            lines += textwrap.wrap(info.doc, width, initial_indent=" " * 6,
                                   subsequent_indent=" " * 6)
    return "\n".join(lines)


def check(cfg) -> None:
    """``ValueError`` naming the field for a value outside its declared range (NaN is
    outside every range), or NaN in a field without one."""
    where = f"{type(cfg).__module__.rsplit('.', 1)[-1]}.Config"
    for info in describe(type(cfg)):
        v = getattr(cfg, info.name)
        if info.range is None:
            if isinstance(v, float) and math.isnan(v):
                raise ValueError(f"{where}.{info.name} is NaN")
            continue
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if info.range == "positive" and not (number and v > 0):
            raise ValueError(f"{where}.{info.name} must be > 0, got {v!r}")
        if info.range == "non_negative" and not (number and v >= 0):
            raise ValueError(f"{where}.{info.name} must be >= 0, got {v!r}")
        if info.range == "unit_interval" and not (number and 0 <= v <= 1):
            raise ValueError(f"{where}.{info.name} must be in [0, 1], got {v!r}")


def configclass(cls: type) -> type:
    """``cls`` as a frozen dataclass whose construction checks each field's range
    (:func:`check`) before the class's own ``__post_init__``, with the field table
    appended to its docstring."""
    # the class's own checks, or the ones it inherits (a Config that only changes defaults)
    own_post_init = next((klass.__dict__["__post_init__"] for klass in cls.__mro__
                          if "__post_init__" in klass.__dict__), None)

    def __post_init__(self):
        check(self)
        if own_post_init is not None:
            own_post_init(self)

    cls.__post_init__ = __post_init__
    cls = dataclasses.dataclass(frozen=True)(cls)
    doc = (cls.__doc__ or "").rstrip()
    cls.__doc__ = f"{doc}\n\n{table(cls)}\n" if doc else f"{table(cls)}\n"
    return cls


# --- groups -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Run:
    """What every algorithm has: the env, the budget, the discount and the sweep."""
    env: str = field("CartPole-v1", "environment id (`jaxrl-par list envs`)")
    total_timesteps: int = field(500_000, "env steps of the whole run (all envs, all "
                                 "devices)", range="positive")
    gamma: float = field(0.99, "discount factor", range="unit_interval")
    sweep: tuple[str, ...] = field((), "fields held per lane in the state, so one program "
                                   "trains a sweep of their values (any of SWEEPABLE; see "
                                   "jaxrl_par.algos.hyper)")


@dataclasses.dataclass(frozen=True)
class Vectorized:
    """Envs stepped in lockstep."""
    num_envs: int = field(4, "envs stepped in lockstep (each worker's, where there are "
                          "workers; global, split over the data axis, when sharded)",
                          range="positive")


@dataclasses.dataclass(frozen=True)
class RolloutLength:
    """The env steps each env takes per update."""
    num_steps: int = field(128, "env steps per env in one update (the rollout length T; "
                           "a worker's, per push, where there are workers)", range="positive")


@dataclasses.dataclass(frozen=True)
class Workers:
    """Workers that each push their own gradients to one set of parameters."""
    num_workers: int = field(4, "workers (A3C's actor-learners, Gorila's bundles of actor, "
                             "replay and learner), each pushing its own gradients",
                             range="positive")


@dataclasses.dataclass(frozen=True)
class ActorLearner:
    """Actors that act with a copy of the learner's parameters."""
    actor_sync_period: int = field(1, "learner steps (Gorila: the server's pushes) between "
                                   "the actors' pulls of the parameters", range="positive")


@dataclasses.dataclass(frozen=True)
class Pipelined:
    """Acting and learning overlapped by one update."""
    pipeline: bool = field(False, "act update u+1's batch while learning from update u's "
                           "(one update of policy lag), so acting and learning can run at "
                           "once on two devices (train(..., actor_learner=True))")


@dataclasses.dataclass(frozen=True)
class Minibatches:
    """The learner's steps over an update's batch."""
    num_minibatches: int = field(4, "gradient steps per pass over an update's batch (PPO: "
                                 "must divide num_steps; IMPALA: num_envs)", range="positive")


@dataclasses.dataclass(frozen=True)
class TrainFrequency:
    """Gradient steps at a fixed ratio to env steps."""
    train_frequency: int = field(10, "env steps (all envs) per gradient step",
                                 range="positive")


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """Adam with global-norm gradient clipping."""
    learning_rate: float = field(2.5e-4, "Adam's step size", range="positive")
    max_grad_norm: float = field(0.5, "global-norm gradient clipping (0: off)",
                                 range="non_negative")


@dataclasses.dataclass(frozen=True)
class Annealing:
    """A learning rate that decays linearly over the run, or over its first part."""
    anneal_lr: bool = field(True, "decay the learning rate linearly to final_learning_rate "
                            "over the run")
    final_learning_rate: float = field(0.0, "the rate the decay ends at (with anneal_lr)",
                                       range="non_negative")
    anneal_fraction: float = field(1.0, "share of the run's optimiser steps the decay takes; "
                                   "the rate stays at final_learning_rate after it",
                                   range="unit_interval")

    def anneal_steps(self, optimizer_steps: int) -> int | None:
        """Optimiser steps the decay takes in a run of ``optimizer_steps`` (at least one),
        or None without ``anneal_lr``."""
        if not self.anneal_lr:
            return None
        return max(1, round(optimizer_steps * self.anneal_fraction))


@dataclasses.dataclass(frozen=True)
class Network:
    """The MLP torso of every network."""
    hidden_sizes: tuple[int, ...] = field((64, 64), "widths of the torso's hidden layers")
    activation: str = field("tanh", "hidden activation: tanh, relu, gelu or swish")


@dataclasses.dataclass(frozen=True)
class ActorCriticNetwork(Network):
    """The actor-critic network's torso: shared or separate, MLP or CNN."""
    shared_torso: bool = field(False, "one torso under the policy and value heads")
    torso: str = field("auto", '"mlp", "cnn", or "auto" (CNN for [H, W, C] observations)')
    action_std: str = field("parameter", 'a Gaussian policy\'s std: "parameter" (learned, '
                            'the same in every state) or "softplus" (a head of the actor: '
                            'softplus + 0.001, per state)')
    policy_init_scale: float = field(0.01, "scale of the policy head's orthogonal "
                                     "initialisation (0.01: a near-uniform first policy; "
                                     "about 1: each state its own actions)",
                                     range="positive")


@dataclasses.dataclass(frozen=True)
class ActorCriticLoss:
    """The weights of the value and entropy terms, reward normalisation, and what a time
    limit means to the value targets."""
    vf_coef: float = field(0.5, "weight of the value loss", range="non_negative")
    ent_coef: float = field(0.01, "weight of the entropy bonus", range="non_negative")
    normalize_rewards: bool | str = field(
        "auto", "divide rewards by the running std of each env's discounted return "
        "(gym's NormalizeReward): true, false, or auto (on for continuous actions)")
    bootstrap_truncation: bool = field(
        True, "bootstrap the value where a time limit cut the episode (Pardo et al. 2018); "
        "false treats time limits as terminations, as gymnax-blines, PureJaxRL and "
        "CleanRL's PPO do")


@dataclasses.dataclass(frozen=True)
class Replay:
    """A replay buffer and the learner's batches from it."""
    buffer_size: int = field(10_000, "transitions the replay holds (per shard)",
                             range="positive")
    batch_size: int = field(128, "transitions per gradient step (per shard)",
                            range="positive")
    learning_starts: int = field(10_000, "env steps (all envs) before the first gradient "
                                 "step", range="non_negative")


@dataclasses.dataclass(frozen=True)
class Prioritized:
    """Prioritized replay (Schaul et al. 2016)."""
    per_alpha: float = field(0.6, "priority exponent (0: uniform)", range="non_negative")
    per_beta: float = field(0.4, "importance-weight exponent, annealed linearly to 1",
                            range="unit_interval")
    priority_eps: float = field(1e-6, "added to |td_error| so no priority is 0",
                                range="non_negative")


@dataclasses.dataclass(frozen=True)
class QLearning:
    """The Q-learning target and loss."""
    n_step: int = field(1, "steps of the n-step return", range="positive")
    dueling: bool = field(False, "dueling head (Wang et al. 2016)")
    loss: str = field("mse", '"huber" or "mse"')
    huber_delta: float = field(1.0, "where the Huber loss turns linear", range="positive")


@dataclasses.dataclass(frozen=True)
class Polyak:
    """Target networks that follow the online ones by Polyak averaging."""
    tau: float = field(1.0, "target <- tau * online + (1 - tau) * target, each target "
                       "update (1: a hard copy)", range="unit_interval")


@dataclasses.dataclass(frozen=True)
class TargetNetwork:
    """A target network and double Q-learning (van Hasselt et al. 2016)."""
    double_q: bool = field(True, "double Q-learning's target: the online network picks "
                           "the next action, the target network values it")
    target_update_period: int = field(50, "gradient steps between target updates",
                                      range="positive")


@dataclasses.dataclass(frozen=True)
class Critics:
    """An ensemble of critics whose minimum is the target (clipped double Q)."""
    num_critics: int = field(2, "critics whose minimum is the target (Fujimoto et al. "
                             "2018; 1: a single critic)", range="positive")


@dataclasses.dataclass(frozen=True)
class EpsilonDecay:
    """Epsilon-greedy exploration, decayed linearly."""
    epsilon_start: float = field(1.0, "exploration rate at the start",
                                 range="unit_interval")
    epsilon_end: float = field(0.05, "exploration rate after the decay",
                               range="unit_interval")
    exploration_fraction: float = field(0.5, "fraction of total_timesteps to decay "
                                        "epsilon over", range="unit_interval")


@dataclasses.dataclass(frozen=True)
class DataParallel:
    """The mesh axis of synchronous data parallelism."""
    axis_name: str | None = field(None, "mesh axis that gradients are averaged over; set by "
                                  "jaxrl_par.parallel (None: one device)")


def reference(configs: dict[str, type]) -> str:
    """docs/config.md: one Markdown table of fields per algorithm (``configs`` maps each
    algorithm's name to its Config class), with the group that declares each field."""
    out = ["# Config reference", "",
           "Every algorithm's Config fields: type, default, meaning, and the group that "
           "declares the field (`jaxrl_par/algos/fields.py`; the algorithm's own fields "
           "have no group). Set any of them with `jaxrl-par train ALGO --set FIELD=VALUE` "
           "or `ALGO.Config(FIELD=VALUE)`; `jaxrl-par train ALGO --help` prints the same "
           "list. Generated by `python -m jaxrl_par.algos.fields > docs/config.md`.", ""]
    for name, cls in configs.items():
        summary = (cls.__doc__ or "").split("\n\n")[0].split(". ")[0].strip().rstrip(".")
        out += [f"## {name}", "", f"{' '.join(summary.split())}.", "",
                "| field | type | default | meaning | group |", "|---|---|---|---|---|"]
        for info in describe(cls):
            group = "" if info.group == cls.__name__ else info.group
            meaning = info.doc.replace("|", "\\|")
            kind = info.type.replace("|", "\\|")
            out.append(f"| `{info.name}` | {kind} | `{info.default!r}` | {meaning} | {group} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    from jaxrl_par import algos

    print(reference({name: algos.get(name).Config for name in sorted(algos.ALGORITHMS)}),
          end="")
