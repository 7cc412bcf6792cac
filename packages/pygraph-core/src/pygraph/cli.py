"""The ``pygraph`` command: ``pygraph demo`` (the main job on an embedded default), ``pygraph families``."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _cmd_families(_args: argparse.Namespace) -> int:
    from pygraph import engines

    for fam in engines.families():
        print(repr(fam))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from pygraph.demo import run_demo

    return run_demo(families=args.family or None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pygraph", description="pygraph: graph API for deep-learning ops")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build each installed family's example graph and show its plan list")
    demo.add_argument("--family", action="append", help="only this family (repeatable)")
    demo.set_defaults(func=_cmd_demo)
    fams = sub.add_parser("families", help="print the engine manifest")
    fams.set_defaults(func=_cmd_families)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
