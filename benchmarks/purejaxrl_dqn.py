"""DQN on CartPole-v1: PureJaxRL's ``purejaxrl/dqn.py`` (unmodified) as its users compile it,
against jaxrl_par's DQN as its users run it, at the same settings.

* ``purejaxrl``: runs in PureJaxRL's own environment (``$PUREJAXRL_PYTHON``: jax, gymnax
  0.0.9, flax, optax, chex, flashbax 0.1.3 and wandb, which ``dqn.py`` imports; see
  ``benchmarks/purejaxrl_ppo.py`` for making one, adding ``flashbax==0.1.3 wandb``). It
  imports ``make_train`` from ``$PUREJAXRL_DIR/purejaxrl/dqn.py`` (that folder on the path,
  as ``python purejaxrl/dqn.py`` has it) and builds the program of that file's ``main()``:
  its config (:data:`MAIN_CONFIG`: 10 envs, a buffer of 10,000, batches of 128, a
  gradient step per 10 env steps after 10,000, a hard target copy every 500 env steps,
  epsilon 1 to 0.05 over 250,000 env steps, Adam 2.5e-4, 120-84 ReLU Q-network, wandb
  ``disabled``, so no logging callback is traced) and
  ``jax.jit(jax.vmap(make_train(config)))`` over its ``NUM_SEEDS`` (1) keys. The compile
  (``lower().compile()``) is timed apart; then ``--repeats`` calls of the compiled run
  (each a whole training run, init included), median. XLA's default thread pool.
  ``dqn.py`` calls ``jax.tree_map``, which jax removed in 0.6; on such a jax this script
  sets ``jax.tree_map = jax.tree_util.tree_map`` before importing it (the same function;
  the file itself is not changed).
* ``ours``: ``jaxrl_par.train(dqn.make(cfg), 0)``, ``cfg`` the same settings in our
  Config (:func:`ours_config`: no double Q, no gradient clipping, the target copied every
  50 gradient steps = 500 env steps, 10 env steps per env per update with a gradient step
  per 10 env steps), one XLA:CPU thread as the CLI gives it. Env steps/s of the training
  loop (``TrainResult.steps_per_second``), its compile apart.

Both sides run ``--steps`` env steps (PureJaxRL's ``TOTAL_TIMESTEPS``, 5e5 in its
``main()``), epsilon decayed over the first half of them on both sides (its
``EPSILON_ANNEAL_TIME``, 250,000 of 500,000 in ``main()``), each side in fresh
processes, alternated over ``--rounds`` rounds (the order reversed every other round).
Returns, not timed: the greedy return at the end, one episode in each of 32 envs from
their own start states (ours ``jaxrl_par.greedy_returns``; PureJaxRL's Q-network's argmax
on gymnax's env, played here), and the training return: PureJaxRL's the mean of its
``metrics["returns"]`` (each env's last finished episode, averaged over envs, at every
step, so a long episode counts for as long as it stands) over the last 5% of its steps;
ours ``TrainResult.final_returns()`` (the mean over episodes that finished in the last 5%
of updates).

    PUREJAXRL_PYTHON=/path/to/pj/bin/python PUREJAXRL_DIR=/path/to/purejaxrl \\
        python benchmarks/purejaxrl_dqn.py --steps 500000 --rounds 3 --repeats 3 \\
        --out benchmarks/results/purejaxrl_dqn.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

MAIN_CONFIG = {  # purejaxrl/dqn.py's main(), at commit 31756b1
    "NUM_ENVS": 10, "BUFFER_SIZE": 10000, "BUFFER_BATCH_SIZE": 128, "TOTAL_TIMESTEPS": 5e5,
    "EPSILON_START": 1.0, "EPSILON_FINISH": 0.05, "EPSILON_ANNEAL_TIME": 25e4,
    "TARGET_UPDATE_INTERVAL": 500, "LR": 2.5e-4, "LEARNING_STARTS": 10000,
    "TRAINING_INTERVAL": 10, "LR_LINEAR_DECAY": False, "GAMMA": 0.99, "TAU": 1.0,
    "ENV_NAME": "CartPole-v1", "SEED": 0, "NUM_SEEDS": 1, "WANDB_MODE": "disabled",
    "ENTITY": "", "PROJECT": "",
}
TAIL = 0.05  # the share of steps whose returns make the final return
EPISODES = 32  # greedy episodes per side at the end, not timed


def config_for(steps: int) -> dict:
    """:data:`MAIN_CONFIG` for ``steps`` env steps, epsilon decayed over the same share
    of them as in ``main()`` (250,000 of 500,000: half)."""
    share = MAIN_CONFIG["EPSILON_ANNEAL_TIME"] / MAIN_CONFIG["TOTAL_TIMESTEPS"]
    return {**MAIN_CONFIG, "TOTAL_TIMESTEPS": steps, "EPSILON_ANNEAL_TIME": share * steps}


def run_purejaxrl(steps: int, repeats: int, where: str) -> dict:
    """PureJaxRL's ``dqn.py`` program (see the module doc), in this interpreter."""
    sys.path.insert(0, os.path.join(where, "purejaxrl"))  # as `python purejaxrl/dqn.py`
    import jax
    import numpy as np

    if not hasattr(jax, "tree_map"):  # removed in jax 0.6; dqn.py calls it once, in init
        jax.tree_map = jax.tree_util.tree_map
    from dqn import make_train

    config = config_for(steps)
    rngs = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_SEEDS"])
    t = time.perf_counter()
    compiled = jax.jit(jax.vmap(make_train(config))).lower(rngs).compile()
    compile_s = time.perf_counter() - t
    seconds, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(compiled(rngs))
        seconds.append(time.perf_counter() - t)
    returns = np.asarray(out["metrics"]["returns"])  # [seeds, updates]
    tail = returns[:, -max(1, int(returns.shape[1] * TAIL)):]
    done = int(np.asarray(out["metrics"]["timesteps"])[0, -1]) * config["NUM_SEEDS"]
    params = jax.tree_util.tree_map(lambda x: x[0], out["runner_state"][0].params)
    return {"steps": done, "steps_per_second": done / statistics.median(seconds),
            "seconds": seconds, "compile_s": compile_s,
            "gradient_steps": int(np.asarray(out["metrics"]["updates"])[0, -1]),
            "final_return": float(tail.mean()),
            "greedy_return": purejaxrl_greedy(params, config["ENV_NAME"]),
            "jax": jax.__version__}


