"""The benchmarks, runnable as scripts (``python benchmarks/ppo.py``) and as one command
that regenerates BENCHMARKS.md's summary (``python -m benchmarks report --quick``)."""
