"""The README's training examples learn what they say they do (slow: each trains).

Each case is a command that appears verbatim in README.md, run as a subprocess with
``--json`` (and, where the claim allows, a smaller budget), and the return its comment
or CartPole's cap promises."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
README = os.path.join(ROOT, "README.md")

# (the README's command, extra flags for the test, figure, at least)
CASES = [
    ("jaxrl-par train ppo --env CartPole-v1 --seeds 4", [], "final_return", 475.0),
    ("jaxrl-par train dqn --env CartPole-v1", ["--seeds", "2"], "final_return", 475.0),
    ("jaxrl-par train ppo --env Pendulum-v1", ["--seeds", "2"], "final_return", -200.0),
    ("jaxrl-par train sac --env Pendulum-v1", ["--seeds", "2"], "final_return", -250.0),
    ("jaxrl-par train impala --env CartPole-v1", ["--seeds", "2"], "final_return", 475.0),
    # The round-robin form stalls on about 1 seed in 4 (BENCHMARKS.md, A3C); the README
    # says so, and promises 475 of the threaded form (16 of 16 seeds there).
    ("jaxrl-par train a3c --async-workers", ["--seeds", "2"], "final_return", 475.0),
    ("jaxrl-par train a2c --set num_envs=8 --devices 2", ["--seeds", "2"],
     "final_return", 475.0),
    ("jaxrl-par train apex", ["--seeds", "2", "--eval-envs", "8"], "greedy_return", 475.0),
]


def test_the_cases_are_the_readmes_commands():
    with open(README) as f:
        text = f.read()
    for command, *_ in CASES:
        assert command in text, command


@pytest.mark.slow
@pytest.mark.xla_optimized
@pytest.mark.parametrize(("command", "extra", "figure", "least"), CASES,
                         ids=[c[0].removeprefix("jaxrl-par train ") for c in CASES])
def test_readme_example_learns(command, extra, figure, least):
    argv = command.split()[1:] + extra + ["--json", "--no-progress", "--no-compile-cache"]
    out = subprocess.run([sys.executable, "-m", "jaxrl_par", *argv], capture_output=True,
                         text=True, cwd=ROOT, timeout=3600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary[figure] >= least, (summary[figure], summary.get(f"{figure}s"))