def purejaxrl_greedy(params, env_name: str, episodes: int = EPISODES) -> float:
    """Mean return of one greedy episode (argmax of ``dqn.py``'s ``QNetwork``) in each of
    ``episodes`` gymnax envs, each from its own start state, played to the episode limit."""
    import gymnax
    import jax
    import jax.numpy as jnp
    from dqn import QNetwork

    env, env_params = gymnax.make(env_name)
    network = QNetwork(action_dim=env.action_space(env_params).n)

    @jax.jit
    def run(key):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, episodes),
                                                            env_params)

        def step(carry, k):
            obs, state, total, alive = carry
            action = jnp.argmax(network.apply(params, obs), axis=-1)
            obs, state, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k, episodes), state, action, env_params)
            return (obs, state, total + reward * alive, alive * (1 - done)), None

        init = (obs, state, jnp.zeros(episodes), jnp.ones(episodes))
        keys = jax.random.split(jax.random.fold_in(key, 1), env_params.max_steps_in_episode)
        (_, _, total, _), _ = jax.lax.scan(step, init, keys)
        return total.mean()

    return float(run(jax.random.PRNGKey(1)))


def ours_config(steps: int):
    """Our DQN Config at PureJaxRL's :func:`config_for` ``steps`` env steps."""
    from jaxrl_par.algos import dqn

    c = config_for(steps)
    return dqn.Config(
        env=c["ENV_NAME"], total_timesteps=steps, num_envs=c["NUM_ENVS"],
        num_steps=c["TRAINING_INTERVAL"], buffer_size=c["BUFFER_SIZE"],
        batch_size=c["BUFFER_BATCH_SIZE"], learning_starts=c["LEARNING_STARTS"],
        train_frequency=c["TRAINING_INTERVAL"], learning_rate=c["LR"], gamma=c["GAMMA"],
        tau=c["TAU"], target_update_period=c["TARGET_UPDATE_INTERVAL"] // c["TRAINING_INTERVAL"],
        epsilon_start=c["EPSILON_START"], epsilon_end=c["EPSILON_FINISH"],
        exploration_fraction=c["EPSILON_ANNEAL_TIME"] / c["TOTAL_TIMESTEPS"],
        hidden_sizes=(120, 84), activation="relu", loss="mse", n_step=1, double_q=False,
        dueling=False, max_grad_norm=0.0)


