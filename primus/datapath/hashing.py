"""hash_bucket's stable hashes, vectorised over Arrow arrays: zlib's CRC-32 of a string, a multiplicative mix of an integer.

The bucket of a value depends on the value and the bucket count only, never on the batch, chunk or file it comes in:

- a string (``string``, ``large_string``, ``string_view``, or a dictionary of them) goes to
  ``zlib.crc32(value.encode("utf-8")) % buckets``, the CRC-32 of zlib, gzip and PNG; a null string goes where the
  text ``"None"`` goes, and an empty string to bucket 0;
- an integer ``v`` goes to ``((v as uint64) * 0x9E3779B97F4A7C15 mod 2**64 >> 29) % buckets`` (a negative integer
  as its two's complement); a null integer goes where ``-2**63`` goes;
- any other type goes where the text ``str(value)`` goes (a per-value loop: such ids are rare).

The strings' CRC-32 runs over the Arrow buffers (offsets and data) on one of two paths (HashPath), which give the same
buckets: native, the C++ of primus._arena (primus/native/crc32_strings.h), one string at a time without the GIL, where
the extension is built (primus.native.load); else numpy, eight bytes at a time over all strings, with four
16-bit lookup tables. Two properties of CRC-32 make that possible across strings of any length: the raw register
started at 0 is unchanged by leading zero bytes, so every string is read as if left-padded with zeros to a whole
number of 8-byte words; and the register is linear, so zlib's start value (0xFFFFFFFF) and final inversion add a
term that depends only on the length, ``zlib.crc32(bytes(length))``. The native kernels read strings the same way.
"""

from __future__ import annotations

import enum
import sys
import zlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from primus import native

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NULL_INTEGER = -(2**63)  # what a null integer id hashes as (what the float64 path before vectorising gave on x86-64)
_NULL_TEXT = "None"  # what a null string (or other value) hashes as: str(None)
_BLOCK = 1 << 14  # strings per numpy pass: the temporaries stay in the CPU's cache
_WINDOW_WORDS = 4  # strings up to this many 8-byte words are read in one gather each; longer ones a word at a time
_LITTLE_ENDIAN = sys.byteorder == "little"
_WIDEST_BUCKETS = 2**33  # a CRC-32 is below 2**32: more buckets than this place it as this many do (the native call takes uint64)


class HashPath(enum.Enum):
    """Where the strings' CRC-32 is computed; both give the same buckets."""

    NATIVE = "native"  # primus._arena's C++ (primus/native/crc32_strings.h), without the GIL
    NUMPY = "numpy"  # the vectorised numpy below: where the extension is not built (no compiler)


def native_hashing() -> ModuleType | None:
    """primus._arena where it is built and has the CRC-32 kernels (built on first use), else None."""
    module = native.load()
    return module if module is not None and hasattr(module, "crc32_strings") else None


def hash_path() -> HashPath:
    """The path hash_bucket takes in this process: native where primus._arena is built, else numpy."""
    return HashPath.NATIVE if native_hashing() is not None else HashPath.NUMPY


def _byte_tables() -> np.ndarray:
    """The slicing-by-8 tables of the reflected CRC-32 polynomial: tables[k][b] advances byte b by k more bytes."""
    tables = np.zeros((8, 256), dtype=np.uint32)
    for value in range(256):
        crc = value
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
        tables[0, value] = crc
    for k in range(1, 8):
        tables[k] = (tables[k - 1] >> 8) ^ tables[0][tables[k - 1] & 0xFF]
    return tables


def _word_tables() -> np.ndarray:
    """tables[q][x]: the raw register's share of the 16-bit piece q (bytes 2q and 2q+1) of an 8-byte word."""
    bytes_ = _byte_tables()
    index = np.arange(1 << 16)
    return np.stack([bytes_[7 - 2 * q][index & 0xFF] ^ bytes_[6 - 2 * q][index >> 8] for q in range(4)])


_TABLES = _word_tables()
# _KEEP[j] keeps a little-endian word's high 8 - j bytes: the j low bytes lie before the string's first byte
_KEEP = np.array([(0xFFFFFFFFFFFFFFFF << (8 * j)) & 0xFFFFFFFFFFFFFFFF for j in range(9)], dtype=np.uint64)
# _KEEP_SHORT[8 * _WINDOW_WORDS + x] is _KEEP[clip(x, 0, 8)], for x = bytes of a word before its string's first
_KEEP_SHORT = np.concatenate([np.full(8 * _WINDOW_WORDS, _KEEP[0]), _KEEP, np.full(8 * _WINDOW_WORDS, _KEEP[8])])
_ZEROS_CRC = np.array([zlib.crc32(bytes(length)) for length in range(257)], dtype=np.uint32)


