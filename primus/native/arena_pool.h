// An arrow::MemoryPool whose memory is one shared file (in /dev/shm), so another process can map what it allocates.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include <arrow/array.h>
#include <arrow/io/interfaces.h>
#include <arrow/memory_pool.h>
#include <arrow/status.h>
#include <arrow/table.h>
#include <parquet/arrow/reader.h>
#include <parquet/properties.h>

#include <memory>
#include <type_traits>
#include <vector>

namespace primus {

constexpr int64_t kArenaAlignment = 64;

// First fit over a free list kept by offset and coalesced on free. Requests it cannot place (the arena is full, past
// its budget, or an alignment above 64) go to the fallback pool, so a full arena means "copy it", never an allocation
// failure. The budget (default: the capacity) can change at any time: the executor's memory limit is resized in place,
// and a lower budget only refuses new blocks; what is allocated stays where it is until it is freed.
class ArenaPool : public arrow::MemoryPool {
 public:
  ArenaPool(const std::string& path, int64_t capacity, arrow::MemoryPool* fallback) : path_(path), fallback_(fallback) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) { error_ = std::string("open ") + path + ": " + std::strerror(errno); return; }
    if (::ftruncate(fd, capacity) != 0) { error_ = std::string("ftruncate: ") + std::strerror(errno); ::close(fd); return; }
    void* base = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (base == MAP_FAILED) { error_ = std::string("mmap: ") + std::strerror(errno); ::close(fd); return; }
    fd_ = fd;
    base_ = static_cast<uint8_t*>(base);
    capacity_ = capacity;
    budget_ = capacity;
    free_[0] = capacity;
  }

  ~ArenaPool() override {
    if (base_ != nullptr) ::munmap(base_, capacity_);
    if (fd_ >= 0) ::close(fd_);
  }

  const std::string& error() const { return error_; }
  uint8_t* base() const { return base_; }
  int64_t capacity() const { return capacity_; }
  int64_t arena_bytes() const { return arena_bytes_.load(); }
  int64_t peak_bytes() const { return peak_bytes_.load(); }
  void ResetPeak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_bytes_ = arena_bytes_.load();
  }
  int64_t fallback_allocations() const { return fallback_allocations_.load(); }
  int64_t budget() const { return budget_.load(); }
  // The most bytes the arena may hold, between 0 and the capacity; returns what was set.
  int64_t SetBudget(int64_t bytes) {
    budget_ = std::clamp<int64_t>(bytes, 0, capacity_);
    return budget_.load();
  }

  int64_t OffsetOf(const uint8_t* p) const {
    return (base_ != nullptr && p >= base_ && p < base_ + capacity_) ? p - base_ : -1;
  }

  arrow::Status Allocate(int64_t size, int64_t alignment, uint8_t** out) override {
    if (size > 0 && alignment <= kArenaAlignment && Take(size, out)) {
      total_bytes_ += size;
      num_allocations_ += 1;
      return arrow::Status::OK();
    }
    if (size > 0) fallback_allocations_ += 1;
    return fallback_->Allocate(size, alignment, out);
  }

  arrow::Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t** ptr) override {
    if (OffsetOf(*ptr) < 0) {
      // Arrow starts most buffers empty (the fallback's zero-size area) and grows them: move them in on growth.
      uint8_t* moved = nullptr;
      if (new_size > 0 && alignment <= kArenaAlignment && Take(new_size, &moved)) {
        std::memcpy(moved, *ptr, static_cast<size_t>(std::min(old_size, new_size)));
        fallback_->Free(*ptr, old_size, alignment);
        total_bytes_ += new_size;
        num_allocations_ += 1;
        *ptr = moved;
        return arrow::Status::OK();
      }
      if (new_size > 0) fallback_allocations_ += 1;
      return fallback_->Reallocate(old_size, new_size, alignment, ptr);
    }
    if (Resize(OffsetOf(*ptr), old_size, new_size)) return arrow::Status::OK();
    uint8_t* moved = nullptr;
    ARROW_RETURN_NOT_OK(Allocate(new_size, alignment, &moved));
    std::memcpy(moved, *ptr, static_cast<size_t>(std::min(old_size, new_size)));
    Free(*ptr, old_size, alignment);
    *ptr = moved;
    return arrow::Status::OK();
  }

  void Free(uint8_t* buffer, int64_t size, int64_t alignment) override {
    int64_t offset = OffsetOf(buffer);
    if (offset < 0) return fallback_->Free(buffer, size, alignment);
    int64_t length = Round(size);
    std::lock_guard<std::mutex> lock(mu_);
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + length == next->first) {  // merge with the block after
      length += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {  // merge into the block before
        prev->second += length;
        arena_bytes_ -= Round(size);
        return;
      }
    }
    free_[offset] = length;
    arena_bytes_ -= Round(size);
  }

  int64_t bytes_allocated() const override { return arena_bytes_.load() + fallback_->bytes_allocated(); }
  int64_t total_bytes_allocated() const override { return total_bytes_.load() + fallback_->total_bytes_allocated(); }
  int64_t num_allocations() const override { return num_allocations_.load() + fallback_->num_allocations(); }
  std::string backend_name() const override { return "primus-arena"; }

 private:
  static int64_t Round(int64_t size) { return (size + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

  // Grow or shrink the block at `offset` where it stands: growing takes the front of the free block right after it
  // (Arrow's column readers grow their buffers step by step, and copying on every step cost ~9% of a read).
  bool Resize(int64_t offset, int64_t old_size, int64_t new_size) {
    int64_t old_length = Round(old_size), new_length = Round(new_size);
    std::lock_guard<std::mutex> lock(mu_);
    if (new_length == old_length) return true;
    int64_t end = offset + old_length;
    if (new_length < old_length) {  // give the tail back, merging it with a free block right after
      int64_t tail = old_length - new_length;
      auto next = free_.find(end);
      if (next != free_.end()) {
        tail += next->second;
        free_.erase(next);
      }
      free_[offset + new_length] = tail;
      arena_bytes_ -= old_length - new_length;
      return true;
    }
    auto next = free_.find(end);
    return next != free_.end() && Carve(next, new_length - old_length);
  }

  // Take `length` bytes from the front of a free block (mu_ held); false when it is too small, unbacked, or would
  // take the arena past its budget.
  bool Carve(std::map<int64_t, int64_t>::iterator block, int64_t length) {
    int64_t offset = block->first;
    if (block->second < length || arena_bytes_.load() + length > budget_.load()) return false;
    if (offset + length > reserved_ && !Grow(offset + length)) return false;
    int64_t rest = block->second - length;
    free_.erase(block);
    if (rest > 0) free_[offset + length] = rest;
    arena_bytes_ += length;
    if (arena_bytes_ > peak_bytes_) peak_bytes_ = arena_bytes_.load();
    return true;
  }

  bool Take(int64_t size, uint8_t** out) {
    int64_t length = Round(size);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < length) continue;
      int64_t offset = it->first;
      if (!Carve(it, length)) return false;  // past the budget, or the first block that fits lies beyond what /dev/shm can back
      *out = base_ + offset;
      return true;
    }
    return false;
  }

  // Commit pages up to `end` (in chunks) with fallocate before handing them out: writing to a page of a shared
  // mapping that /dev/shm cannot back is a SIGBUS, a failed fallocate is just "use the fallback pool".
  bool Grow(int64_t end) {
    int64_t target = std::min(capacity_, (end + kGrowBytes - 1) / kGrowBytes * kGrowBytes);
    if (::posix_fallocate(fd_, reserved_, target - reserved_) != 0) return false;
    reserved_ = target;
    return true;
  }

  static constexpr int64_t kGrowBytes = 16 << 20;
  int fd_ = -1;
  std::string path_;
  std::string error_;
  arrow::MemoryPool* fallback_;
  uint8_t* base_ = nullptr;
  int64_t capacity_ = 0;
  int64_t reserved_ = 0;
  std::mutex mu_;
  std::map<int64_t, int64_t> free_;  // offset -> length
  std::atomic<int64_t> arena_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};  // the most arena_bytes_ reached since the last ResetPeak
  std::atomic<int64_t> budget_{0};      // arena_bytes_ never goes past it (it may sit above it after a lowering)
  std::atomic<int64_t> total_bytes_{0};
  std::atomic<int64_t> num_allocations_{0};
  std::atomic<int64_t> fallback_allocations_{0};
};

