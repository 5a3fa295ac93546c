"""DQN on Breakout-MinAtar: our preset against rejax 0.1.3's DQN at the same budget.

    python benchmarks/dqn_minatar.py                  # 1e6 env steps, 2 seeds per row
    python benchmarks/dqn_minatar.py --steps 2e4 --rows ours,rejax-matched   # smoke run

Rows (each trains ``--seeds`` seeds as one vmapped program, compiled apart from its
timing):

* ``ours``: ``jaxrl_par.algos.dqn`` with ``presets.config("dqn", "Breakout-MinAtar")``,
  the budget replaced by ``--steps``.
* ``rejax-matched``: rejax's DQN set to the preset wherever rejax has the knob
  (:func:`rejax_matched`), its own MLP torso at the preset's widths.
* ``rejax-matched-cnn``: the same, with our Q-network (MinAtar CNN torso, orthogonal
  init) put in as rejax's ``agent``: what is left between this row and ``ours`` is the
  learning rule (n-step, Huber, clipping), not the network.
* ``rejax-defaults``: rejax as users run it: its defaults, only ``total_timesteps`` and
  ``num_envs`` matched.

Knobs matched (ours -> rejax): ``num_envs``; ``buffer_size``; ``batch_size``;
``learning_rate``; ``gamma``; ``learning_starts`` -> ``fill_buffer`` (rejax acts
uniformly until then, ours epsilon-greedily at epsilon ~1); ``epsilon_start``,
``epsilon_end``, ``exploration_fraction`` -> ``eps_start``, ``eps_end``,
``exploration_fraction`` (both linear in env steps); ``train_frequency`` (env steps per
gradient step) -> ``num_epochs = num_envs / train_frequency`` gradient steps per vector
step; ``target_update_period`` (gradient steps) -> ``target_update_freq`` (env steps,
``period * train_frequency``), ``tau`` -> ``polyak = 1 - tau``; ``double_q`` -> ``ddqn``;
``dueling`` -> ``DuelingQNetwork``; ``activation``; ``hidden_sizes`` -> the agent's
``hidden_layer_sizes`` (``DQN.create`` fixes them at (64, 64), so the ``agent`` field is
replaced after ``create``); ``max_grad_norm`` -> ``max_grad_norm``.

Knobs that differ, as rejax has no such setting:

* n-step returns: ours 3-step, rejax 1-step.
* loss: ours Huber (delta 1), rejax ``optax.l2_loss`` (half the squared error: the same
  gradient inside |td| <= 1, unclipped outside).
* gradient clipping: ours clips the global norm at 10, rejax each element at 10.
* network (``rejax-matched``): ours a 3x3 conv of 16 channels before the 128-unit
  layer (Young & Tian 2019) with orthogonal init, rejax an MLP on the flattened grid
  with flax's default init; ``rejax-matched-cnn`` removes this difference.
* time limits: ours bootstraps from the last observation of a truncated episode, rejax
  (gymnax 1.x wrapped to the 5-value step, ``common.FiveValueStep``) treats it as
  terminal. Breakout-MinAtar truncates at 1000 steps, which few episodes reach.
* schedule: ours acts 8 steps in every env, then takes 8 gradient steps; rejax takes one
  gradient step after each vector step.

Returns: the greedy (argmax Q) return of the final parameters, one episode in each of 64
envs per seed, with ``jaxrl_par.runner.evaluation.greedy_returns`` for both libraries
(the same start states for seed ``s`` in every row; rejax's parameters go in through a
small ``act`` adapter). Also: ours' training return (episodes finished in the last 5% of
updates, epsilon 0.05), and rejax's own final evaluation (128 episodes at epsilon 0.005,
its ``make_act``). Wall seconds: the training run, compile excluded (rejax's includes its
one final evaluation). Writes ``benchmarks/results/dqn_minatar.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import types
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FiveValueStep, machine, train_vmapped, write_json

from jaxrl_par import envs, presets
from jaxrl_par.algos import dqn
from jaxrl_par.networks import QNetwork
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train

ENV = "Breakout-MinAtar"
EVAL_ENVS = 64
ROWS = ("ours", "rejax-matched", "rejax-matched-cnn", "rejax-defaults")
HERE = os.path.dirname(os.path.abspath(__file__))


def ours_config(steps: int) -> dqn.Config:
    """Our DQN for Breakout-MinAtar: the preset, at ``steps`` env steps."""
    return presets.config("dqn", ENV, total_timesteps=steps)


def rejax_matched(cfg: dqn.Config) -> dict:
    """rejax ``DQN.create`` keyword arguments for the settings of ``cfg`` that rejax has
    (the module docstring lists the rest); the widths go in through :func:`rejax_agent`.

    >>> kw = rejax_matched(ours_config(1_000_000))
    >>> kw["num_epochs"], kw["target_update_freq"], kw["polyak"], kw["fill_buffer"]
    (1, 2000, 0.0, 2000)
    """
    if cfg.num_envs % cfg.train_frequency:
        raise ValueError(f"train_frequency={cfg.train_frequency} does not divide num_envs="
                         f"{cfg.num_envs}: rejax takes whole gradient steps per vector step")
    return {
        "num_envs": cfg.num_envs,
        "buffer_size": cfg.buffer_size,
        "batch_size": cfg.batch_size,
        "fill_buffer": cfg.learning_starts,
        "learning_rate": cfg.learning_rate,
        "gamma": cfg.gamma,
        "eps_start": cfg.epsilon_start,
        "eps_end": cfg.epsilon_end,
        "exploration_fraction": cfg.exploration_fraction,
        "num_epochs": cfg.num_envs // cfg.train_frequency,
        "target_update_freq": cfg.target_update_period * cfg.train_frequency,
        "polyak": 1.0 - cfg.tau,
        "max_grad_norm": cfg.max_grad_norm,
        "ddqn": cfg.double_q,
        "agent": "DuelingQNetwork" if cfg.dueling else "QNetwork",
        "agent_kwargs": {"activation": cfg.activation},
    }


class OurQNetwork(nn.Module):
    """Our :class:`~jaxrl_par.networks.QNetwork` behind rejax's Q-network interface
    (``__call__`` and ``take``), so rejax's DQN can train it."""

    action_dim: int
    obs_shape: tuple[int, ...]
    hidden_layer_sizes: tuple[int, ...]
    activation: str
    dueling: bool

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return QNetwork(num_actions=self.action_dim, obs_shape=self.obs_shape,
                        hidden_sizes=self.hidden_layer_sizes, activation=self.activation,
                        dueling=self.dueling)(obs)

    def take(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        return jnp.take_along_axis(self(obs), action[:, None], axis=1).squeeze(1)


def rejax_agent(cfg: dqn.Config, num_actions: int, obs_shape, cnn: bool) -> nn.Module:
    """rejax's epsilon-greedy Q-network at ``cfg``'s widths, activation and head: its
    own MLP, or with ``cnn`` our MinAtar network (:class:`OurQNetwork`)."""
    from rejax.networks import DiscreteQNetwork, DuelingQNetwork, EpsilonGreedyPolicy

    if cnn:
        return EpsilonGreedyPolicy(OurQNetwork)(
            action_dim=num_actions, obs_shape=tuple(obs_shape),
            hidden_layer_sizes=tuple(cfg.hidden_sizes), activation=cfg.activation,
            dueling=cfg.dueling)
    net = DuelingQNetwork if cfg.dueling else DiscreteQNetwork
    return EpsilonGreedyPolicy(net)(hidden_layer_sizes=tuple(cfg.hidden_sizes),
                                    activation=getattr(nn, cfg.activation),
                                    action_dim=num_actions)


def make_rejax(row: str, cfg: dqn.Config):
    """rejax's DQN for ``row`` (one of ``ROWS[1:]``) at ``cfg.total_timesteps``; one
    evaluation, at the end."""
    import gymnax
    from rejax import DQN

    env, params = gymnax.make(ENV)
    steps = cfg.total_timesteps
    common = {"env": FiveValueStep(env), "env_params": params, "total_timesteps": steps,
              "eval_freq": steps, "skip_initial_evaluation": True}
    if row == "rejax-defaults":
        return DQN.create(**common, num_envs=cfg.num_envs)
    algo = DQN.create(**common, **rejax_matched(cfg))
    space = env.observation_space(params)
    return algo.replace(agent=rejax_agent(cfg, env.num_actions, space.shape,
                                          cnn=row == "rejax-matched-cnn"))


def rejax_act(agent: nn.Module) -> Callable:
    """``act(params, obs, key) -> action [N]``: argmax Q of rejax's ``agent``, the
    ``Algorithm.act`` signature ``greedy_returns`` plays."""
    def act(params, obs, key):
        del key
        return jnp.argmax(agent.apply(params, obs.astype(jnp.float32)), axis=-1)
    return act


def run_ours(cfg: dqn.Config, seeds: list[int]) -> dict:
    algo = dqn.make(cfg)
    res = train(algo, seeds, progress=False, num_chunks=10)
    t = time.perf_counter()
    greedy = greedy_returns(algo, res.state, num_envs=EVAL_ENVS)
    return {"greedy_returns": greedy.tolist(),
            "train_returns": res.final_returns(fraction=0.05).tolist(),
            "env_steps": int(res.env_steps[-1]), "compile_s": res.compile_seconds,
            "train_s": res.train_seconds, "eval_s": time.perf_counter() - t}


def run_rejax(row: str, cfg: dqn.Config, seeds: list[int]) -> dict:
    algo = make_rejax(row, cfg)
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
    (ts, (_, own_eval)), compile_s, train_s = train_vmapped(algo.train, keys)
    t = time.perf_counter()
    greedy = greedy_returns(
        types.SimpleNamespace(act=rejax_act(algo.agent), config=types.SimpleNamespace(env=ENV)),
        ts.q_ts.params, num_envs=EVAL_ENVS)
    per_iteration = algo.num_envs
    steps = -(-algo.eval_freq // per_iteration) * per_iteration
    return {"greedy_returns": greedy.tolist(), "train_returns": None,
            "rejax_eval_returns": np.asarray(own_eval)[:, -1].mean(axis=-1).tolist(),
            "env_steps": int(steps), "compile_s": compile_s, "train_s": train_s,
            "eval_s": time.perf_counter() - t, "settings": rejax_settings(algo)}


def rejax_settings(algo) -> dict:
    """The learning settings of a built rejax DQN, for the record."""
    agent = algo.agent
    return {
        "num_envs": algo.num_envs, "buffer_size": algo.buffer_size,
        "batch_size": algo.batch_size, "fill_buffer": algo.fill_buffer,
        "learning_rate": float(algo.learning_rate), "gamma": float(algo.gamma),
        "eps_start": float(algo.eps_start), "eps_end": float(algo.eps_end),
        "exploration_fraction": float(algo.exploration_fraction),
        "num_epochs": algo.num_epochs, "target_update_freq": algo.target_update_freq,
        "polyak": float(algo.polyak), "max_grad_norm": finite_or_name(algo.max_grad_norm),
        "ddqn": bool(algo.ddqn), "agent": type(agent).__mro__[1].__name__,
        "hidden_layer_sizes": list(agent.hidden_layer_sizes),
        "activation": getattr(agent.activation, "__name__", str(agent.activation)),
    }


def finite_or_name(x) -> float | str:
    """``x`` as a float, or ``"inf"`` (strict JSON has no infinity)."""
    x = float(x)
    return x if np.isfinite(x) else str(x)


SETTINGS = {
    "ours": "preset dqn:Breakout-MinAtar",
    "rejax-matched": "preset's knobs, MLP 128",
    "rejax-matched-cnn": "preset's knobs, our CNN",
    "rejax-defaults": "rejax defaults, 8 envs",
}


def spread(xs) -> str:
    x = np.asarray(xs, np.float64)
    return f"{x.mean():6.2f} +- {x.std():5.2f}"


def table(rows: dict, seeds: list[int]) -> str:
    """The printed table: one line per row (mean +- std over seeds, then per seed)."""
    head = (f"{'library':18s} {'settings':28s} {'steps':>9s} {'seeds':>5s} "
            f"{'greedy (64 eps/seed)':>20s} {'per seed':18s} {'train ret':>9s} {'wall s':>7s}")
    lines = [head, "-" * len(head)]
    for name, r in rows.items():
        per_seed = ", ".join(f"{x:.2f}" for x in r["greedy_returns"])
        train_ret = spread(r["train_returns"]) if r["train_returns"] else "n/a"
        lines.append(f"{name:18s} {SETTINGS[name]:28s} {r['env_steps']:9,d} {len(seeds):5d} "
                     f"{spread(r['greedy_returns']):>20s} {per_seed:18s} "
                     f"{train_ret:>9s} {r['train_s']:7.0f}")
    for name, r in rows.items():
        if "rejax_eval_returns" in r:
            own = ", ".join(f"{x:.2f}" for x in r["rejax_eval_returns"])
            lines.append(f"{name}: rejax's own final evaluation (eps 0.005, 128 eps): {own}")
        if r["train_returns"]:
            own = ", ".join(f"{x:.2f}" for x in r["train_returns"])
            lines.append(f"{name}: training return per seed (last 5% of updates): {own}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=float, default=1e6, help="env steps per seed")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {ROWS}")
    p.add_argument("--out", default=os.path.join(HERE, "results", "dqn_minatar.json"))
    a = p.parse_args()
    rows_wanted = [r for r in a.rows.split(",") if r]
    if unknown := set(rows_wanted) - set(ROWS):
        p.error(f"unknown rows {sorted(unknown)}; choose from {ROWS}")
    seeds = list(range(a.seeds))
    cfg = ours_config(int(a.steps))
    envs.make(ENV, 1)  # fail early on an unknown env
    rows = {}
    for name in rows_wanted:
        rows[name] = run_ours(cfg, seeds) if name == "ours" else run_rejax(name, cfg, seeds)
        print(name, {k: v for k, v in rows[name].items() if k != "settings"}, flush=True)
    print(f"\nDQN on {ENV}, {int(a.steps):,} env steps per seed; greedy return of the final "
          f"parameters, mean +- std over seeds")
    print(table(rows, seeds))
    write_json(a.out, {
        "machine": machine(), "env": ENV, "steps": int(a.steps), "seeds": seeds,
        "eval_envs": EVAL_ENVS, "ours_config": dataclasses.asdict(cfg),
        "rejax_matched": rejax_matched(cfg), "settings": SETTINGS, "rows": rows})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
