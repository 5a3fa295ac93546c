import pytest

from jaxrl_par.parallel.lru import LRU


def test_a_hit_makes_nothing_and_the_least_recently_used_goes_first():
    made = []
    cache = LRU(2)

    def make(key):
        return lambda: made.append(key) or key.upper()

    assert cache.get("a", make("a")) == "A"
    assert cache.get("b", make("b")) == "B"
    assert cache.get("a", make("a")) == "A"  # a hit: "a" is now the most recent
    assert made == ["a", "b"]
    cache.get("c", make("c"))  # evicts "b", the least recently used
    assert "a" in cache and "c" in cache and "b" not in cache and len(cache) == 2
    cache.get("b", make("b"))
    assert made == ["a", "b", "c", "b"]


def test_a_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        LRU(0)
