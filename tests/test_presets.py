"""Per-environment presets (jaxrl_par.presets): every entry builds a valid Config and
names its source; the CLI and train() apply them as documented."""

import dataclasses
import json

import pytest

from jaxrl_par import algos, presets
from jaxrl_par.algos import ppo

ENTRIES = [(a, e) for a in sorted(algos.ALGORITHMS) for e in sorted(presets.table(a))]


def test_presets_exist_for_the_main_algorithms():
    for algo in ("ppo", "dqn", "apex", "sac", "a2c", "impala"):
        assert presets.table(algo), algo
    assert {"CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0",
            "MountainCarContinuous-v0", "Breakout-MinAtar", "SpaceInvaders-MinAtar",
            "Asterix-MinAtar", "Freeway-MinAtar"} <= set(presets.table("ppo"))


@pytest.mark.parametrize(("algo", "env"), ENTRIES)
def test_every_entry_builds_a_valid_config_and_names_its_source(algo, env):
    preset = presets.table(algo)[env]
    assert preset.source.strip() and preset.env == env and preset.fields
    cfg = presets.config(algo, env)  # __post_init__ validates it
    assert cfg.env == env
    for name, value in preset.fields:
        assert getattr(cfg, name) == value, name
    if preset.published is not None:
        assert preset.published_source


def test_config_puts_fields_over_the_preset_and_none_gives_the_defaults():
    cfg = presets.config("ppo", "Breakout-MinAtar", learning_rate=1e-3)
    assert (cfg.num_envs, cfg.num_steps, cfg.hidden_sizes) == (64, 128, (256, 256))
    assert cfg.learning_rate == 1e-3 and cfg.ent_coef == 0.01 and not cfg.anneal_lr
    assert presets.config("ppo", "Breakout-MinAtar", preset="none") == \
        ppo.Config(env="Breakout-MinAtar")
    # another env's preset, on this env
    assert presets.config("ppo", "Breakout-MinAtar", preset="CartPole-v1").num_envs == 8
    assert presets.lookup("ppo", "DeepSea-bsuite") is None  # no preset: the defaults
    with pytest.raises(ValueError, match="no preset for it; give auto, none or one of"):
        presets.lookup("ppo", "CartPole-v1", "Nope-v0")


def test_a_host_env_takes_the_preset_of_the_jax_env_of_the_same_id():
    for prefix in ("gymnasium:", "envpool:"):
        assert presets.lookup("dqn", prefix + "CartPole-v1") == \
            presets.lookup("dqn", "CartPole-v1")
    cfg = presets.config("dqn", "gymnasium:CartPole-v1")
    assert (cfg.env, cfg.n_step, cfg.buffer_size) == ("gymnasium:CartPole-v1", 3, 50_000)
    assert presets.lookup("ppo", "gymnasium:MyOwnSim-v0") is None  # no twin: the defaults


def test_apply_puts_the_preset_under_fields_that_left_their_defaults():
    preset = presets.lookup("ppo", "CartPole-v1")
    cfg = presets.apply(ppo.Config(num_envs=3), preset)
    assert cfg.num_envs == 3  # chosen: kept
    assert (cfg.num_steps, cfg.learning_rate, cfg.total_timesteps) == (32, 5e-4, 150_000)
    assert presets.apply(cfg, None) is cfg
    assert presets.apply(ppo.Config(), preset.without(["num_steps"])).num_steps == 128


def _cfg(argv):
    from jaxrl_par.cli import _config, _parser
    return _config(_parser().parse_args(argv))


def test_cli_uses_the_env_preset_and_set_overrides_it():
    cfg = _cfg(["train", "ppo", "--env", "Breakout-MinAtar", "--set", "num_envs=16",
                "--total-timesteps", "1000000"])
    assert (cfg.num_envs, cfg.total_timesteps, cfg.num_steps, cfg.torso) == \
        (16, 1_000_000, 128, "mlp")
    # --set wins even where it gives the Config default that the preset changed
    assert _cfg(["train", "ppo", "--env", "Breakout-MinAtar", "--set",
                 "anneal_lr=True"]).anneal_lr is True
    assert _cfg(["train", "ppo", "--env", "Breakout-MinAtar", "--preset", "none"]) == \
        ppo.Config(env="Breakout-MinAtar")
    assert _cfg(["train", "ppo"]).num_envs == 8  # the default env, CartPole: its preset


def test_cli_unknown_preset_is_one_line(capsys):
    from jaxrl_par.cli import main

    assert main(["train", "ppo", "--env", "CartPole-v1", "--preset", "Nope-v0"]) == 2
    err = capsys.readouterr().err
    assert "--preset Nope-v0: ppo has no preset for it" in err and "Traceback" not in err


def test_train_applies_a_preset_and_records_it(tmp_path):
    from jaxrl_par.runner.training import train

    # 2 updates of the CartPole preset's 8 envs x 32 steps
    algo = ppo.make(ppo.Config(total_timesteps=512))
    result = train(algo, 0, num_chunks=1, progress=False, log_dir=str(tmp_path / "run"),
                   preset="auto")
    assert result.env_steps[-1] == 512 and len(result.env_steps) == 2
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert record["preset"] == "ppo:CartPole-v1"
    assert "gymnax-blines" in record["preset_source"]
    assert record["config"]["num_envs"] == 8 and record["config"]["total_timesteps"] == 512
    assert dataclasses.asdict(presets.remake(algo, None)[0].config) == \
        dataclasses.asdict(algo.config)


def test_host_prefixes_are_the_host_envs_own():
    """presets spells the host envs' prefixes out (it must not import jaxrl_par.envs);
    they stay the envs' own."""
    from jaxrl_par.envs import envpool_envs, host

    assert presets.HOST_PREFIXES == (host.PREFIX, envpool_envs.PREFIX)
