# cython: language_level=3
# distutils: language = c++
"""A pyarrow MemoryPool backed by one shared-memory file: what it allocates, another process can map without a copy."""

from libc.stdint cimport int64_t, uint8_t, uintptr_t
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyarrow.includes.common cimport CResult, GetResultValue
from pyarrow.includes.libarrow cimport CMemoryPool, CRandomAccessFile, CTable
from pyarrow.lib cimport MemoryPool, NativeFile, pyarrow_wrap_table


cdef extern from "arena_pool.h" namespace "primus":
    cdef cppclass ArenaPool(CMemoryPool):
        ArenaPool(const string& path, int64_t capacity, CMemoryPool* fallback)
        const string& error()
        uint8_t* base()
        int64_t capacity()
        int64_t arena_bytes()
        int64_t fallback_allocations()
        int64_t OffsetOf(const uint8_t* address)

    CResult[shared_ptr[CTable]] ReadColumns(
        const shared_ptr[CRandomAccessFile]& file, vector[int] row_groups, const vector[string]& names, CMemoryPool* pool
    ) nogil


cdef class SharedArena(MemoryPool):
    """Allocations land in the file at `path` (first fit, 64-byte aligned), else in `fallback`: when the arena is full,
    when /dev/shm cannot back more pages (they are reserved with fallocate in 16 MiB steps before use), or for
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
    def fallback_allocations(self):
        """Allocations that did not fit and went to the fallback pool."""
        return self.arena.fallback_allocations()


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