// Open a Parquet file with `pool` for every allocation, the column readers' included (pyarrow's ParquetFile gives its
// pool only to the Arrow side, so decoded values would land in the default pool), and find the leaves of the named
// columns. Names the file lacks are skipped (schema evolution fills them in later); a nested column is NotImplemented,
// and the caller reads it the usual way. An empty `row_groups` becomes all of them.
inline arrow::Status OpenColumns(const std::shared_ptr<arrow::io::RandomAccessFile>& file, const std::vector<std::string>& names,
                                 arrow::MemoryPool* pool, std::unique_ptr<parquet::arrow::FileReader>* reader, std::vector<int>* leaves,
                                 std::vector<std::string>* found, std::vector<int>* row_groups, bool pre_buffer = true) {
  parquet::ReaderProperties properties(pool);
  parquet::ArrowReaderProperties arrow_properties;
  arrow_properties.set_use_threads(false);
  arrow_properties.set_pre_buffer(pre_buffer);
  parquet::arrow::FileReaderBuilder builder;
  ARROW_RETURN_NOT_OK(builder.Open(file, properties));
  ARROW_ASSIGN_OR_RAISE(*reader, builder.memory_pool(pool)->properties(arrow_properties)->Build());
  const parquet::SchemaDescriptor* schema = (*reader)->parquet_reader()->metadata()->schema();
  for (const auto& name : names) {
    int leaf = schema->ColumnIndex(name);
    if (leaf >= 0 && schema->Column(leaf)->path()->ToDotString() == name) {
      leaves->push_back(leaf);
      found->push_back(name);
      continue;
    }
    for (int field = 0; field < schema->group_node()->field_count(); ++field) {
      if (schema->group_node()->field(field)->name() == name) {
        return arrow::Status::NotImplemented("column ", name, " is nested");
      }
    }
  }
  if (row_groups->empty()) {
    for (int group = 0; group < (*reader)->num_row_groups(); ++group) row_groups->push_back(group);
  }
  return arrow::Status::OK();
}

