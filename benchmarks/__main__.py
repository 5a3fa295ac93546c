"""``python -m benchmarks report --quick|--full``: see :mod:`benchmarks.report`."""

from __future__ import annotations

import argparse
import sys

from benchmarks import report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="jaxrl_par's benchmarks as one command")
    sub = p.add_subparsers(dest="command", required=True)
    report.add_parser(sub)
    args = p.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
