import dataclasses
import json
import os
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from dropped import drop_signal

from jaxrl_par import cli, presets
from jaxrl_par.algos import ppo
from jaxrl_par.algos.config import apply_overrides
from jaxrl_par.cli import main
from jaxrl_par.platform import cpu_threads
from jaxrl_par.runner import checkpoints, interrupt
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.runs import config_from_record, load_run, read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.xla_optimized  # greedy returns recomputed here as the CLI's process did
def test_cli_train_end_to_end_json(tmp_path, capsys):
    """`python -m jaxrl_par train ppo ... --json` in a subprocess: the last stdout line is
    the JSON summary, the log dir holds config, metrics and checkpoint, and the greedy
    return (`--eval-envs`; the last of `--eval-every`'s) is that of the checkpointed
    state, recomputed here."""
    log = tmp_path / "run"
    cmd = [sys.executable, "-m", "jaxrl_par", "train", "ppo", "--env", "CartPole-v1",
           "--seeds", "2", "--total-timesteps", "20480", "--set", "num_envs=8",
           "--set", "num_steps=32", "--set", "num_minibatches=2", "--log-dir", str(log),
           "--eval-envs", "4", "--eval-every", "5", "--json", "--no-progress"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_COMPILATION_CACHE_DIR", *cpu_threads.VARIABLES)}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the CLI's default compile cache
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, env=env,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert os.listdir(tmp_path / "cache" / "jaxrl_par" / "xla")  # compiled programs kept
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(summary) == {"algo", "env", "seeds", "env_steps", "final_return",
                            "final_return_std", "final_returns", "steps_per_second",
                            "compile_seconds", "cpu_threads", "platform_tuning",
                            "greedy_return", "greedy_return_std", "greedy_returns",
                            "eval_seconds", "final_return_ci95", "greedy_return_ci95",
                            "steps_per_second_per_seed", "figures", "preset"}
    assert summary["preset"] == "ppo:CartPole-v1"  # the env's preset, --set on top
    assert json.loads((log / "config.json").read_text())["preset"] == "ppo:CartPole-v1"
    assert set(summary["figures"]) == set(summary) - {
        "algo", "env", "seeds", "compile_seconds", "cpu_threads", "platform_tuning",
        "eval_seconds", "figures", "preset"}
    assert summary["cpu_threads"] == 1  # --cpu-threads auto, one program at a time
    assert summary["platform_tuning"] is True  # jaxrl_par.platform, on by default
    assert len(summary["final_returns"]) == 2
    assert summary["final_return"] == pytest.approx(np.mean(summary["final_returns"]))
    assert summary["algo"] == "ppo" and summary["env"] == "CartPole-v1"
    assert summary["seeds"] == 2 and summary["env_steps"] == 20480
    assert summary["final_return"] > 9.0  # CartPole returns are at least ~9 steps
    assert summary["steps_per_second"] > 0 and summary["compile_seconds"] > 0
    assert {"config.json", "metrics.jsonl", "checkpoints"} <= set(os.listdir(log))
    rows = (log / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 20480 // (8 * 32)
    assert len(json.loads(rows[-1])["episode_return"]) == 2
    # --eval-every 5: greedy returns after every 5th chunk of 4 updates (20 chunks)
    evaluated = [json.loads(r)["update"] for r in rows if json.loads(r)["greedy_return"][0]
                 is not None]
    assert evaluated == [20, 40, 60, 80]
    cfg = apply_overrides(presets.config("ppo", "CartPole-v1"),  # the CLI's default preset
                          ["env=CartPole-v1", "total_timesteps=20480", "num_envs=8",
                           "num_steps=32", "num_minibatches=2"])
    algo = ppo.make(cfg)
    template = jax.vmap(algo.init)(jax.random.split(jax.random.key(0), 2))
    state = checkpoints.Checkpoints(str(log / "checkpoints")).restore(template).state
    greedy = greedy_returns(algo, state, num_envs=4)
    assert summary["greedy_return"] == pytest.approx(float(np.mean(greedy)), rel=1e-6)
    assert summary["greedy_return_std"] == pytest.approx(float(np.std(greedy)), rel=1e-6,
                                                         abs=1e-9)
    assert summary["greedy_returns"] == pytest.approx([float(x) for x in greedy], rel=1e-6)
    # The log dir alone rebuilds the same algorithm and state (`load_run`, `jaxrl-par eval`).
    run = load_run(str(log))
    assert (run.name, run.seeds, run.updates_done, run.data_shards) == (
        "ppo", [0, 1], 20480 // (8 * 32), 1)
    assert run.algo.config == cfg  # hidden_sizes back as a tuple, every field equal
    def same(a, b):
        np.testing.assert_array_equal(
            *(jax.random.key_data(x) if checkpoints.is_key(x) else x for x in (a, b)))

    jax.tree.map(same, run.state, state)
    assert main(["eval", str(log), "--eval-envs", "4", "--json", "--no-compile-cache"]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert evaluated["greedy_return"] == pytest.approx(summary["greedy_return"], rel=1e-6)
    assert evaluated["greedy_returns"] == pytest.approx([float(x) for x in greedy], rel=1e-6)
    assert (evaluated["updates_done"], evaluated["num_updates"]) == (80, 80)


def _save(log_dir, state, meta) -> None:
    """Writes ``state`` as the checkpoint of a run in ``log_dir`` after 1 update."""
    store = checkpoints.Checkpoints(str(log_dir / "checkpoints"))
    store.save(1, state, meta)
    store.close()


def test_load_run_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoints holds no checkpoint"):
        load_run(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="metrics.jsonl does not exist"):
        read_metrics(str(tmp_path))
    (tmp_path / "metrics.jsonl").write_text(  # a second row cut short by a kill
        '{"update": 1, "env_steps": 8, "loss": [0.5, null]}\n{"update": 2, "env_st')
    env_steps, metrics = read_metrics(str(tmp_path))
    assert env_steps.tolist() == [8] and metrics["loss"].shape == (2, 1)
    assert metrics["loss"][0, 0] == 0.5 and np.isnan(metrics["loss"][1, 0])
    record = {"config_class": "jaxrl_par.algos.ppo.Config", "env": "CartPole-v1",
              "num_envz": 3}
    with pytest.raises(ValueError, match=r"fields \['num_envz'\] that .*ppo.Config lacks"):
        config_from_record(record)
    with pytest.raises(ValueError, match="is not a jaxrl_par algorithm's Config"):
        config_from_record({"config_class": "os.system"})
    name, cfg = config_from_record({"config_class": "jaxrl_par.algos.dqn.Config",
                                    "hidden_sizes": [32, 16], "axis_name": "data"})
    assert name == "dqn" and cfg.hidden_sizes == (32, 16) and cfg.axis_name is None
    # Arrays that fit neither one device's state nor a mesh's [S, D, ...] form of it.
    from jaxrl_par.runner.training import config_record

    algo = ppo.make(ppo.Config(num_envs=4, num_steps=8, num_minibatches=2,
                               total_timesteps=64))
    state = jax.vmap(algo.init)(jax.random.split(jax.random.key(0), 1))
    wrong = jax.tree.map(lambda x: jax.numpy.stack([x, x, x], axis=-1), state)
    _save(tmp_path, wrong, {"seeds": [0], "config": config_record(algo)})
    with pytest.raises(ValueError, match=r"leaf \S+ has shape"):
        load_run(str(tmp_path))


def test_load_run_checks_memory_before_reading(tmp_path, monkeypatch):
    """The template is shapes only (nothing allocated twice), checked against free memory
    first; then the state read equals the one saved, PRNG keys included."""
    from jaxrl_par.runner import memory
    from jaxrl_par.runner.training import config_record

    algo = ppo.make(ppo.Config(num_envs=4, num_steps=8, num_minibatches=2,
                               total_timesteps=64))
    state = jax.vmap(algo.init)(jax.random.split(jax.random.key(3), 2))
    _save(tmp_path, state, {"seeds": [0, 1], "config": config_record(algo)})
    run = load_run(str(tmp_path))
    for a, b in zip(jax.tree.leaves(run.state), jax.tree.leaves(state), strict=True):
        assert a.dtype == b.dtype
        if checkpoints.is_key(a):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
    real = memory.check_fits
    monkeypatch.setattr(memory, "check_fits",
                        lambda *a, **k: real(*a, **k, free=lambda device: 1000))
    with pytest.raises(ValueError, match=r"the state saved in .*checkpoints needs .* but "
                       r"1000 bytes is free there.*Load it where more memory is free"):
        load_run(str(tmp_path))


def test_cli_list(capsys, monkeypatch):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "ppo" in out and "CartPole-v1" in out and "Breakout-MinAtar" in out
    assert "gymnasium:<id>" in out and "gorila" in out
    assert "a3c, a3c@threads" in out and "impala, impala@actor-learner, impala@devices=N" in out
    # --details builds each env (a stand-in list here: building all takes seconds).
    from jaxrl_par import envs

    real_make = envs.make

    def make(env_id, num_envs):
        if env_id == "MNISTBandit-bsuite":  # gymnax downloads MNIST to build it
            raise OSError("no network")
        return real_make(env_id, num_envs)

    monkeypatch.setattr(envs, "list_envs",
                        lambda: ["CartPole-v1", "Pendulum-v1", "MNISTBandit-bsuite"])
    monkeypatch.setattr(envs, "make", make)
    assert main(["list", "--details"]) == 0
    out = capsys.readouterr().out.split("environments:")[1].splitlines()[1:]
    lines = {line.split()[0]: line for line in out}
    assert lines["CartPole-v1"].endswith("discrete, 2 actions; obs (4,) float32; "
                                         "a2c, a3c, apex, dqn, gorila, impala, ppo")
    assert lines["Pendulum-v1"].endswith("continuous, 1-d actions; obs (3,) float32; "
                                         "a2c, a3c, ddpg, impala, ppo, sac, td3")
    assert "(not built here: OSError: no network)" in lines["MNISTBandit-bsuite"]


@pytest.mark.parametrize("argv,message", [
    (["train", "ppo", "--set", "num_envz=3"],
     "unknown config field 'num_envz'; did you mean num_envs? valid fields: env="),
    (["train", "ppo", "--set", "num_envs=abc"], "bad value for num_envs"),
    (["train", "ppo", "--set", "num_minibatches=5"], "num_minibatches=5 does not divide"),
    (["train", "ppo", "--env", "Cartpole"], "closest known ids: CartPole-v1"),
    (["train", "ppo", "--total-timesteps", "2.5"], "expected a whole number, got '2.5'"),
    (["train", "ppo", "--total-timesteps", "1e400"], "expected a whole number, got '1e400'"),
    (["train", "nope"], "unknown algorithm 'nope'"),
    (["train", "ppo", "--eval-envs", "-1"], "--eval-envs=-1: give a number of envs >= 1"),
    (["train", "ppo", "--seeds", "0"], "--seeds=0: give the number of seeds to train, >= 1"),
    (["train", "ppo", "--chunks", "0"], "--chunks=0: give the number of host round-trips"),
    (["eval", "--log-dir", "nowhere"],  # train's spelling
     "nowhere/checkpoints holds no checkpoint"),
    (["eval"], "no log dir: give the run's --log-dir"),
    (["eval", "a", "--log-dir", "b"], "two log dirs given (a and --log-dir b)"),
])
def test_cli_errors_are_clear(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def _cfg(argv):
    from jaxrl_par.cli import _config, _parser
    return _config(_parser().parse_args(argv))


def test_cli_config_file_then_flags_on_top(tmp_path):
    """--config takes a run's config.json (what train writes into its log dir) or a plain
    object of fields; --env, --total-timesteps and --set apply on top of it."""
    from jaxrl_par.runner import training as train_mod

    run_cfg = ppo.Config(env="Acrobot-v1", num_envs=8, hidden_sizes=(32, 32),
                         learning_rate=1e-3, total_timesteps=8 * 128 * 3)
    algo = ppo.make(run_cfg)
    written = tmp_path / "config.json"  # as train writes it
    written.write_text(json.dumps({"config": train_mod.config_record(algo), "seeds": [0],
                                   "num_updates": 3, "data_shards": None}))
    assert _cfg(["train", "ppo", "--config", str(written)]) == run_cfg
    again = _cfg(["train", "ppo", "--config", str(written), "--set", "num_envs=16",
                  "--total-timesteps", "16384", "--env", "CartPole-v1"])
    assert again == dataclasses.replace(run_cfg, num_envs=16, total_timesteps=16384,
                                        env="CartPole-v1")
    plain = tmp_path / "plain.json"  # by hand: fields left out keep their defaults
    plain.write_text(json.dumps({"num_envs": 16, "hidden_sizes": [128, 128], "gamma": 0.995}))
    assert _cfg(["train", "ppo", "--config", str(plain)]) == ppo.Config(
        num_envs=16, hidden_sizes=(128, 128), gamma=0.995)
    # Seeds: the run's own unless --seed or --seeds is given (a plain file has none).
    from jaxrl_par.cli import _parser, _seeds
    written.write_text(json.dumps({"config": train_mod.config_record(algo), "seeds": [3, 4]}))

    def seeds(*flags):
        return _seeds(_parser().parse_args(["train", "ppo", *flags]))

    assert seeds("--config", str(written)) == [3, 4]
    assert seeds("--config", str(written), "--seed", "7") == [7]
    assert seeds("--config", str(written), "--seeds", "2") == [0, 1]
    assert seeds("--config", str(plain)) == [0] and seeds() == [0]
    # A field the file leaves out keeps its default.
    older = {k: v for k, v in train_mod.config_record(algo).items() if k != "normalize_rewards"}
    written.write_text(json.dumps({"config": older}))
    assert _cfg(["train", "ppo", "--config", str(written)]) == dataclasses.replace(
        run_cfg, normalize_rewards=ppo.Config().normalize_rewards)


def test_cli_config_file_errors_name_the_problem(tmp_path, capsys):
    from jaxrl_par.runner import training as train_mod

    written = tmp_path / "config.json"
    written.write_text(json.dumps({"config": train_mod.config_record(ppo.make(ppo.Config()))}))
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"num_envz": 3}))
    broken = tmp_path / "broken.json"
    broken.write_text("{num_envs: 3")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"config_class": "os.system", "env": "CartPole-v1"}))
    for argv, message in [
        (["train", "dqn", "--config", str(written)],
         (f"--config {written} holds a ppo config, not dqn's: train ppo with it, or give "
          "a dqn config")),
        (["train", "ppo", "--config", str(unknown)],
         f"--config {unknown}: unknown ppo config field(s) ['num_envz']; valid fields: env, "),
        (["train", "ppo", "--config", str(broken)], f"--config {broken}: cannot read a JSON"),
        (["train", "ppo", "--config", str(listed)], "expected a JSON object of Config fields"),
        (["train", "ppo", "--config", str(foreign)],
         f"--config {foreign}: config_class 'os.system' is not a jaxrl_par algorithm's Config"),
        (["train", "ppo", "--config", str(tmp_path / "none.json")], "cannot read a JSON"),
        (["train", "ppo", "--config", str(written), "--set", "num_minibatches=5"],
         "num_minibatches=5 does not divide"),
    ]:
        assert main(argv) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["train", "ppo", "--actor-learner"], "ppo has no actor-learner pipeline; use it with apex"),
    (["train", "apex", "--actor-learner", "--devices", "2"], "drop --devices and --pop"),
])
def test_cli_actor_learner_errors(argv, message, capsys, monkeypatch):
    """--actor-learner names what does not combine with it, before anything compiles; in
    this process jax has started, so its device count is left alone (XLA_FLAGS unset)."""
    monkeypatch.setenv("XLA_FLAGS", "")
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert os.environ["XLA_FLAGS"] == ""


