"""Config fields: declared once in groups, documented, range-checked, shown by help,
`train ALGO --help`, `--print-config` and docs/config.md; `--set` parses the forms
config.json writes and suggests close names."""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

from jaxrl_par import algos
from jaxrl_par.algos import dqn, fields, ppo, sac
from jaxrl_par.algos.config import apply_overrides
from jaxrl_par.runner.records import config_record

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = {name: algos.get(name).Config for name in sorted(algos.ALGORITHMS)}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_field_has_a_meaning(name):
    missing = [i.name for i in fields.describe(CONFIGS[name]) if not i.doc]
    assert not missing, f"{name}.Config fields without a meaning: {missing}"


def test_a_field_shared_by_algorithms_is_declared_once_in_a_group():
    """A field name in two or more Configs has one declaring class (a group, or a
    Config the others subclass), so its meaning is written once."""
    owners = collections.defaultdict(set)
    for cls in CONFIGS.values():
        for info in fields.describe(cls):
            owners[info.name].add(info.owner)
    twice = {name: sorted(o) for name, o in owners.items() if len(o) > 1}
    assert not twice, twice
    groups = {n for n, o in owners.items()
              if any(x.startswith("jaxrl_par.algos.fields.") for x in o)}
    assert {"env", "learning_rate", "hidden_sizes", "buffer_size", "per_alpha", "tau",
            "num_critics", "num_minibatches", "actor_sync_period"} <= groups


def test_a_redeclared_default_keeps_the_groups_meaning_and_range():
    info = {i.name: i for i in fields.describe(dqn.Config)}
    assert dqn.Config().hidden_sizes == (120, 84)  # DQN's own default...
    assert info["hidden_sizes"].group == "Network"  # ...with the group's meaning
    assert info["num_envs"].range == "positive"
    with pytest.raises(ValueError, match=r"dqn.Config.num_envs must be > 0, got 0"):
        dqn.Config(num_envs=0)


@pytest.mark.parametrize(("cls", "changes", "message"), [
    (ppo.Config, {"gamma": 1.5}, r"ppo.Config.gamma must be in \[0, 1\], got 1.5"),
    (ppo.Config, {"max_grad_norm": -1.0}, r"ppo.Config.max_grad_norm must be >= 0"),
    (ppo.Config, {"learning_rate": float("nan")}, r"ppo.Config.learning_rate must be > 0"),
    (sac.Config, {"target_entropy": float("nan")}, r"sac.Config.target_entropy is NaN"),
    (sac.Config, {"batch_size": 0}, r"sac.Config.batch_size must be > 0"),
    (dqn.Config, {"learning_starts": -1}, r"dqn.Config.learning_starts must be >= 0"),
    (dqn.Config, {"num_steps": True}, r"dqn.Config.num_steps must be > 0, got True"),
])
def test_ranges_are_checked_at_construction_and_replace(cls, changes, message):
    with pytest.raises(ValueError, match=message):
        cls(**changes)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(cls(), **changes)


def test_help_shows_every_field_with_type_default_and_meaning():
    doc = ppo.Config.__doc__
    assert "clip_eps: float = 0.2" in doc
    assert "clipping of the probability ratio" in doc
    for info in fields.describe(ppo.Config):
        assert f"  {info.name}: " in doc


def test_docs_config_reference_is_generated_from_the_fields():
    expected = fields.reference(CONFIGS)
    assert (ROOT / "docs" / "config.md").read_text() == expected, (
        "docs/config.md is out of date: python -m jaxrl_par.algos.fields > docs/config.md")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_set_accepts_every_value_in_the_form_config_json_writes(name):
    """Each field of a recorded config, given back through --set as the JSON text
    config.json holds, gives the same Config (tuples as [a, b], None as null)."""
    cls = CONFIGS[name]
    cfg = cls(hidden_sizes=(32, 16), sweep=("learning_rate", "gamma"))
    record = config_record(type("A", (), {"config": cfg})())
    overrides = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                 for k, v in record.items() if k != "config_class"]
    assert apply_overrides(cls(), overrides) == cfg


@pytest.mark.parametrize(("text", "value"), [
    ("[128, 128]", (128, 128)), ("(128,128)", (128, 128)), ("128,128", (128, 128)),
    ("[64]", (64,)), ("64,", (64,)),
])
def test_set_parses_tuple_forms(text, value):
    assert apply_overrides(ppo.Config(), [f"hidden_sizes={text}"]).hidden_sizes == value


def test_set_suggests_the_closest_field():
    with pytest.raises(ValueError, match="did you mean learning_rate[ ?]"):
        apply_overrides(ppo.Config(), ["learnig_rate=1e-3"])
    with pytest.raises(ValueError, match=r"unknown config field 'zzz'; valid fields"):
        apply_overrides(ppo.Config(), ["zzz=1"])


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "jaxrl_par", *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_train_help_lists_the_algorithms_fields():
    out = _cli("train", "dqn", "--help")
    assert out.returncode == 0, out.stderr
    assert "dqn.Config (set with --set FIELD=VALUE)" in out.stdout
    assert "target_update_period: int = 50" in out.stdout
    assert "gradient steps between target updates" in out.stdout


def test_cli_print_config_and_version():
    out = _cli("train", "ppo", "--env", "Acrobot-v1", "--set", "hidden_sizes=[32,32]",
               "--print-config")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["config_class"] == "jaxrl_par.algos.ppo.Config"
    assert record["env"] == "Acrobot-v1" and record["hidden_sizes"] == [32, 32]
    version = _cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("jaxrl-par ")
