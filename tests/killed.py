"""Runs that die midway, as a killed process would, for the resume tests."""

from __future__ import annotations

import pytest

from jaxrl_par.runner.training import train


class Killed(Exception):
    """Raised out of ``train`` by :func:`train_killed_after`'s callback."""


def train_killed_after(updates: int, algo, seeds, **kwargs) -> None:
    """``train(algo, seeds, **kwargs)`` (give it a ``log_dir``) that dies right after the
    first chunk that brings it to ``updates`` updates or more has been logged and
    checkpointed (the runner calls its callback after both)."""
    def die(done, rows):
        if done >= updates:
            raise Killed

    with pytest.raises(Killed):
        train(algo, seeds, callback=die, **kwargs)
