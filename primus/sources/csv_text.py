"""CSV and TSV pieces of the files adapter: the source's delimiter, header and column names, and a line whose width
differs from the columns' as an error naming the file (the task is retried, then quarantined with that reason)."""

from __future__ import annotations

import io
import re

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs

from primus.errors import DataError
from primus.sources.base import Piece
from primus.spec import CsvOptions, CsvType, Source

HEADER_BYTES = 64 * 1024  # a header line longer than this is cut there
_TYPES: dict[CsvType, pa.DataType] = {
    "string": pa.string(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_WIDTH = re.compile(r"Expected (\d+) columns, got (\d+)(?::\s?(.*))?", re.DOTALL)
_EXCERPT = 60


def options_of(source: Source) -> CsvOptions:
    """The source's csv options, or the defaults: comma-separated, with a header."""
    return source.csv or CsvOptions()


def file_header(fs: pafs.FileSystem, path: str, parse: pacsv.ParseOptions) -> list[str]:
    """The column names on a file's first line."""
    with fs.open_input_file(path) as handle:
        first = bytes(handle.read(HEADER_BYTES)).split(b"\n", 1)[0]
    names: list[str] = pacsv.read_csv(io.BytesIO(first + b"\n"), parse_options=parse).column_names
    return names


def _names(source: Source, fs: pafs.FileSystem, path: str, parse: pacsv.ParseOptions) -> tuple[list[str] | None, str]:
    """The file's column names (None: f0, f1, ... as pyarrow numbers them) and what declares them, for errors."""
    options = options_of(source)
    if options.header:
        header = file_header(fs, path, parse)
        if options.columns and len(header) != len(options.columns):
            raise DataError(f"source {source.name!r}: {path}: the header has {len(header)} columns, but csv.columns names {len(options.columns)}")
        return (options.columns or header), ("csv.columns names" if options.columns else "the header names")
    return (options.columns or None), ("csv.columns names" if options.columns else "the file's first line has")


def read_piece(source: Source, fs: pafs.FileSystem, path: str, piece: Piece, data: bytes, columns: list[str]) -> pa.Table:
    """The requested columns (those present) of a piece's lines, data, parsed under the source's csv options."""
    options = options_of(source)
    parse = pacsv.ParseOptions(delimiter=options.delimiter)
    names, declared_by = _names(source, fs, path, parse)
    present = [c for c in columns if names is None or c in names]
    read = pacsv.ReadOptions(
        column_names=names,
        autogenerate_column_names=names is None,
        skip_rows=1 if options.header and piece.byte_start == 0 else 0,
        use_threads=False,  # decode on this thread: executors read in parallel already, and CPU time stays attributable
    )
    types = {name: _TYPES[kind] for name, kind in options.column_types.items() if name in present}
    convert = pacsv.ConvertOptions(column_types=types, include_columns=present if names is not None else None)
    try:
        table = pacsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse, convert_options=convert)
    except pa.ArrowInvalid as exc:
        width = _WIDTH.search(str(exc))
        if width is None:
            raise
        expected, got, line = width.group(1), width.group(2), (width.group(3) or "").strip()
        excerpt = line if len(line) <= _EXCERPT else line[:_EXCERPT] + "..."
        where = f"bytes {piece.byte_start}-{piece.byte_end or 'end'}"
        raise DataError(f"source {source.name!r}: {path} ({where}): a line has {got} columns, but {declared_by} {expected}: {excerpt!r}") from None
    return table.select([c for c in columns if c in table.column_names])
