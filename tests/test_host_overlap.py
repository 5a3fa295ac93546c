"""The host loop's ``overlap=True`` (``train(..., overlap_learning=True)``, CLI
``--overlap-learning``): the replay learners act one update behind their learning.
Checked against the lagged schedule written out by hand, with the jitted ``act`` and
``learn`` and a SyncVectorEnv seeded as the loop seeds it; and the refusals."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxrl_par.algos import ddpg, dqn, ppo, td3
from jaxrl_par.blocks.host_steps import Rollout
from jaxrl_par.cli import main
from jaxrl_par.envs import Timestep, host
from jaxrl_par.parallel.host_loop import HostLoop
from jaxrl_par.runner import checkpoints
from jaxrl_par.runner.training import train

CARTPOLE, PENDULUM = "gymnasium:CartPole-v1", "gymnasium:Pendulum-v1"
# 2 envs x 4 steps per update, 6 updates; learning from the 2nd (16 steps stored).
TINY = {"num_envs": 2, "num_steps": 4, "total_timesteps": 2 * 4 * 6, "learning_starts": 16,
        "batch_size": 8, "buffer_size": 64, "hidden_sizes": (8,)}


def _dqn():
    return dqn.make(dqn.Config(env=CARTPOLE, train_frequency=4, **TINY))


def _td3():
    return td3.make(td3.Config(env=PENDULUM, exploration="gaussian", **TINY))


def _leaves(state) -> list[np.ndarray]:
    return [np.asarray(jax.random.key_data(x) if checkpoints.is_key(x) else x)
            for x in jax.tree.leaves(state)]


def hand_run(algo, seed: int, lagged: bool):
    """The run of seed ``seed`` written out: update ``u`` acts ``T`` steps with
    ``act(state_u, obs, t)`` (unlagged, and the lagged run's update 0) or with
    ``act(state_{u-1}, obs, t + T)`` (the state update ``u - 1`` learned from), then
    ``state_{u+1} = learn(state_u, rollout_u)`` (``warmup_learn`` in the warm-up)."""
    cfg, steps = algo.config, algo.host_steps
    act = jax.jit(jax.vmap(steps.act, in_axes=(0, 0, None)))
    learn, warmup = jax.jit(jax.vmap(steps.learn)), jax.jit(jax.vmap(steps.warmup_learn))
    keys = jax.random.key(seed)[None]  # one lane, as train(algo, seed)
    state = jax.jit(jax.vmap(algo.init))(keys)  # as the runner makes it
    envs = host.HostVecEnv(cfg.env, cfg.num_envs, host.lane_seeds(state.key)[0],
                             "sync")  # seeded from the state's key, as HostLoop.start
    previous = None
    for u in range(algo.num_updates):
        acting, offset = ((state, 0) if previous is None or not lagged
                          else (previous, cfg.num_steps))
        obs, actions, records = [], [], []
        for t in range(cfg.num_steps):
            action = jax.device_get(act(acting, envs.obs[None], np.int32(t + offset)))
            obs.append(envs.obs)
            actions.append(action.action[0])
            out = envs.step(action.env_action[0])
            records.append({**out, "obs": envs.obs})
        assert action.extras is None  # Gaussian TD3 and DQN keep nothing of their acting

        def stacked(xs):
            return np.stack(xs)[None]  # [1, T, N, ...]

        rollout = Rollout(stacked(obs), stacked(actions), None,
                          Timestep(**{k: stacked([r[k] for r in records])
                                      for k in Timestep._fields}))
        previous = state
        state, _ = (warmup if u < algo.warmup_updates else learn)(state, rollout)
    envs.close()
    return state


@pytest.mark.parametrize("make", [_dqn, _td3], ids=["dqn", "td3"])
def test_overlap_acts_one_update_behind_as_written_out_by_hand(make):
    """Over 2 chunks of 3 updates (the lag carries across the chunks), the overlapped
    run's final state (replay, parameters, optimiser, counters, key) equals the hand-lagged
    run's bit for bit; the plain run equals the hand run without the lag, and the two
    schedules differ, so the comparison can fail."""
    algo = make()
    assert algo.num_updates == 6 and algo.warmup_updates == 1
    overlapped = train(algo, 0, progress=False, num_chunks=2, vector_env="sync",
                       overlap_learning=True)
    plain = train(algo, 0, progress=False, num_chunks=2, vector_env="sync")
    by_hand = _leaves(hand_run(algo, 0, lagged=True))
    for a, b in zip(_leaves(overlapped.state), by_hand, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_leaves(plain.state), _leaves(hand_run(algo, 0, lagged=False)),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(_leaves(plain.state), by_hand,
                                                        strict=True))
    # the same env steps and gradient steps, only the parameters acted with differ
    assert int(overlapped.state.env_steps[0]) == int(plain.state.env_steps[0]) == 48
    assert int(overlapped.state.gradient_steps[0]) == int(plain.state.gradient_steps[0])


def test_a_state_the_loop_did_not_return_acts_unlagged():
    """The lag carries to the next chunk only for the state the last chunk returned and
    the update that follows it; another state (a resume, PBT's copy) acts its first
    update with itself, as the run's first update does."""
    algo = _dqn()
    loop = HostLoop(algo, "sync", overlap=True)
    try:
        state = jax.vmap(algo.init)(jax.random.key(0)[None])
        out, _ = loop.compile(state, 2)(state, 0)
        lag = loop._lag
        assert lag.update == 2 and lag.state is out
        assert loop._lagged(out, 2) is lag.acting and loop._lag is None
        for other, start in ((jax.tree.map(lambda x: x, out), 2), (out, 3)):
            loop._lag = lag
            assert loop._lagged(other, start) is None
    finally:
        loop.close()


def test_record_says_overlap_was_on(tmp_path):
    """config.json names the option only when it is on."""
    algo = _dqn()
    train(algo, 0, progress=False, num_chunks=1, vector_env="sync", overlap_learning=True,
          log_dir=str(tmp_path / "on"))
    train(algo, 0, progress=False, num_chunks=1, vector_env="sync", log_dir=str(tmp_path / "off"))
    on = json.loads((tmp_path / "on" / "config.json").read_text())
    off = json.loads((tmp_path / "off" / "config.json").read_text())
    assert on["overlap_learning"] is True and "overlap_learning" not in off


TWO_DEVICES = """
import jax, numpy as np
from test_host_overlap import _dqn, _leaves, hand_run
from jaxrl_par.parallel.host_loop import HostLoop
from jaxrl_par.runner.training import train
algo = _dqn()
loop = HostLoop(algo, "sync", overlap=True)
assert loop.act_device == jax.devices()[1], loop.act_device
run = train(algo, 0, progress=False, num_chunks=2, vector_env=loop)
loop.close()
for a, b in zip(_leaves(run.state), _leaves(hand_run(algo, 0, lagged=True)), strict=True):
    np.testing.assert_array_equal(a, b)
print("equal")
"""


def test_acting_on_a_second_cpu_device_gives_the_same_run():
    """With two CPU devices the lagged rollouts act on the second while the first
    learns (at once: each device runs its programs in order); the run still equals the
    hand-lagged one bit for bit."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") +
                                       " --xla_force_host_platform_device_count=2").strip(),
           "PYTHONPATH": os.pathsep.join([here, os.path.dirname(here),
                                          os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", TWO_DEVICES], capture_output=True, text=True,
                         env=env, timeout=300, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "equal", out.stderr[-3000:]


@pytest.mark.parametrize("algo,message", [
    (lambda: ppo.make(ppo.Config(env=CARTPOLE, num_envs=2, num_steps=4, num_minibatches=1,
                                 total_timesteps=8)),
     "overlap: ppo learns on-policy (its acting must use the current parameters)"),
    (lambda: ddpg.make(ddpg.Config(env=PENDULUM, exploration="ou", **TINY)),
     "overlap: ddpg carries its acting noise from step to step in the state "
     "(HostSteps.observe, exploration='ou')"),
    (lambda: dqn.make(dqn.Config(env="CartPole-v1")),
     "overlap_learning=True overlaps learning with the steps of host envs (gymnasium:<id>) "
     "for dqn, sac, ddpg and td3; CartPole-v1 steps on the device"),
], ids=["ppo", "ddpg-ou", "device-env"])
def test_refusals_are_one_line_errors(algo, message):
    with pytest.raises(ValueError, match="overlap") as error:
        train(algo(), 0, progress=False, vector_env=None, overlap_learning=True)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_cli_refuses_overlap_on_device_envs(capsys):
    assert main(["train", "dqn", "--env", "CartPole-v1", "--overlap-learning",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("--overlap-learning overlaps learning with the steps of host "
                              "envs (--env gymnasium:<id>); CartPole-v1 steps on the "
                              "device: drop it") in err[0]


def test_dqn_learns_gymnasium_cartpole_with_overlap():
    """test_host_vector_envs' DQN run with acting one update behind: 20,000 steps, the
    mean return of the last tenth of the updates is well above a random policy's (about
    22; this seed's run ended at 406)."""
    cfg = dqn.Config(env=CARTPOLE, total_timesteps=20_000, learning_starts=2_000,
                     exploration_fraction=0.3, learning_rate=1e-3, target_update_period=20)
    result = train(dqn.make(cfg), 0, progress=False, num_chunks=1, vector_env="sync",
                   overlap_learning=True)
    assert result.final_returns(0.1)[0] > 60, result.final_returns(0.1)
