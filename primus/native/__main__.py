"""python -m primus.native: build primus._arena into the cache now (what its first use would do), trying again after a
failed build; prints where it lies. Without a compiler it warns and exits 0, or 1 with --strict."""

from __future__ import annotations

import argparse
import sys

from primus.native import FALLBACK, BuildError, build, load_module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m primus.native", description=__doc__)
    parser.add_argument("--strict", action="store_true", help="fail when the extension cannot be built")
    parser.add_argument("--rebuild", action="store_true", help="compile again although it is built")
    args = parser.parse_args(argv)
    try:
        path = build(retry=True, rebuild=args.rebuild)
        load_module(path)  # a build that does not import is no build
    except (BuildError, ImportError, OSError) as exc:
        print(f"warning: primus._arena not built ({exc}); {FALLBACK}", file=sys.stderr)
        return 1 if args.strict else 0
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