def test_compile_cache_dir_follows_jax_then_xdg(monkeypatch, tmp_path):
    from jaxrl_par.cli import compile_cache_dir

    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache_dir() == str(tmp_path / "jax")
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    assert compile_cache_dir() == str(tmp_path / "xdg" / "jaxrl_par" / "xla")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compile_cache_dir() == str(tmp_path / "home" / ".cache" / "jaxrl_par" / "xla")


def test_whole_numbers_parse_in_either_notation():
    cfg = apply_overrides(ppo.Config(), ["total_timesteps=1e6", "num_envs=16"])
    assert (cfg.total_timesteps, cfg.num_envs) == (1_000_000, 16)
    assert isinstance(cfg.total_timesteps, int)


def test_optional_number_fields_parse_as_numbers():
    """`int | None` and `float | None` fields default to None; `--set` used to hand them
    the text ('320'), which the config then refused."""
    from jaxrl_par.algos import apex, sac

    cfg = apply_overrides(apex.Config(), ["max_per_shard=320"])
    assert cfg.max_per_shard == 320 and isinstance(cfg.max_per_shard, int)
    assert apply_overrides(cfg, ["max_per_shard=none"]).max_per_shard is None
    cfg = apply_overrides(sac.Config(), ["target_entropy=-0.5"])
    assert cfg.target_entropy == -0.5 and isinstance(cfg.target_entropy, float)
    with pytest.raises(ValueError, match="bad value for max_per_shard"):
        apply_overrides(apex.Config(), ["max_per_shard=many"])


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_cli_reports_an_interrupted_run(monkeypatch, capsys, signum, code):
    """A run that Ctrl-C or SIGTERM stopped (`TrainResult.interrupted`) exits with the
    shell's code for that signal, marks the JSON and says how to continue."""
    from jaxrl_par.runner.training import TrainResult

    def interrupted_train(algo, seeds, **kw):
        return TrainResult(state=None, metrics={"episode_return": np.full((1, 3), 20.0)},
                           env_steps=np.arange(1, 4) * 512, seeds=list(seeds),
                           compile_seconds=1.0, train_seconds=1.0, steps_per_second=1.0,
                           interrupted=True, stop_signal=signum)

    # cmd_train imports it
    monkeypatch.setattr("jaxrl_par.runner.training.train", interrupted_train)
    assert main(["train", "ppo", "--json", "--log-dir", "runs/x", "--no-compile-cache"]) == code
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["interrupted"] is True and summary["env_steps"] == 3 * 512
    assert summary["stop_signal"] == signal.Signals(signum).name
    assert "the same command with --resume continues" in err


