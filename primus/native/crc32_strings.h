// zlib's CRC-32 (the reflected 0xEDB88320 polynomial of zlib, gzip and PNG) of each string of an Arrow string array,
// read from its offsets and data buffers, and its bucket: hash_bucket's native path (primus/datapath/hashing.py).
//
// Two kernels give the same CRCs: slicing-by-8 lookup tables (any CPU), and on x86-64 CPUs with PCLMULQDQ a carry-less
// multiply and a Barrett reduction per 8-byte word, about half the instructions. Either way a string of up to 32 bytes
// is read as the whole words that end where it ends, the bytes before it masked to zeros, so that strings of mixed
// lengths take no length-dependent branch: a register started at 0 is unchanged by leading zero bytes, and zlib's start
// value and final inversion add a term that depends on the length only (the CRC is linear).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PRIMUS_CRC32_CLMUL 1
// Only the carry-less kernel's intrinsics need it; pclmul implies nothing past SSE2, which every x86-64 CPU has, so the
// table kernel compiled under it runs anywhere.
#define PRIMUS_CRC32_TARGET __attribute__((target("pclmul")))
#else
#define PRIMUS_CRC32_CLMUL 0
#define PRIMUS_CRC32_TARGET
#endif

namespace primus {

// Which kernel computes the CRCs: the best this CPU has, or one named (for tests that compare them).
enum class Crc32Kernel : int { kBest = 0, kTables = 1, kCarrylessMultiply = 2 };

namespace crc32_detail {

constexpr int kWindowWords = 4;  // strings up to 32 bytes are read as a window of whole words
constexpr int kWindowBytes = 8 * kWindowWords;
constexpr int64_t kBlock = 256;  // strings per block: one window width and one bounds check per block
// The data of the string this many ahead is asked for before it is read: the hardware prefetchers stop at each 4 KiB
// page, and a column of millions of ids comes from DRAM (twice the speed on 10M ids, the same on a cached 100k).
constexpr int64_t kPrefetchStrings = 128;

struct Tables {
  uint32_t bytes[8][256];            // bytes[k][b]: byte b's share of the register after k more bytes
  uint32_t zeros[kWindowBytes + 1];  // zeros[n]: zlib.crc32(bytes(n)), the start value's term over n bytes
  uint64_t keep[9];                  // keep[j]: a little-endian word's high 8 - j bytes (its j low ones precede the string)
};

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int i = 0; i < 8; ++i) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    t.bytes[0][b] = crc;
  }
  for (int k = 1; k < 8; ++k)
    for (int b = 0; b < 256; ++b) t.bytes[k][b] = (t.bytes[k - 1][b] >> 8) ^ t.bytes[0][t.bytes[k - 1][b] & 0xFF];
  uint32_t crc = 0xFFFFFFFFu;
  for (int n = 0; n <= kWindowBytes; ++n) {
    t.zeros[n] = ~crc;
    crc = t.bytes[0][crc & 0xFF] ^ (crc >> 8);  // one more zero byte
  }
  for (int j = 0; j < 8; ++j) t.keep[j] = ~uint64_t{0} << (8 * j);
  t.keep[8] = 0;
  return t;
}

inline constexpr Tables kTables = MakeTables();

inline uint64_t LoadWord(const uint8_t* at) {  // eight bytes, little-endian, at any alignment
  uint64_t word;
  std::memcpy(&word, at, sizeof(word));
  if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
  return word;
}

// The raw register (no start value, no inversion) after eight more bytes, by slicing-by-8: the register enters at the
// word's first four bytes, and each byte's table advances it by the bytes that follow it in the word.
inline uint32_t TableStep(uint32_t crc, uint64_t word) {
  const auto& t = kTables.bytes;
  word ^= crc;
  return t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^ t[4][(word >> 24) & 0xFF] ^
         t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^ t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
}

// zlib.crc32 of [at, at + length): eight bytes a step, then byte by byte (long strings: one dependent chain, where the
// tables' latency is the shorter).
inline uint32_t Crc32(const uint8_t* at, int64_t length) {
  uint32_t crc = 0xFFFFFFFFu;
  for (; length >= 8; at += 8, length -= 8) crc = TableStep(crc, LoadWord(at));
  for (; length > 0; ++at, --length) crc = kTables.bytes[0][(crc ^ *at) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

struct TableKernel {
  using Register = uint32_t;
  static Register Zero() { return 0; }
  static Register Step(Register crc, const uint8_t* at, uint64_t keep) { return TableStep(crc, LoadWord(at) & keep); }
  static uint32_t Value(Register crc) { return crc; }
};

#if PRIMUS_CRC32_CLMUL
// The register after eight more bytes as one product: with the word (the register xor-ed into its low half) as a
// polynomial N of degree < 64 in the reflected bit order, the register becomes N * x^32 mod P, and Barrett's reduction
// gives that from two 64-bit carry-less products: the quotient q = N + floor(N * U / x^64), where U is
// floor(x^96 / P) less its x^64 term, then the remainder's 32 coefficients from q * (P - x^32), both constants bit-
// reversed (the second shifted left one place, so the remainder lands in the high half). The register stays in an SSE
// register between steps.
struct CarrylessKernel {
  using Register = __m128i;
  PRIMUS_CRC32_TARGET static Register Zero() { return _mm_setzero_si128(); }
  PRIMUS_CRC32_TARGET static Register Step(Register crc, const uint8_t* at, uint64_t keep) {
    const __m128i constants = _mm_set_epi64x(0x1DB710640LL, 0x5A72D812FB808B20LL);  // (P - x^32) << 1, U
    __m128i word = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at));
    word = _mm_xor_si128(_mm_and_si128(word, _mm_cvtsi64_si128(static_cast<int64_t>(keep))), crc);
    const __m128i quotient = _mm_xor_si128(word, _mm_slli_epi64(_mm_clmulepi64_si128(word, constants, 0x00), 1));
    return _mm_srli_si128(_mm_clmulepi64_si128(quotient, constants, 0x10), 8);
  }
  PRIMUS_CRC32_TARGET static uint32_t Value(Register crc) { return static_cast<uint32_t>(_mm_cvtsi128_si32(crc)); }
};
#endif

