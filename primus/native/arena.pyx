# cython: language_level=3
# distutils: language = c++
"""A pyarrow MemoryPool backed by one shared-memory file: what it allocates, another process can map without a copy; and
hash_bucket's CRC-32 of string arrays."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyarrow.includes.common cimport CResult, CStatus, GetResultValue
from pyarrow.includes.libarrow cimport CArrayData, CBuffer, CMemoryPool, CRandomAccessFile, CRecordBatch, CSchema, CTable
from pyarrow.lib cimport (
    MemoryPool,
    NativeFile,
    RecordBatch,
    Schema,
    check_status,
    pyarrow_unwrap_batch,
    pyarrow_unwrap_schema,
    pyarrow_wrap_batch,
    pyarrow_wrap_table,
)


cdef extern from "arrow/api.h" namespace "arrow" nogil:
    cdef cppclass CBatchColumns "arrow::RecordBatch":
        int num_columns()
        shared_ptr[CArrayData] column_data(int i)

    shared_ptr[CRecordBatch] MakeBatch "arrow::RecordBatch::Make"(
        shared_ptr[CSchema] schema, int64_t num_rows, vector[shared_ptr[CArrayData]] columns
    )


cdef extern from "arrow/python/common.h" namespace "arrow::py":
    cdef cppclass CPyForeignBuffer "arrow::py::PyForeignBuffer":
        @staticmethod
        CStatus Make(const uint8_t* data, int64_t size, object base, shared_ptr[CBuffer]* out)


cdef extern from "arena_pool.h" namespace "primus":
    cdef cppclass ArenaPool(CMemoryPool):
        ArenaPool(const string& path, int64_t capacity, CMemoryPool* fallback)
        const string& error()
        uint8_t* base()
        int64_t capacity()
        int64_t arena_bytes()
        int64_t peak_bytes()
        void ResetPeak()
        int64_t fallback_allocations()
        int64_t budget()
        int64_t SetBudget(int64_t bytes)
        int64_t OffsetOf(const uint8_t* address)

    CResult[shared_ptr[CTable]] ReadColumns(
        const shared_ptr[CRandomAccessFile]& file, vector[int] row_groups, const vector[string]& names, CMemoryPool* pool
    ) nogil

    cdef cppclass ChunkCheck:
        int column
        int chunk
        bint binary
        bint finite

    CResult[shared_ptr[CTable]] ReadColumnsChecked(
        const shared_ptr[CRandomAccessFile]& file, vector[int] row_groups, const vector[string]& names,
        const vector[string]& checked, CMemoryPool* pool, vector[ChunkCheck]* found
    ) nogil


cdef extern from "crc32_strings.h" namespace "primus" nogil:
    cpdef enum class Crc32Kernel "primus::Crc32Kernel":
        kBest
        kTables
        kCarrylessMultiply

    bint Crc32KernelAvailable(Crc32Kernel kernel)
    Crc32Kernel Crc32Resolve(Crc32Kernel kernel)
    int64_t Crc32Strings[Offset](
        const Offset* offsets, int64_t count, const uint8_t* data, int64_t size, uint32_t* crcs, Crc32Kernel kernel
    )
    int64_t Crc32Buckets[Offset](
        const Offset* offsets, int64_t count, const uint8_t* data, int64_t size, uint64_t buckets,
        const uint8_t* validity, int64_t validity_offset, int64_t null_bucket, int64_t* out, Crc32Kernel kernel
    )


cdef class SharedArena(MemoryPool):
    """Allocations land in the file at `path` (first fit, 64-byte aligned), else in `fallback`: when the arena is full
    or past its budget (set_budget; the capacity until then), when /dev/shm cannot back more pages (they are reserved with fallocate in 16 MiB steps before use), or for
    alignments above 64.

    Buffers do not keep their pool alive: keep the arena for as long as anything it allocated may live (in practice,
    the process). It is never unmapped while it still holds allocations.
    """

    cdef ArenaPool* arena
    cdef MemoryPool fallback

    def __init__(self, str path, int64_t capacity, MemoryPool fallback):
        self.fallback = fallback
        self.arena = new ArenaPool(path.encode(), capacity, fallback.pool)
        if self.arena.error().size() > 0:
            message = self.arena.error().decode()
            del self.arena
            self.arena = NULL
            raise OSError(message)
        self.init(self.arena)

    def __dealloc__(self):
        if self.arena != NULL and self.arena.arena_bytes() == 0:
            del self.arena

    def offset_of(self, uintptr_t address):
        """Where an address lies in the file, or -1 when it is not in the arena."""
        return self.arena.OffsetOf(<const uint8_t*>address)

    @property
    def base_address(self):
        return <uintptr_t>self.arena.base()

    @property
    def capacity(self):
        return self.arena.capacity()

    @property
    def arena_bytes(self):
        """Bytes currently allocated in the shared file (rounded up to 64)."""
        return self.arena.arena_bytes()

    @property
    def peak_bytes(self):
        """The most bytes allocated in the shared file at once since reset_peak() (or since it was made)."""
        return self.arena.peak_bytes()

    def reset_peak(self):
        self.arena.ResetPeak()

    @property
    def fallback_allocations(self):
        """Allocations that did not fit and went to the fallback pool."""
        return self.arena.fallback_allocations()

    @property
    def budget(self):
        """The most bytes the shared file may hold at once; allocations past it go to the fallback pool."""
        return self.arena.budget()

    def set_budget(self, int64_t nbytes):
        """Change the budget now (clamped to [0, capacity]); a lower one frees nothing, it refuses new blocks until
        enough is freed. Returns the budget set."""
        return self.arena.SetBudget(nbytes)


def read_columns(NativeFile handle, row_groups, columns, MemoryPool pool):
    """Columns (by name; names the file lacks are skipped) of row groups (all when empty) of the Parquet file behind
    `handle`, every buffer allocated from `pool`. NotImplementedError for a nested column."""
    cdef shared_ptr[CRandomAccessFile] source = handle.get_random_access_file()
    cdef vector[int] groups = row_groups
    cdef vector[string] names = [name.encode() for name in columns]
    cdef CMemoryPool* c_pool = pool.pool
    cdef CResult[shared_ptr[CTable]] result
    with nogil:
        result = ReadColumns(source, groups, names, c_pool)
    return pyarrow_wrap_table(GetResultValue(result))


def read_columns_checked(NativeFile handle, row_groups, columns, checked, MemoryPool pool):
    """read_columns, with the `checked` columns' values looked at right after each column is decoded, while they are in
    cache: (table, [(column index, chunk index, all 0 or 1, all finite as float32), ...]) for their chunks without nulls
    (the others are listed as neither)."""
    cdef shared_ptr[CRandomAccessFile] source = handle.get_random_access_file()
    cdef vector[int] groups = row_groups
    cdef vector[string] names = [name.encode() for name in columns]
    cdef vector[string] check_names = [name.encode() for name in checked]
    cdef CMemoryPool* c_pool = pool.pool
    cdef CResult[shared_ptr[CTable]] result
    cdef vector[ChunkCheck] found
    with nogil:
        result = ReadColumnsChecked(source, groups, names, check_names, c_pool, &found)
    table = pyarrow_wrap_table(GetResultValue(result))
    return table, [(check.column, check.chunk, check.binary, check.finite) for check in found]


def batch_layout(RecordBatch batch, SharedArena arena):
    """The batch's columns as a flat list of integers, or None when a column has children or a dictionary, or a
    buffer lies outside the arena. Per column: length, offset, null count (-1: not computed), number of buffers;
    then per buffer its offset in the arena file and its length, or -1, -1 for an absent one."""
    cdef shared_ptr[CRecordBatch] c_batch = pyarrow_unwrap_batch(batch)
    cdef CBatchColumns* columns = <CBatchColumns*>c_batch.get()
    cdef shared_ptr[CArrayData] data
    cdef CBuffer* buffer
    cdef int64_t offset
    cdef int i
    cdef size_t j
    cdef list layout = []
    for i in range(columns.num_columns()):
        data = columns.column_data(i)
        if data.get().child_data.size() or data.get().dictionary.get() != NULL:
            return None
        layout += [data.get().length, data.get().offset, data.get().null_count, data.get().buffers.size()]
        for j in range(data.get().buffers.size()):
            buffer = data.get().buffers[j].get()
            if buffer == NULL:
                layout += [-1, -1]
                continue
            offset = arena.arena.OffsetOf(buffer.data())
            if offset < 0 or offset + buffer.size() > arena.arena.capacity():
                return None
            layout += [offset, buffer.size()]
    return layout


def rebuild_batch(Schema schema, layout, uintptr_t base, int64_t size, object hold, str where):
    """The batch a layout describes, its buffers laid over [base, base + size) and each keeping `hold` alive.
    ValueError when the layout does not fit the schema or a buffer lies outside the mapping."""
    cdef shared_ptr[CSchema] c_schema = pyarrow_unwrap_schema(schema)
    cdef vector[shared_ptr[CArrayData]] columns
    cdef vector[shared_ptr[CBuffer]] buffers
    cdef shared_ptr[CBuffer] buffer
    cdef Py_ssize_t k = 0, total = len(layout)
    cdef int64_t length = 0, offset, nulls, count, at, extent, rows = 0
    cdef int i
    for i in range(len(schema)):
        if k + 4 > total:
            raise ValueError(f"the layout of a batch in {where} describes {i} columns, the stream's schema {len(schema)}")
        length, offset, nulls, count = layout[k], layout[k + 1], layout[k + 2], layout[k + 3]
        k += 4
        if count < 0 or k + 2 * count > total:
            raise ValueError(f"the layout of column {schema[i].name!r} in {where} is cut short")
        buffers.clear()
        for _ in range(count):
            at, extent = layout[k], layout[k + 1]
            k += 2
            if at < 0:
                buffers.push_back(shared_ptr[CBuffer]())
                continue
            if extent < 0 or at + extent > size:
                raise ValueError(f"column {schema[i].name!r} at [{at}, {at + extent}) lies outside {where}")
            check_status(CPyForeignBuffer.Make(<const uint8_t*>(base + at), extent, hold, &buffer))
            buffers.push_back(buffer)
        columns.push_back(CArrayData.Make(c_schema.get().field(i).get().type(), length, buffers, nulls, offset))
        rows = length
    if k != total:
        raise ValueError(f"the layout of a batch in {where} describes more columns than the stream's schema has")
    return pyarrow_wrap_batch(MakeBatch(c_schema, rows, columns))


CRC32_KERNELS = {"tables": Crc32Kernel.kTables, "carryless-multiply": Crc32Kernel.kCarrylessMultiply}
cdef uint8_t _no_bytes[8]  # what an empty data buffer points at


def crc32_kernels():
    """The CRC-32 kernels this CPU runs, best first ("carryless-multiply" needs x86-64 with PCLMULQDQ)."""
    best = Crc32Resolve(Crc32Kernel.kBest)
    runs = [name for name, kernel in CRC32_KERNELS.items() if Crc32KernelAvailable(kernel)]
    return sorted(runs, key=lambda name: CRC32_KERNELS[name] != best)


def crc32_strings(offsets, const uint8_t[::1] data, out, uint64_t buckets=0, const uint8_t[::1] validity=None,
                  int64_t validity_offset=0, int64_t null_bucket=0, str kernel="best"):
    """zlib.crc32 of each string of an Arrow string array, from its buffers: offsets (int32 or int64, one more than
    out), data (uint8). buckets 0: out (uint32) gets the CRCs; else out (int64) gets crc % buckets, and null_bucket
    where the validity bitmap (uint8, read from bit validity_offset on; None: no nulls) has a 0. kernel: "best", or one
    of crc32_kernels(). Runs without the GIL. ValueError for buffers that do not fit together, or offsets that lie
    outside data or decrease."""
    cdef const int32_t[::1] narrow
    cdef const int64_t[::1] wide
    cdef uint32_t[::1] crcs
    cdef int64_t[::1] picked
    cdef int64_t count = len(out), size = data.shape[0], bad = -1
    cdef const uint8_t* data_at = &data[0] if size else _no_bytes
    cdef const uint8_t* bits = NULL
    cdef Crc32Kernel chosen = Crc32Kernel.kBest
    cdef bint is_wide = offsets.dtype == "int64"
    if kernel != "best":
        if kernel not in CRC32_KERNELS or not Crc32KernelAvailable(CRC32_KERNELS[kernel]):
            raise ValueError(f"kernel {kernel!r} does not run here: choose from {['best', *crc32_kernels()]}")
        chosen = CRC32_KERNELS[kernel]
    if not is_wide and offsets.dtype != "int32":
        raise ValueError(f"offsets must be int32 or int64, not {offsets.dtype}")
    if len(offsets) != count + 1:
        raise ValueError(f"{len(offsets)} offsets for {count} strings: there must be one more")
    if validity is not None and buckets:
        if validity_offset < 0 or validity.shape[0] * 8 < validity_offset + count:
            raise ValueError(f"a validity bitmap of {validity.shape[0]} bytes does not hold bits {validity_offset} to {validity_offset + count}")
        bits = &validity[0] if count else NULL
    if is_wide:
        wide = offsets
    else:
        narrow = offsets
    if count == 0:
        return
    if buckets == 0:
        crcs = out
        with nogil:
            if is_wide:
                bad = Crc32Strings[int64_t](&wide[0], count, data_at, size, &crcs[0], chosen)
            else:
                bad = Crc32Strings[int32_t](&narrow[0], count, data_at, size, &crcs[0], chosen)
    else:
        picked = out
        with nogil:
            if is_wide:
                bad = Crc32Buckets[int64_t](&wide[0], count, data_at, size, buckets, bits, validity_offset, null_bucket, &picked[0], chosen)
            else:
                bad = Crc32Buckets[int32_t](&narrow[0], count, data_at, size, buckets, bits, validity_offset, null_bucket, &picked[0], chosen)
    if bad >= 0:
        raise ValueError(f"the offsets of strings {bad} on lie outside the {size}-byte data buffer or decrease")