def run_ours(steps: int) -> dict:
    import numpy as np

    from jaxrl_par import greedy_returns, train
    from jaxrl_par.algos import dqn

    algo = dqn.make(ours_config(steps))
    result = train(algo, 0, progress=False)
    return {"steps": int(result.env_steps[-1]), "steps_per_second": result.steps_per_second,
            "train_s": result.train_seconds, "compile_s": result.compile_seconds,
            "gradient_steps": int(np.asarray(result.state.gradient_steps)[0]),
            "final_return": float(result.final_returns(TAIL)[0]),
            "greedy_return": float(greedy_returns(algo, result.state, num_envs=EPISODES)[0])}


#: Each side's XLA:CPU set-up (``common.pool_env`` arguments): ours one thread, as the CLI
#: gives it (``--cpu-threads auto``); PureJaxRL XLA's default pool.
POOLS = {"ours": (1,), "purejaxrl": (None,)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=500_000, help="env steps of every run")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per side")
    p.add_argument("--repeats", type=int, default=3,
                   help="PureJaxRL: timed calls of its compiled run per process (median)")
    p.add_argument("--side", choices=sorted(POOLS), default=None,
                   help="one process of one side; prints one JSON line")
    p.add_argument("--dir", default=os.environ.get("PUREJAXRL_DIR"),
                   help="a checkout of luchris429/purejaxrl (default $PUREJAXRL_DIR)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "purejaxrl_dqn.json"))
    args = p.parse_args()
    if args.side == "purejaxrl":
        print(json.dumps(run_purejaxrl(args.steps, args.repeats, args.dir)))
        return 0
    if args.side == "ours":
        print(json.dumps(run_ours(args.steps)))
        return 0
    python = os.environ.get("PUREJAXRL_PYTHON")
    if not python or not args.dir:
        print("needs PUREJAXRL_PYTHON (an interpreter with gymnax 0.0.9, flashbax 0.1.3, "
              "wandb) and PUREJAXRL_DIR or --dir (a checkout of PureJaxRL)", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/common.py
    from common import as_users_run, machine, write_json

    me = os.path.abspath(__file__)

    def command(who: str) -> list[str]:
        if who == "purejaxrl":
            return [python, me, "--side", who, "--steps", str(args.steps), "--repeats",
                    str(args.repeats), "--dir", args.dir]
        return [sys.executable, me, "--side", who, "--steps", str(args.steps)]

    runs = as_users_run(command, args.rounds, say=True, setups=POOLS)
    median = {who: statistics.median(r["steps_per_second"] for r in v)
              for who, v in runs.items()}
    compile_s = {who: statistics.median(r["compile_s"] for r in v) for who, v in runs.items()}
    finals = {who: [r["final_return"] for r in v] for who, v in runs.items()}
    greedy = {who: [r["greedy_return"] for r in v] for who, v in runs.items()}
    write_json(args.out, {"machine": machine(), "steps": args.steps,
                          "config": config_for(args.steps),
                          "runs": runs, "median_steps_per_second": median,
                          "compile_s": compile_s, "final_return": finals,
                          "greedy_return": greedy})
    print(f"wrote {args.out}: env steps/s ours {median['ours']:,.0f}, PureJaxRL "
          f"{median['purejaxrl']:,.0f} ({median['ours'] / median['purejaxrl']:.2f}x); "
          f"compile s {compile_s}; training returns {finals}; greedy returns {greedy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