@pytest.mark.parametrize("signum,code,name", [(signal.SIGINT, 130, "Ctrl-C"),
                                              (signal.SIGTERM, 143, "SIGTERM")])
def test_cli_stopped_while_compiling_says_so_and_cleans_up(tmp_path, signum, code, name):
    """Ctrl-C or SIGTERM before training starts (here: while compiling) stops the command
    with one line, no traceback, the shell's exit code, and no log dir left behind (the
    run had not written to it). SIGTERM used to end the process with no word and leave
    the dir with its lock file."""
    log = tmp_path / "run"
    # pytest-xdist's workers ignore SIGINT, and a child inherits that: the child gives
    # Python's Ctrl-C handler back first, as a shell's foreground command has it.
    child = ("import runpy, signal, sys; signal.signal(signal.SIGINT, "
             "signal.default_int_handler); sys.argv = ['jaxrl-par'] + sys.argv[1:]; "
             "runpy.run_module('jaxrl_par', run_name='__main__')")
    proc = subprocess.Popen(
        [sys.executable, "-c", child, "train", "ppo", "--no-compile-cache",
         "--log-dir", str(log)],
        cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    seen = ""
    while "compiling" not in seen:  # printed, flushed, just before the compile starts
        ch = proc.stderr.read(1)
        assert ch, f"the run ended before compiling: {seen}"
        seen += ch
    proc.send_signal(signum)
    err = seen + proc.stderr.read()
    assert proc.wait(timeout=120) == code, err
    assert f"jaxrl-par: stopped by {name}" in err and "Traceback" not in err
    assert not log.exists()


def test_cli_json_is_strict_when_no_episode_finished(monkeypatch, capsys):
    """A run too short for any episode to end has no final return: null in the JSON
    (it printed NaN, which strict JSON readers reject) and said so in words."""
    from jaxrl_par.runner.training import TrainResult

    def unfinished_train(algo, seeds, **kw):
        return TrainResult(state=None, metrics={"episode_return": np.full((2, 3), np.nan)},
                           env_steps=np.arange(1, 4) * 512, seeds=list(seeds),
                           compile_seconds=1.0, train_seconds=1.0, steps_per_second=1.0,
                           updates_run=3)

    monkeypatch.setattr("jaxrl_par.runner.training.train", unfinished_train)
    assert main(["train", "ppo", "--json", "--seeds", "2", "--no-compile-cache"]) == 0
    out, err = capsys.readouterr()

    def reject(constant):
        raise ValueError(f"not strict JSON: {constant}")

    summary = json.loads(out.strip().splitlines()[-1], parse_constant=reject)
    assert summary["final_return"] is None and summary["final_return_std"] is None
    assert summary["final_returns"] == [None, None]
    assert "no episode finished yet" in err


def test_cli_reports_a_resumed_run_that_had_already_finished(monkeypatch, capsys):
    """A --resume of a finished run trained nothing (`updates_run == 0`): the line says
    so instead of "0 steps/s", and the JSON is marked."""
    from jaxrl_par.runner.training import TrainResult

    def finished_train(algo, seeds, **kw):
        return TrainResult(state=None, metrics={"episode_return": np.full((1, 3), 20.0)},
                           env_steps=np.arange(1, 4) * 512, seeds=list(seeds),
                           compile_seconds=0.0, train_seconds=0.0, steps_per_second=0.0,
                           updates_run=0)

    monkeypatch.setattr("jaxrl_par.runner.training.train", finished_train)
    assert main(["train", "ppo", "--json", "--log-dir", "runs/x", "--resume",
                 "--no-compile-cache"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["already_finished"] is True and summary["env_steps"] == 3 * 512
    assert "already finished, nothing trained" in err and "steps/s" not in err


def test_mesh_leaves_to_one_device_and_back():
    from jaxrl_par.runner.layouts import mesh_leaf, one_device_leaf

    rng = np.random.default_rng(0)
    params = rng.normal(size=(3, 5))  # [S, ...], replicated over 2 shards
    assert np.array_equal(one_device_leaf(np.stack([params, params], 1), (3, 5)), params)
    envs = rng.normal(size=(3, 8, 4))  # [S, N, obs]: shard d holds envs 4d .. 4d + 3
    split = np.stack([envs[:, :4], envs[:, 4:]], 1)
    assert np.array_equal(one_device_leaf(split, (3, 8, 4)), envs)
    carry = rng.normal(size=(3, 2, 8, 4))  # [S, n - 1, N, obs]: the env axis is the second
    split = np.stack([carry[:, :, :4], carry[:, :, 4:]], 1)
    assert np.array_equal(one_device_leaf(split, (3, 2, 8, 4)), carry)
    assert np.array_equal(mesh_leaf(carry, split.shape), split)  # and back to the mesh
    assert np.array_equal(mesh_leaf(params, (3, 2, 5)), np.stack([params, params], 1))
    odd = rng.normal(size=(3, 2, 7))
    assert one_device_leaf(odd, (3, 5)) is odd  # no reading fits: left for the shape check


@pytest.mark.parametrize("handler, code, name", [
    ("raise_terminated", 143, "SIGTERM"), ("raise_interrupt", 130, "Ctrl-C")])
def test_cli_ends_with_the_signal_code_when_python_dropped_its_exception(
        monkeypatch, capsys, handler, code, name):
    """A Ctrl-C or SIGTERM whose exception Python dropped inside a garbage-collection
    callback, after the last check in the runner, still ends the command with the
    signal's exit code and line, as a scheduler that sent it expects."""
    def listing(args):
        drop_signal(getattr(interrupt, handler))
        return 0

    monkeypatch.setattr(cli, "cmd_list", listing)
    assert main(["list"]) == code
    assert f"stopped by {name}" in capsys.readouterr().err
    interrupt.raise_pending()  # forgotten once reported


def _fresh_cli_runs(runs: list[list[str]]) -> list[dict]:
    """Runs ``cli.main(args)`` for each of ``runs`` in one fresh process (no XLA_FLAGS, no
    pool size set), then prints its device count; the JSON summaries, then
    ``{"devices": n}``."""
    code = ("import json, sys, jax\n"
            "from jaxrl_par import cli\n"
            "for args in json.loads(sys.argv[1]):\n"
            "    cli.main(args + ['--no-progress', '--no-compile-cache', '--json'])\n"
            "print(json.dumps({'devices': len(jax.devices())}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", *cpu_threads.VARIABLES)}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(runs)], capture_output=True,
                         text=True, cwd=ROOT, timeout=300, env=env, check=False)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.strip().splitlines()[-len(runs) - 1:]]