// What to keep of the word that starts `back` bytes before a string of `length` bytes ends.
inline uint64_t Keep(int64_t back, int64_t length) { return kTables.keep[std::clamp<int64_t>(back - length, 0, 8)]; }

// zlib.crc32 of a string of at most 8 * kWords bytes ending at `end`, read as the kWords words that end there, the
// bytes before the string masked to zeros. The window must lie in the buffer.
template <typename Kernel, int kWords, int... kWord>
PRIMUS_CRC32_TARGET inline uint32_t Crc32Window(const uint8_t* end, int64_t length, std::integer_sequence<int, kWord...>) {
  typename Kernel::Register crc = Kernel::Zero();
  // word k (0 first) starts 8 * (kWords - k) bytes before the end; unrolled: no loop, no branch
  ((crc = Kernel::Step(crc, end - 8 * (kWords - kWord), Keep(8 * (kWords - kWord), length))), ...);
  return Kernel::Value(crc) ^ kTables.zeros[length];
}

template <typename Kernel, int kWords>
PRIMUS_CRC32_TARGET inline uint32_t Crc32Window(const uint8_t* end, int64_t length) {
  return Crc32Window<Kernel, kWords>(end, length, std::make_integer_sequence<int, kWords>{});
}

template <typename Kernel>
PRIMUS_CRC32_TARGET inline uint32_t Crc32AnyWindow(const uint8_t* end, int64_t length) {
  switch ((length + 7) / 8) {
    case 0: return 0;
    case 1: return Crc32Window<Kernel, 1>(end, length);
    case 2: return Crc32Window<Kernel, 2>(end, length);
    case 3: return Crc32Window<Kernel, 3>(end, length);
    default: return Crc32Window<Kernel, 4>(end, length);
  }
}

// A block of strings of at most 8 * kWords bytes each, their windows in the buffer; remaining: the strings from the
// block's first to the array's end (how far ahead its offsets may be read).
template <typename Kernel, int kWords, typename Offset>
PRIMUS_CRC32_TARGET void WindowBlock(const Offset* offsets, int64_t count, const uint8_t* data, uint32_t* crcs,
                                     int64_t remaining) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = offsets[i], end = offsets[i + 1];
    __builtin_prefetch(data + offsets[std::min(i + kPrefetchStrings, remaining)]);
    if constexpr (kWords == 0) {
      crcs[i] = 0;  // all empty: zlib.crc32(b"") is 0
    } else {
      crcs[i] = Crc32Window<Kernel, kWords>(data + end, end - start);
    }
  }
}

// The CRC-32s of one block of strings; false (nothing written) when an offset lies outside [0, size] or before the
// one ahead of it: a malformed array is refused, never read out of bounds.
template <typename Kernel, typename Offset>
PRIMUS_CRC32_TARGET bool Block(const Offset* offsets, int64_t count, const uint8_t* data, int64_t size, uint32_t* crcs,
                               int64_t remaining) {
  bool bad = offsets[0] < 0;
  int64_t longest = 0;
  for (int64_t i = 0; i < count; ++i) {  // the bounds and the longest string, in one branch-free pass
    const int64_t start = offsets[i], end = offsets[i + 1];
    bad |= (end < start) | (end > size);
    longest = std::max(longest, end - start);
  }
  if (bad) return false;
  const int64_t words = (longest + 7) / 8;
  if (words <= kWindowWords && offsets[1] >= 8 * words) {  // the first window lies in the buffer, so all do
    switch (words) {
      case 0: WindowBlock<Kernel, 0>(offsets, count, data, crcs, remaining); return true;
      case 1: WindowBlock<Kernel, 1>(offsets, count, data, crcs, remaining); return true;
      case 2: WindowBlock<Kernel, 2>(offsets, count, data, crcs, remaining); return true;
      case 3: WindowBlock<Kernel, 3>(offsets, count, data, crcs, remaining); return true;
      default: WindowBlock<Kernel, 4>(offsets, count, data, crcs, remaining); return true;
    }
  }
  for (int64_t i = 0; i < count; ++i) {  // a long string in the block, or the buffer's first bytes: one by one
    const int64_t start = offsets[i], end = offsets[i + 1], length = end - start;
    const bool window = length <= kWindowBytes && end >= 8 * ((length + 7) / 8);
    crcs[i] = window ? Crc32AnyWindow<Kernel>(data + end, length) : Crc32(data + start, length);
  }
  return true;
}

