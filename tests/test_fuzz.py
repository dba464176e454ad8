"""Every user input fuzzed (hypothesis, a bounded number of examples each): the spec loader, the CLI's arguments and
files, each file decoder, the explorer's OTLP JSON, the landing stream's files. Nothing may raise anything but the
clear error of its kind; what a fuzzer once found stays here as an @example."""

from __future__ import annotations

import io
import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as paorc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from primus import cli
from primus.errors import DataError, SpecError
from primus.explorer.traces import Parsed, decode_body, parse_document, parse_request
from primus.sources.base import Piece
from primus.sources.files import FilesAdapter
from primus.sources.landing import LandingAdapter
from primus.spec import Source, load_job_text, parse_job
from primus.tools.demo import demo_job

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SLOT = datetime(2026, 11, 1, 5, tzinfo=UTC)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)


def _demo_document() -> dict[str, Any]:
    return demo_job("/data/clicks/date={date}/hour={hour}", 3)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in a document."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _mutated(document: dict[str, Any], path: tuple[Any, ...], value: Any, delete: bool) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(document))
    if not path:
        return copy
    node: Any = copy
    for step in path[:-1]:
        node = node[step]
    if delete and isinstance(node, dict):
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return copy


# The spec loader.


@FUZZ
@given(st.text(max_size=400))
def test_any_text_is_a_job_or_a_spec_error(text: str) -> None:
    try:
        load_job_text(text, "fuzzed")
    except SpecError as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)


@FUZZ
@given(st.data())
def test_a_valid_spec_with_any_value_changed_or_dropped_is_a_job_or_one_line_per_problem(data: st.DataObject) -> None:
    document = _demo_document()
    path = data.draw(st.sampled_from(_paths(document)))
    mutated = _mutated(document, path, data.draw(json_values), data.draw(st.booleans()))
    try:
        parse_job(mutated)
    except SpecError as exc:
        assert exc.problems and all("\n" not in p and "Traceback" not in p for p in exc.problems), exc.problems


def test_a_key_with_a_line_break_is_quoted_in_its_one_line_problem() -> None:
    """Found by the fuzzer above: an unknown key holding a newline made a two-line problem."""
    with pytest.raises(SpecError) as raised:
        parse_job(_mutated(_demo_document(), ("spec", "training", "features", "sparse", 0), {"\n": None}, False))
    assert "spec.training.features.sparse[0]['\\n']: unknown field" in raised.value.problems
    assert all("\n" not in p for p in raised.value.problems)


# The CLI: its arguments, and the files it reads.


@FUZZ
@given(
    st.lists(
        st.sampled_from(["validate", "convert", "plan", "digest", "report", "cost", "get", "--to", "-o", "json", "x.yaml", "--help", "-", ""]) | st.text(max_size=8),
        max_size=5,
    )
)
def test_any_arguments_parse_or_exit_with_usage(argv: list[str]) -> None:
    try:
        cli.build_parser().parse_args(argv)
    except SystemExit as exc:
        assert exc.code in (0, 2)