def test_cli_actor_learner_gets_its_two_cpu_devices():
    """`train --actor-learner` asks XLA for two CPU devices before jax starts (importing
    the runner starts it), so actors and learner run on devices of their own, and the
    pool keeps XLA's default for their two programs at once."""
    summary, devices = _fresh_cli_runs(
        [["train", "apex", "--actor-learner", "--total-timesteps", "512"]])
    assert devices == {"devices": 2}
    assert summary["cpu_threads"] is None


def test_cli_devices_makes_its_cpu_devices_and_matches_one_device():
    """`train --devices 2` on one CPU host asks XLA for two CPU devices itself (before jax
    starts), splits the envs over them, and ends with one device's numbers."""
    run = ["train", "ppo", "--total-timesteps", "2048", "--chunks", "2"]
    sharded, single, devices = _fresh_cli_runs([run + ["--devices", "2"], run])
    assert devices == {"devices": 2}
    assert sharded["cpu_threads"] == 1  # each device's part runs on a thread of its own
    assert sharded["env_steps"] == single["env_steps"] == 2048
    np.testing.assert_allclose(sharded["final_return"], single["final_return"], rtol=1e-5)


def test_compile_cache_is_trimmed_to_its_bound_oldest_first(tmp_path, monkeypatch):
    """Over its bound, the cache loses its least recently used files down to 3/4 of the
    bound; at or under it, or with no bound, nothing is deleted."""
    from jaxrl_par.cli import compile_cache_limit, trim_compile_cache

    for i in range(10):  # 10 files of 100 bytes, file i last used at time 1000 + i
        f = tmp_path / f"entry{i}-cache"
        f.write_bytes(b"x" * 100)
        os.utime(f, (1000 + i, 1000 + i))
    (tmp_path / ".lockfile").write_bytes(b"")
    assert trim_compile_cache(str(tmp_path), 1000) == 0
    assert trim_compile_cache(str(tmp_path), None) == 0
    assert trim_compile_cache(str(tmp_path), 800) == 400  # down to 600 <= 3/4 of 800
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".lockfile", *(f"entry{i}-cache" for i in range(4, 10))]
    assert trim_compile_cache(str(tmp_path / "missing"), 1) == 0

    monkeypatch.delenv("JAXRL_PAR_COMPILE_CACHE_MB", raising=False)
    assert compile_cache_limit() == 2048 << 20
    monkeypatch.setenv("JAXRL_PAR_COMPILE_CACHE_MB", "0")
    assert compile_cache_limit() is None
    monkeypatch.setenv("JAXRL_PAR_COMPILE_CACHE_MB", "512")
    assert compile_cache_limit() == 512 << 20
    monkeypatch.setenv("JAXRL_PAR_COMPILE_CACHE_MB", "2GB")
    with pytest.raises(ValueError, match="JAXRL_PAR_COMPILE_CACHE_MB='2GB'"):
        compile_cache_limit()
