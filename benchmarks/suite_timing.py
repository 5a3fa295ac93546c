"""Where the test suite's time goes: a pytest plugin and its report.

The plugin writes one JSON line per test (per xdist worker): its wall and CPU seconds and
the seconds jax spent tracing, lowering and compiling in that process (jax.monitoring's
duration events; tests that run subprocesses show all their time as the rest)::

    PYTHONPATH=benchmarks SUITE_TIMING=/tmp/t python -m pytest -q -n 2 --dist worksteal \\
        -p suite_timing
    python benchmarks/suite_timing.py /tmp/t 40          # totals and the 40 slowest tests
    python benchmarks/suite_timing.py /tmp/t 40 /tmp/u   # two runs side by side

Compare runs that started from the same compile cache (tests/conftest.py): a warm
``~/.cache/jaxrl_par/xla`` skips most of the suite's compiles.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time

_durations: dict[str, float] = {}
_out = None


def _listener(event: str, duration: float, **_) -> None:
    _durations[event] = _durations.get(event, 0.0) + duration


def pytest_configure(config) -> None:
    global _out
    import jax

    jax.monitoring.register_event_duration_secs_listener(_listener)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _out = open(f"{os.environ.get('SUITE_TIMING', 'suite_timing')}.{worker}.jsonl", "a")  # noqa: SIM115


def pytest_runtest_protocol(item, nextitem):
    """Times the whole protocol (set-up, call, tear-down) of ``item``."""
    _durations.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    row = {"test": item.nodeid, "wall": time.perf_counter() - wall,
           "cpu": time.process_time() - cpu}
    row.update({k.rsplit("/", 1)[-1]: v for k, v in _durations.items() if "duration" in k})
    _out.write(json.dumps(row) + "\n")
    _out.flush()


pytest_runtest_protocol.hookwrapper = True  # pytest reads this attribute, like the decorator


def load(prefix: str) -> dict[str, dict]:
    """``test id -> row`` of every worker's file, with ``compile`` (XLA), ``trace``
    (tracing and lowering) and ``rest`` (the remainder of the wall time) added."""
    rows = {}
    for path in glob.glob(prefix + ".*.jsonl"):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                r["compile"] = r.get("backend_compile_duration", 0.0)
                r["trace"] = (r.get("jaxpr_trace_duration", 0.0)
                              + r.get("jaxpr_to_mlir_module_duration", 0.0))
                r["rest"] = r["wall"] - r["compile"] - r["trace"]
                rows[r["test"]] = r
    return rows


def main(argv: list[str]) -> None:
    runs = [load(p) for p in argv[0:1] + argv[2:3]]
    top = int(argv[1]) if len(argv) > 1 else 30
    for prefix, rows in zip(argv[0:1] + argv[2:3], runs, strict=True):
        total = {k: sum(r[k] for r in rows.values()) for k in ("wall", "compile", "trace", "rest")}
        print(f"{prefix}: {len(rows)} tests; seconds summed over tests: "
              + ", ".join(f"{k} {v:,.0f}" for k, v in total.items()))
    first = runs[0]
    names = sorted(first, key=lambda t: -first[t]["wall"])[:top]
    print(f"{'test':<92} {'wall':>6} {'compile':>7} {'trace':>6} {'rest':>6}"
          + ("   second run: wall compile" if len(runs) > 1 else ""))
    for t in names:
        r = first[t]
        line = (f"{t[:92]:<92} {r['wall']:6.1f} {r['compile']:7.1f} {r['trace']:6.1f} "
                f"{r['rest']:6.1f}")
        if len(runs) > 1 and t in runs[1]:
            line += f"   {runs[1][t]['wall']:6.1f} {runs[1][t]['compile']:7.1f}"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