def _length_terms(lengths: np.ndarray) -> np.ndarray:
    """zlib.crc32(bytes(length)) per string: the length's term of zlib's CRC-32 beside the raw register's."""
    longest = int(lengths.max()) if lengths.size else 0
    if longest < len(_ZEROS_CRC):
        return _ZEROS_CRC.take(lengths.astype(np.intp))
    distinct = np.unique(lengths)
    terms = np.array([zlib.crc32(bytes(int(length))) for length in distinct], dtype=np.uint32)
    return terms.take(np.searchsorted(distinct, lengths))


def _advance(register: np.ndarray | None, words: np.ndarray, j: int = 0) -> np.ndarray:
    """The raw registers after 8 more bytes each: column j of words (little-endian uint64, rows C-contiguous); None:
    registers still 0."""
    pieces = words.view(np.uint16).reshape(words.shape[0], -1)[:, 4 * j : 4 * j + 4]
    low16 = pieces if register is None else (words.view(np.uint32).reshape(words.shape[0], -1)[:, 2 * j] ^ register).view(np.uint16).reshape(-1, 2)
    out: np.ndarray = _TABLES[0].take(low16[:, 0])
    out ^= _TABLES[1].take(low16[:, 1])
    out ^= _TABLES[2].take(pieces[:, 2])
    out ^= _TABLES[3].take(pieces[:, 3])
    return out


def _words_at(data: np.ndarray) -> np.ndarray:
    """Every 8-byte little-endian word of data, by its first byte's offset (an unaligned view, no copy)."""
    return np.ndarray(shape=(data.size - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))