// crc % divisor by multiplying (Lemire, Kaser and Kurz, "Faster remainder by direct computation", exact for 32-bit
// values and divisors): a division per string would cost as much as its CRC.
struct Remainder {
  uint64_t divisor;
  uint64_t inverse;  // 2**64 / divisor, rounded up
  explicit Remainder(uint64_t d) : divisor(d), inverse(~uint64_t{0} / d + 1) {}
  uint64_t operator()(uint32_t value) const {
#if defined(__SIZEOF_INT128__)
    return static_cast<uint64_t>((static_cast<unsigned __int128>(inverse * value) * divisor) >> 64);
#else
    return value % divisor;
#endif
  }
};

// One block's CRCs into crcs (kBlock of them at most), by the kernel chosen; false as Block.
template <typename Offset>
bool BlockBy(Crc32Kernel kernel, const Offset* offsets, int64_t count, const uint8_t* data, int64_t size, uint32_t* crcs,
             int64_t remaining) {
#if PRIMUS_CRC32_CLMUL
  if (kernel == Crc32Kernel::kCarrylessMultiply) return Block<CarrylessKernel>(offsets, count, data, size, crcs, remaining);
#endif
  return Block<TableKernel>(offsets, count, data, size, crcs, remaining);
}

}  // namespace crc32_detail

// Whether this CPU can run the kernel (kBest: always).
inline bool Crc32KernelAvailable(Crc32Kernel kernel) {
#if PRIMUS_CRC32_CLMUL
  static const bool carryless = [] {
    __builtin_cpu_init();  // a no-op once libgcc's constructor has run; needed if asked before it
    return __builtin_cpu_supports("pclmul") != 0;
  }();
  if (kernel == Crc32Kernel::kCarrylessMultiply) return carryless;
#else
  if (kernel == Crc32Kernel::kCarrylessMultiply) return false;
#endif
  return true;
}

// The kernel to run: the one named where the CPU can run it, else (and for kBest) the best it can.
inline Crc32Kernel Crc32Resolve(Crc32Kernel kernel) {
  if (kernel != Crc32Kernel::kBest && Crc32KernelAvailable(kernel)) return kernel;
  return Crc32KernelAvailable(Crc32Kernel::kCarrylessMultiply) ? Crc32Kernel::kCarrylessMultiply : Crc32Kernel::kTables;
}

// zlib.crc32 of each of the `count` strings [offsets[i], offsets[i + 1]) of data (size bytes) into crcs, by the
// kernel Crc32Resolve picks. Returns -1, or the first string of the block whose offsets are out of bounds or decrease (crcs is
// then incomplete).
template <typename Offset>
int64_t Crc32Strings(const Offset* offsets, int64_t count, const uint8_t* data, int64_t size, uint32_t* crcs,
                     Crc32Kernel kernel) {
  kernel = Crc32Resolve(kernel);
  for (int64_t first = 0; first < count; first += crc32_detail::kBlock) {
    const int64_t n = std::min(crc32_detail::kBlock, count - first);
    if (!crc32_detail::BlockBy(kernel, offsets + first, n, data, size, crcs + first, count - first)) return first;
  }
  return -1;
}

// Each string's bucket, crc32 % buckets (the CRC itself when buckets exceeds it; buckets > 0), into out; a slot whose
// bit in the validity bitmap (read from bit validity_offset on; nullptr: no nulls) is 0 gets null_bucket. Returns as
// Crc32Strings does.
template <typename Offset>
int64_t Crc32Buckets(const Offset* offsets, int64_t count, const uint8_t* data, int64_t size, uint64_t buckets,
                     const uint8_t* validity, int64_t validity_offset, int64_t null_bucket, int64_t* out,
                     Crc32Kernel kernel) {
  kernel = Crc32Resolve(kernel);
  const bool whole = buckets > 0xFFFFFFFFu;
  const crc32_detail::Remainder remainder(whole || buckets == 0 ? 1 : buckets);
  uint32_t crcs[crc32_detail::kBlock];
  for (int64_t first = 0; first < count; first += crc32_detail::kBlock) {
    const int64_t n = std::min(crc32_detail::kBlock, count - first);
    if (!crc32_detail::BlockBy(kernel, offsets + first, n, data, size, crcs, count - first)) return first;
    int64_t* picked = out + first;
    for (int64_t i = 0; i < n; ++i) picked[i] = static_cast<int64_t>(whole ? crcs[i] : remainder(crcs[i]));
    if (validity != nullptr) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t bit = validity_offset + first + i;
        picked[i] = (validity[bit >> 3] >> (bit & 7)) & 1 ? picked[i] : null_bucket;
      }
    }
  }
  return -1;
}

}  // namespace primus
