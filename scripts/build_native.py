"""Build primus._arena (the shared-memory arena pool and its Parquet reader) in place, against the installed pyarrow.

Without a C++ compiler the build fails with a warning and Primus still works: executors then copy each batch into a
shared-memory ring instead of decoding straight into shared memory. --strict makes a failed build an error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build() -> None:
    import numpy
    import pyarrow
    from Cython.Build import cythonize
    from setuptools import Extension, setup

    pyarrow.create_library_symlinks()  # libarrow.so / libparquet.so next to the versioned ones, for the linker
    extension = Extension(
        "primus._arena",
        [str(ROOT / "native" / "arena.pyx")],
        include_dirs=[pyarrow.get_include(), numpy.get_include(), str(ROOT / "native")],
        library_dirs=pyarrow.get_library_dirs(),
        runtime_library_dirs=pyarrow.get_library_dirs(),
        libraries=["arrow", "arrow_python", "parquet"],
        language="c++",
        extra_compile_args=["-std=c++20", "-O2", "-Wno-unused-function", "-Wno-unused-variable"],
    )
    modules = cythonize([extension], build_dir=str(ROOT / "build" / "native"), quiet=True, language_level=3)
    setup(name="primus-native", ext_modules=modules, script_args=["-q", "build_ext", "--inplace", "--build-temp", str(ROOT / "build" / "native")])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strict", action="store_true", help="fail when the extension cannot be built")
    args = parser.parse_args()
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            build()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - setuptools reports a failed compile as SystemExit
        print(log.getvalue(), file=sys.stderr)
        print(f"warning: primus._arena not built ({exc}); executors will copy batches into shared memory instead", file=sys.stderr)
        return 1 if args.strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
