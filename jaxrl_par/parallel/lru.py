"""A small least-recently-used cache for compiled programs and traces.

The runner and the actor-learner runtime keep the programs of their last few runs so a
second run of the same thing compiles nothing; both bound that memory the same way.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from typing import Any


class LRU:
    """At most ``size`` values, keyed; the least recently used goes first."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"LRU: size must be at least 1, got {size}")
        self.size = size
        self._items: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value for ``key``, made with ``make()`` (and kept) on a miss."""
        if key in self._items:
            self._items.move_to_end(key)
        else:
            self._items[key] = make()
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return self._items[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)