// Read columns (by name) of row groups (all when empty) of a Parquet file, every buffer from `pool` (OpenColumns).
inline arrow::Result<std::shared_ptr<arrow::Table>> ReadColumns(const std::shared_ptr<arrow::io::RandomAccessFile>& file,
                                                                std::vector<int> row_groups,
                                                                const std::vector<std::string>& names, arrow::MemoryPool* pool) {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::vector<int> leaves;
  std::vector<std::string> found;
  ARROW_RETURN_NOT_OK(OpenColumns(file, names, pool, &reader, &leaves, &found, &row_groups));
  return reader->ReadRowGroups(row_groups, leaves);
}

// What a read found in one chunk of a column it was asked to check. Only chunks without nulls are checked; the
// others, and chunks of a type other than an integer, float32 or float64, are reported as neither.
struct ChunkCheck {
  int column = 0;  // in the table read
  int chunk = 0;
  bool binary = false;  // every value is 0 or 1
  bool finite = false;  // every value is finite as a float32: no NaN or infinity, and no float64 beyond float32's range
};

namespace checks {

// The values go in blocks of a fixed count, so that the compiler vectorises the inner loops at -O2 (and stops at the
// first block with a bad value); the rest one by one. Each kernel is compiled twice on x86-64 with GCC, for AVX2 and
// for the baseline, and the loader picks the one the CPU runs: in cache, AVX2 checks about 1.5 times as fast.
constexpr int64_t kBlock = 256;

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define PRIMUS_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PRIMUS_VECTOR_CLONES
#endif

// A value is 0 or 1 exactly when no bit above the lowest is set (as unsigned, a negative one has the top bit).
template <typename Unsigned>
__attribute__((always_inline)) inline bool OrIsBinary(const Unsigned* values, int64_t count) {
  Unsigned bits = 0;
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) bits |= values[i + j];
    if (bits > 1) return false;
  }
  for (; i < count; ++i) bits |= values[i];
  return bits <= 1;
}

