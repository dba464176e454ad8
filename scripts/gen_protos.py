"""Generate the Python contracts in primus/v1 from protos/; with --check, fail if they are stale."""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUT_PACKAGE = Path("primus") / "v1"
WELL_KNOWN_TYPES = resources.files("grpc_tools") / "_proto"  # google/protobuf/*.proto (Struct), shipped with grpcio-tools
INIT_TEXT = '"""Generated protobuf and gRPC code for primus.v1: never edit by hand, run scripts/gen_protos.py."""\n'


def generate(out_root: Path) -> list[Path]:
    """Run protoc over every proto file, writing into out_root/primus/v1."""
    protos = sorted(PROTO_ROOT.glob("primus/v1/*.proto"))
    (out_root / OUT_PACKAGE).mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{WELL_KNOWN_TYPES}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *[str(p.relative_to(PROTO_ROOT)) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    (out_root / OUT_PACKAGE / "__init__.py").write_text(INIT_TEXT)
    return sorted((out_root / OUT_PACKAGE).iterdir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    if not args.check:
        target = ROOT / OUT_PACKAGE
        shutil.rmtree(target, ignore_errors=True)
        generate(ROOT)
        print(f"generated {len(list(target.iterdir()))} files in {target}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p for p in generate(Path(tmp)) if p.is_file()}
        current = {p.name: p for p in (ROOT / OUT_PACKAGE).glob("*") if p.is_file()}
        stale = sorted(
            name for name in fresh.keys() | current.keys() if name not in fresh or name not in current or not filecmp.cmp(fresh[name], current[name], shallow=False)
        )
    if stale:
        print(f"generated code in {OUT_PACKAGE} is stale: {', '.join(stale)}; run scripts/gen_protos.py", file=sys.stderr)
        return 1
    print("generated code is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
