"""The notebooks in notebooks/ run top to bottom, and say what they show."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _code(path: str) -> list[str]:
    """The notebook's code cells, without IPython's ``%`` and ``!`` lines."""
    with open(path) as f:
        cells = json.load(f)["cells"]
    return ["".join(line for line in c["source"] if not line.lstrip().startswith(("%", "!")))
            for c in cells if c["cell_type"] == "code"]


def test_quickstart_runs_and_learns(monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {}
    for i, source in enumerate(_code(os.path.join(ROOT, "notebooks", "quickstart.ipynb"))):
        try:
            exec(compile(source, f"quickstart.ipynb cell {i}", "exec"), namespace)  # noqa: S102
        except Exception as e:
            raise AssertionError(f"code cell {i} failed: {e!r}\n{source}") from e
    # what its text says: PPO solves CartPole on every seed, greedy too
    assert np.all(namespace["result"].final_returns() >= 475)
    assert np.all(namespace["greedy"] >= 475)
    assert len(namespace["sweep"].seeds) == 6
    rows = namespace["rows"]
    assert [r.entry.name for r in rows] == ["ppo", "a3c", "dqn"]
    assert any(r.steps_to_target is not None for r in rows)