PRIMUS_VECTOR_CLONES static bool AllBinary8(const uint8_t* values, int64_t count) { return OrIsBinary(values, count); }
PRIMUS_VECTOR_CLONES static bool AllBinary16(const uint16_t* values, int64_t count) { return OrIsBinary(values, count); }
PRIMUS_VECTOR_CLONES static bool AllBinary32(const uint32_t* values, int64_t count) { return OrIsBinary(values, count); }
PRIMUS_VECTOR_CLONES static bool AllBinary64(const uint64_t* values, int64_t count) { return OrIsBinary(values, count); }

template <typename T>
bool AllBinaryInteger(const T* values, int64_t count) {
  static_assert(std::is_integral_v<T>);
  if constexpr (sizeof(T) == 1) return AllBinary8(reinterpret_cast<const uint8_t*>(values), count);
  if constexpr (sizeof(T) == 2) return AllBinary16(reinterpret_cast<const uint16_t*>(values), count);
  if constexpr (sizeof(T) == 4) return AllBinary32(reinterpret_cast<const uint32_t*>(values), count);
  if constexpr (sizeof(T) == 8) return AllBinary64(reinterpret_cast<const uint64_t*>(values), count);
}

// A float32 is finite when its exponent bits are not all ones.
PRIMUS_VECTOR_CLONES static bool AllFiniteFloat32(const float* values, int64_t count) {
  const auto* bits = reinterpret_cast<const uint32_t*>(values);
  uint32_t bad = 0;
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) bad |= static_cast<uint32_t>((bits[i + j] & 0x7f800000u) == 0x7f800000u);
    if (bad) return false;
  }
  for (; i < count; ++i) bad |= static_cast<uint32_t>((bits[i] & 0x7f800000u) == 0x7f800000u);
  return bad == 0;
}

// As float32: a NaN fails both comparisons, an infinity or a value past float32's range one of them.
static bool AllFiniteAsFloat32(const double* values, int64_t count) {
  constexpr double kMax = std::numeric_limits<float>::max();
  uint32_t bad = 0;
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) bad |= static_cast<uint32_t>(!(values[i + j] <= kMax && values[i + j] >= -kMax));
    if (bad) return false;
  }
  for (; i < count; ++i) bad |= static_cast<uint32_t>(!(values[i] <= kMax && values[i] >= -kMax));
  return bad == 0;
}

// Asked of every float column, a dense feature's included: it stops at the first block with another value than 0 or 1.
template <typename F>
bool AllBinaryFloat(const F* values, int64_t count) {
  uint32_t bad = 0;
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) bad |= static_cast<uint32_t>(values[i + j] != F(0) && values[i + j] != F(1));
    if (bad) return false;
  }
  for (; i < count; ++i) bad |= static_cast<uint32_t>(values[i] != F(0) && values[i] != F(1));
  return bad == 0;
}

template <typename ArrowType>
const typename ArrowType::c_type* Values(const arrow::Array& chunk) {
  return static_cast<const arrow::NumericArray<ArrowType>&>(chunk).raw_values();
}