@FUZZ
@given(st.binary(max_size=600) | st.text(max_size=600).map(str.encode))
def test_validate_and_convert_any_file_end_with_a_code_not_a_traceback(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "job.yaml"
        path.write_bytes(content)
        assert cli.main(["validate", str(path)]) in (0, cli.EXIT_USER_ERROR)
        assert cli.main(["convert", str(path), "-o", str(Path(folder) / "out.yaml")]) in (0, cli.EXIT_USER_ERROR)
        report = Path(folder) / "report.json"
        report.write_bytes(content)
        assert cli.main(["report", str(report)]) in (0, 1, cli.EXIT_USER_ERROR)


# The file decoders, through the planner's resolve and the executor's reader.


def _table(rows: int) -> pa.Table:
    return pa.table({"label": pa.array([i % 2 for i in range(rows)], pa.int8()), "f1": pa.array([i / 3 for i in range(rows)], pa.float32())})


def _encoded(fmt: str) -> bytes:
    sink = io.BytesIO()
    if fmt == "parquet":
        pq.write_table(_table(50), sink, row_group_size=20)
    elif fmt == "orc":
        paorc.write_table(_table(50), sink)
    elif fmt == "csv":
        sink.write(b"label,f1\n" + b"".join(f"{i % 2},{i / 3}\n".encode() for i in range(50)))
    else:
        sink.write(b"".join(json.dumps({"label": i % 2, "f1": i / 3}).encode() + b"\n" for i in range(50)))
    return sink.getvalue()


SUFFIX = {"parquet": "parquet", "orc": "orc", "csv": "csv", "json": "jsonl"}


@FUZZ
@given(st.sampled_from(sorted(SUFFIX)), st.data())
def test_any_damaged_file_is_read_or_refused_with_a_data_error(fmt: str, data: st.DataObject) -> None:
    """A valid file of each format with bytes flipped, cut or appended, or random bytes: resolve (the planner's
    metadata read) and read (the executor's) give rows or a DataError naming the source, nothing else."""
    good = _encoded(fmt)
    how = data.draw(st.sampled_from(["flip", "cut", "append", "random"]))
    if how == "flip":
        spots = data.draw(st.lists(st.integers(0, len(good) - 1), min_size=1, max_size=6))
        damaged = bytearray(good)
        for spot in spots:
            damaged[spot] ^= data.draw(st.integers(1, 255))
        content = bytes(damaged)
    elif how == "cut":
        content = good[: data.draw(st.integers(0, len(good) - 1))]
    elif how == "append":
        content = good + data.draw(st.binary(min_size=1, max_size=64))
    else:
        content = data.draw(st.binary(max_size=400))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        partition = root / "date=2026-11-01" / "hour=05"
        partition.mkdir(parents=True)
        (partition / "_SUCCESS").touch()
        (partition / f"part-0.{SUFFIX[fmt]}").write_bytes(content)
        source = Source.model_validate(
            {"name": "events", "uri": f"file://{root}/date={{date}}/hour={{hour}}", "format": fmt, "timeRange": {"start": "2026-11-01T00:00", "end": "2026-11-02T00:00"}}
        )
        adapter = FilesAdapter(text_chunk_bytes=97)
        try:
            resolved = adapter.resolve(source, SLOT, ["label", "f1"])
        except DataError as exc:
            assert "events" in str(exc) or "part-0" in str(exc), exc
            return
        for piece in resolved.pieces:
            try:
                adapter_read(adapter, source, piece)
            except DataError as exc:
                assert str(exc), exc


def test_a_damaged_parquet_footer_is_an_error_not_an_abort(tmp_path: Path) -> None:
    """Found by the fuzzer above: these four bytes flipped in the footer made pyarrow's footer unpickler abort the
    process (the planner would die resolving the partition). The footer is now read through a reader, which raises."""
    damaged = bytearray(_encoded("parquet"))
    for spot, flip in [(1494, 67), (1629, 248), (1148, 131), (759, 125)]:
        damaged[spot] ^= flip
    partition = tmp_path / "date=2026-11-01" / "hour=05"
    partition.mkdir(parents=True)
    (partition / "_SUCCESS").touch()
    (partition / "part-0.parquet").write_bytes(bytes(damaged))
    uri = f"file://{tmp_path}/date={{date}}/hour={{hour}}"
    source = Source.model_validate({"name": "events", "uri": uri, "format": "parquet", "timeRange": {"start": "2026-11-01T00:00", "end": "2026-11-02T00:00"}})
    adapter = FilesAdapter()
    try:
        for piece in adapter.resolve(source, SLOT, ["label", "f1"]).pieces:
            adapter_read(adapter, source, piece)
    except DataError as exc:
        assert "part-0.parquet" in str(exc) or "events" in str(exc), exc


def adapter_read(adapter: FilesAdapter, source: Source, piece: Piece) -> None:
    """The executor's read of one piece: TaskReader turns any failure into a DataError naming source and location."""
    try:
        adapter.read(source, piece, ["label", "f1"])
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - what TaskReader.read wraps; here it must at least be an exception, not a crash
        raise DataError(f"source {source.name!r}: cannot read {piece.location}: {exc}") from None


# The explorer's OTLP JSON.


@FUZZ
@given(json_values)
def test_any_json_document_is_spans_or_counted_rejections(document: Any) -> None:
    parsed = parse_document(document)
    assert isinstance(parsed, Parsed) and parsed.rejected >= 0
    if parsed.rejected:
        assert parsed.problem


@FUZZ
@given(st.binary(max_size=300), st.sampled_from(["", "gzip", "deflate", "br", "identity"]))
def test_any_request_body_is_parsed_or_refused_with_a_reason(body: bytes, encoding: str) -> None:
    try:
        decoded = decode_body(body, encoding)
    except ValueError as exc:
        assert str(exc)
        return
    assert isinstance(parse_request(decoded), Parsed)


# The landing stream's files.


@FUZZ
@given(st.data())
def test_any_landed_file_is_read_or_refused_with_a_data_error(data: st.DataObject) -> None:
    good = _encoded("parquet")
    content = data.draw(st.binary(max_size=400) | st.integers(0, len(good) - 1).map(lambda cut: good[:cut]))
    with tempfile.TemporaryDirectory() as folder:
        landing = Path(folder)
        landed = landing / "batch-0.parquet"
        landed.write_bytes(content)
        moment = (SLOT + timedelta(minutes=10)).timestamp()
        os.utime(landed, (moment, moment))
        source = Source.model_validate(
            {"name": "live", "kind": "stream", "adapter": "landing", "uri": str(landing), "format": "parquet", "timeRange": {"start": "2026-11-01T00:00"}}
        )
        adapter = LandingAdapter(now=lambda: SLOT + timedelta(hours=2))
        try:
            for piece in adapter.resolve(source, SLOT, ["label", "f1"]).pieces:
                adapter_read(adapter, source, piece)
        except DataError as exc:
            assert str(exc)