def _raw_one_length(data: np.ndarray, first_end: int, count: int, length: int) -> np.ndarray | None:
    """The raw registers of count strings of one length lying back to back, the first ending at first_end; None when
    the first word would start before the buffer."""
    register: np.ndarray | None = None
    for k in range((length + 7) // 8, 0, -1):
        if first_end - 8 * k < 0:
            return None
        word = np.ascontiguousarray(np.ndarray(shape=(count,), dtype="<u8", buffer=data, offset=first_end - 8 * k, strides=(length,)))
        if 8 * k > length:  # the first word starts before the string
            word &= _KEEP[8 * k - length]
        register = _advance(register, word)
    return register


def _raw_windowed(data: np.ndarray, ends: np.ndarray, lengths: np.ndarray, words: int) -> np.ndarray | None:
    """The raw registers of strings of at most `words` words, each read in one gather as the window of that many words
    that ends where it ends; None when a window would start before the buffer.

    Word j of a window holds some of its string's bytes when the string is longer than 8 * (words - j); the bytes
    before the string are masked to zeros, which leave a register of 0 as it is."""
    starts = ends - 8 * words
    if int(starts[0]) < 0 or data.size < 8 * words:  # the ends only grow: the first window starts first
        return None
    windows_at = np.ndarray(shape=(data.size - 8 * words + 1,), dtype=np.dtype((np.void, 8 * words)), buffer=data, offset=0, strides=(1,))
    window = windows_at[starts].view("<u8").reshape(-1, words)
    shortest = int(lengths.min())
    register: np.ndarray | None = None
    for j in range(words):
        if shortest < 8 * (words - j):
            window[:, j] &= _KEEP_SHORT.take((8 * _WINDOW_WORDS + 8 * (words - j)) - lengths)
        register = _advance(register, window, j)
    assert register is not None
    return register


def _raw_gathered(words_at: np.ndarray, ends: np.ndarray, lengths: np.ndarray, longest: int) -> np.ndarray:
    """The raw registers of strings of any lengths, their words gathered by offset.

    Word k counted from a string's end holds bytes [end - 8k, end - 8k + 8); words before the string's first one are
    zeros, which leave a register of 0 as it is, so a string takes part from its own first word on."""
    count = ends.size
    register: np.ndarray | None = None
    for k in range((longest + 7) // 8, 0, -1):
        active = lengths > 8 * (k - 1)  # the strings that have a word k
        subset = np.flatnonzero(active) if int(np.count_nonzero(active)) * 4 < count else None  # few: work on them alone
        at_ends, sizes = (ends, lengths) if subset is None else (ends[subset], lengths[subset])
        starts = at_ends - 8 * k
        word = words_at[np.maximum(starts, 0)]
        if starts[0] < 0:  # only strings within 8 bytes of the buffer's start: read from 0, moved into place
            word <<= np.uint64(8) * np.clip(-starts, 0, 7).astype(np.uint64)
        if int(sizes.min()) < 8 * k:  # some words start before their string (or, outside a subset, hold none of it)
            word &= _KEEP.take(np.clip(8 * k - sizes, 0, 8).astype(np.intp))
        if subset is None:
            register = _advance(register, word)
        else:
            register = np.zeros(count, dtype=np.uint32) if register is None else register
            register[subset] = _advance(register[subset], word)
    return np.zeros(count, dtype=np.uint32) if register is None else register


def _raw_block(data: np.ndarray, words_at: np.ndarray, ends: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The raw CRC-32 registers (started at 0) of strings given by their end offsets and lengths in data."""
    count = ends.size
    longest, shortest = int(lengths.max()), int(lengths.min())
    if longest == 0:
        return np.zeros(count, dtype=np.uint32)
    if shortest == longest:  # one length (fixed-width ids): the words lie a fixed stride apart
        register = _raw_one_length(data, int(ends[0]), count, longest)
        if register is not None:
            return register
    elif shortest == 0 and int(np.where(lengths == 0, longest, lengths).min()) == longest:
        # empty or one length (ids with missing values): the filled ones lie back to back, as empty ones take no bytes
        filled = lengths > 0
        first = int(ends[0] - lengths[0])
        packed = _raw_one_length(data, first + longest, (int(ends[-1]) - first) // longest, longest)
        if packed is not None:
            register = np.zeros(count, dtype=np.uint32)
            register[filled] = packed
            return register
    words = (longest + 7) // 8
    register = _raw_windowed(data, ends, lengths, words) if words <= _WINDOW_WORDS else None
    return _raw_gathered(words_at, ends, lengths, longest) if register is None else register


def crc32_strings(array: pa.Array, buckets: int | None = None, path: HashPath | None = None) -> np.ndarray:
    """zlib.crc32 of each value's UTF-8 bytes as uint32, or with buckets that modulo buckets as int64, for a string or
    large_string array (a null slot: of its bytes, usually none), on the path given (default: hash_path())."""
    if (path or hash_path()) is HashPath.NATIVE:
        return _native_crc32(array, buckets, null_bucket=None)
    return _numpy_crc32(array, buckets)


def _native_crc32(array: pa.Array, buckets: int | None, null_bucket: int | None) -> np.ndarray:
    """crc32_strings by primus._arena; with null_bucket (and buckets), a null slot's bucket is null_bucket."""
    module = native_hashing()
    if module is None:
        raise RuntimeError("hash path native: primus._arena is not built in this process (see its warning)")
    count = len(array)
    validity_buffer, offsets_buffer, data_buffer = array.buffers()
    if count == 0 or offsets_buffer is None:  # no offsets: every string is empty
        empty = np.zeros(count, dtype=np.uint32 if buckets is None else np.int64)
        return empty if null_bucket is None or buckets is None else _nulls_as_text(empty, array, buckets)
    offset_type = np.int64 if pa.types.is_large_string(array.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[array.offset : array.offset + count + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, dtype=np.uint8)
    if buckets is None:
        crcs = np.empty(count, dtype=np.uint32)
        module.crc32_strings(offsets, data, crcs)
        return crcs
    picked = np.empty(count, dtype=np.int64)
    nulls = null_bucket is not None and validity_buffer is not None and array.null_count > 0
    validity = np.frombuffer(validity_buffer, dtype=np.uint8) if nulls else None
    module.crc32_strings(offsets, data, picked, min(buckets, _WIDEST_BUCKETS), validity, array.offset, null_bucket or 0)
    return picked


def _numpy_crc32(array: pa.Array, buckets: int | None) -> np.ndarray:
    """crc32_strings in numpy, block by block (see the module's docstring)."""
    count = len(array)
    offset_type = np.int64 if pa.types.is_large_string(array.type) else np.int32
    _, offsets_buffer, data_buffer = array.buffers()
    out = np.zeros(count, dtype=np.uint32 if buckets is None else np.int64)
    if count == 0 or offsets_buffer is None:
        return out
    offsets: np.ndarray[Any, Any] = np.frombuffer(offsets_buffer, dtype=offset_type)[array.offset : array.offset + count + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, dtype=np.uint8)
    if data.size < 8:  # the unaligned word view needs 8 bytes
        data = np.concatenate([data, np.zeros(8, dtype=np.uint8)])
    words_at = _words_at(data)
    modulus = None if buckets is None or buckets > 0xFFFFFFFF else np.uint32(buckets)
    for start in range(0, count, _BLOCK):  # block by block: the temporaries stay in the CPU's cache
        stop = min(start + _BLOCK, count)
        ends = offsets[start + 1 : stop + 1]
        lengths = ends - offsets[start:stop]
        crc = _raw_block(data, words_at, ends, lengths)
        crc ^= _length_terms(lengths)
        if modulus is None:
            out[start:stop] = crc
        else:  # crc - (crc // m) * m: numpy divides by a scalar with a multiply, three times faster than its %
            quotient = crc // modulus
            quotient *= modulus
            out[start:stop] = crc - quotient
    return out


def _text_buckets(array: pa.Array, buckets: int, path: HashPath) -> np.ndarray | None:
    """Buckets of a string-like array (nulls as "None"), or None for another type."""
    if pa.types.is_dictionary(array.type):
        values = _text_buckets(array.dictionary, buckets, path) if _stringlike(array.dictionary.type) else None
        if values is None:
            return None
        indices = array.indices
        if values.size == 0:  # an empty dictionary: every index is null
            return _nulls_as_text(np.zeros(len(array), dtype=np.int64), indices, buckets)
        picked = values.take(pc.fill_null(indices, 0).to_numpy(zero_copy_only=False).astype(np.intp))
        return _nulls_as_text(picked, indices, buckets)
    if pa.types.is_string_view(array.type):
        array = array.cast(pa.large_string())
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return None
    if path is HashPath.NATIVE:  # the nulls' bucket is written by the same pass
        return _native_crc32(array, buckets, null_bucket=_null_text_bucket(buckets))
    if not _LITTLE_ENDIAN:
        return None
    return _nulls_as_text(_numpy_crc32(array, buckets), array, buckets)


def _stringlike(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind))


def _null_text_bucket(buckets: int) -> int:
    return zlib.crc32(_NULL_TEXT.encode()) % buckets


def _nulls_as_text(picked: np.ndarray, array: pa.Array, buckets: int) -> np.ndarray:
    if array.null_count:
        picked[array.is_null().to_numpy(zero_copy_only=False)] = _null_text_bucket(buckets)
    return picked


def _integer_buckets(column: pa.ChunkedArray, buckets: int) -> np.ndarray:
    wide = pa.uint64() if column.type == pa.uint64() else pa.int64()
    values = column if column.type == wide else column.cast(wide)
    if values.null_count:  # -2**63 is 2**63 as uint64
        values = pc.fill_null(values, pa.scalar(_NULL_INTEGER if wide == pa.int64() else 2**63, wide))
    values = values.to_numpy().astype(np.uint64)  # a negative id as its two's complement
    mixed = (values * _GOLDEN) >> np.uint64(29)
    picked: np.ndarray = (mixed % np.uint64(buckets)).astype(np.int64)
    return picked


def _pylist_buckets(chunk: pa.Array, buckets: int) -> np.ndarray:
    return np.array([zlib.crc32(str(value).encode()) % buckets for value in chunk.to_pylist()], dtype=np.int64)


def _chunks(column: pa.ChunkedArray | pa.Array) -> Iterator[pa.Array]:
    yield from column.chunks if isinstance(column, pa.ChunkedArray) else [column]


def hash_bucket(column: pa.ChunkedArray | pa.Array, buckets: int, path: HashPath | None = None) -> pa.Array:
    """Each value's bucket in [0, buckets), as int64 (see the module's docstring for the hashes); strings' CRC-32 on
    the path given (default: hash_path())."""
    if buckets < 1:
        raise ValueError(f"buckets must be 1 or more, not {buckets}")
    chunked = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column], type=column.type)
    if pa.types.is_integer(chunked.type):
        return pa.array(_integer_buckets(chunked, buckets), type=pa.int64())
    chosen = path or hash_path()
    parts = []
    for chunk in _chunks(chunked):
        picked = _text_buckets(chunk, buckets, chosen)
        parts.append(_pylist_buckets(chunk, buckets) if picked is None else picked)
    whole = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return pa.array(whole, type=pa.int64())