inline ChunkCheck Check(const arrow::Array& chunk, int column, int index) {
  ChunkCheck check;
  check.column = column;
  check.chunk = index;
  if (chunk.null_count() != 0) return check;
  const int64_t n = chunk.length();
  switch (chunk.type_id()) {
    case arrow::Type::INT8: check.binary = AllBinaryInteger(Values<arrow::Int8Type>(chunk), n); check.finite = true; break;
    case arrow::Type::INT16: check.binary = AllBinaryInteger(Values<arrow::Int16Type>(chunk), n); check.finite = true; break;
    case arrow::Type::INT32: check.binary = AllBinaryInteger(Values<arrow::Int32Type>(chunk), n); check.finite = true; break;
    case arrow::Type::INT64: check.binary = AllBinaryInteger(Values<arrow::Int64Type>(chunk), n); check.finite = true; break;
    case arrow::Type::UINT8: check.binary = AllBinaryInteger(Values<arrow::UInt8Type>(chunk), n); check.finite = true; break;
    case arrow::Type::UINT16: check.binary = AllBinaryInteger(Values<arrow::UInt16Type>(chunk), n); check.finite = true; break;
    case arrow::Type::UINT32: check.binary = AllBinaryInteger(Values<arrow::UInt32Type>(chunk), n); check.finite = true; break;
    case arrow::Type::UINT64: check.binary = AllBinaryInteger(Values<arrow::UInt64Type>(chunk), n); check.finite = true; break;
    case arrow::Type::FLOAT:
      check.finite = AllFiniteFloat32(Values<arrow::FloatType>(chunk), n);
      check.binary = check.finite && AllBinaryFloat(Values<arrow::FloatType>(chunk), n);
      break;
    case arrow::Type::DOUBLE:
      check.finite = AllFiniteAsFloat32(Values<arrow::DoubleType>(chunk), n);
      check.binary = check.finite && AllBinaryFloat(Values<arrow::DoubleType>(chunk), n);
      break;
    default:
      break;
  }
  return check;
}

}  // namespace checks

// ReadColumns, one column at a time, with the columns named in `checked` checked right after each is decoded, while
// its values are still in cache (a check later, in Python, reads them back from memory): per chunk, a ChunkCheck.
inline arrow::Result<std::shared_ptr<arrow::Table>> ReadColumnsChecked(const std::shared_ptr<arrow::io::RandomAccessFile>& file,
                                                                       std::vector<int> row_groups, const std::vector<std::string>& names,
                                                                       const std::vector<std::string>& checked, arrow::MemoryPool* pool,
                                                                       std::vector<ChunkCheck>* found_checks) {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::vector<int> leaves;
  std::vector<std::string> found;
  ARROW_RETURN_NOT_OK(OpenColumns(file, names, pool, &reader, &leaves, &found, &row_groups, /*pre_buffer=*/false));
  if (leaves.empty()) return reader->ReadRowGroups(row_groups, leaves);
  // Buffer every column's chunks at once, as one ReadRowGroups call would: a read per column would fetch each
  // column's bytes on its own (on Arrow's I/O threads), which costs more than the checks save.
  try {
    parquet::ArrowReaderProperties defaults;
    reader->parquet_reader()->PreBuffer(row_groups, leaves, defaults.io_context(), defaults.cache_options());
  } catch (const std::exception& error) {
    return arrow::Status::IOError("buffering the column chunks: ", error.what());
  }
  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::ChunkedArray>> columns;
  std::shared_ptr<const arrow::KeyValueMetadata> metadata;
  int64_t rows = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    ARROW_ASSIGN_OR_RAISE(auto one, reader->ReadRowGroups(row_groups, {leaves[i]}));
    fields.push_back(one->schema()->field(0));
    columns.push_back(one->column(0));
    metadata = one->schema()->metadata();
    rows = one->num_rows();
    if (std::find(checked.begin(), checked.end(), found[i]) == checked.end()) continue;
    const auto& chunks = one->column(0)->chunks();
    for (size_t j = 0; j < chunks.size(); ++j) found_checks->push_back(checks::Check(*chunks[j], static_cast<int>(i), static_cast<int>(j)));
  }
  return arrow::Table::Make(arrow::schema(fields, metadata), columns, rows);
}

}  // namespace primus
