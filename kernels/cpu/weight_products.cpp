// Weight products for the CPU: y[M, N] = x[M, K] (fp32) @ W[N, K]^T with W stored
// - as fp32 or bf16, widened to fp32 a vector at a time in registers and accumulated in fp32 (bf16 activations
//   against bf16 weights: exact bf16 dot products where the CPU has them), or
// - as int8 (a scale per block of 32 values of a row, llama.cpp's Q8_0), or as 4- or 6-bit values with a scale and
//   a minimum per block, themselves 8-bit multiples of steps per chunk of 512 values (see AffineRows; llama.cpp's
//   Q4_K and Q6_K keep theirs per super-block), multiplied in integers against x quantized to int8 per block (see
//   integer_product).
// A decode step reads every weight once per token, so these products are written to stream W at the memory's
// speed:
// - float W is stored in tiles of TILE_ROWS rows, each tile's rows interleaved LANES values at a time, so that a
//   tile is read as one sequential stream (rows read side by side from a plain row-major matrix are TILE_ROWS
//   short streams, which the hardware prefetcher follows at about half the speed); integer W is row-major, a row
//   being one stream already at the integer products' speed;
// - each weight is read once per call whatever M is: a tile or row stays in cache while every input row passes
//   over it;
// - threads split W by tiles or rows (at::parallel_for, torch's own thread pool).
// kernels/reference/weight_products.py holds the layouts' torch reference. Written with GCC/Clang vector
// extensions, and intrinsics where compilers do not find the instruction (widening, integer dot products), so
// one source compiles to AVX2, AVX-512 or NEON for the CPU it is built on (-march=native / -mcpu=native).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "vectors.h"

namespace {

using sqlscout::f32v;
using sqlscout::i32v;
using sqlscout::LANES;
using sqlscout::load;
using sqlscout::sum;

constexpr int64_t TILE_ROWS = 4;

// Tiles a thread takes at least, so that small matrices do not pay for waking threads.
constexpr int64_t GRAIN_TILES = 16;

// Through c10::Half rather than _Float16, which clang before 15 has on x86 only with AVX512-FP16.
inline float half_to_float(uint16_t bits) { return float(c10::Half(bits, c10::Half::from_bits())); }

SQLSCOUT_INLINE f32v to_floats(i32v ints) { return __builtin_convertvector(ints, f32v); }

// A tiled matrix of one element type: vector(tile, chunk, r) is the LANES values of row r of the tile at
// k = chunk * LANES; scale(n) multiplies row n's finished dot product.
// half(tile, chunk, r, h): half h of vector(tile, chunk, r), 8 values, where AVX2 holds a vector in two registers.
template <class Element>
struct FloatTiles {
  const Element* data;
  int64_t K;
  const Element* at(int64_t tile, int64_t chunk, int64_t r) const {
    return data + (tile * K + chunk * LANES) * TILE_ROWS + r * LANES;
  }
  f32v vector(int64_t tile, int64_t chunk, int64_t r) const { return sqlscout::widen(at(tile, chunk, r)); }
#if defined(__AVX2__)
  __m256 half(int64_t tile, int64_t chunk, int64_t r, int h) const {
    return sqlscout::widen_half(at(tile, chunk, r) + 8 * h);
  }
#endif
  float scale(int64_t) const { return 1.0f; }
};
using Fp32Tiles = FloatTiles<float>;
using Bf16Tiles = FloatTiles<uint16_t>;

#if defined(__AVX2__) && !defined(__AVX512F__)
// AVX2: the generic tile below keeps its 64-byte accumulators on the stack, copied eight bytes at a time each step
// (GCC splits vectors wider than the registers through memory). Here each accumulator is two registers, each lane
// summing the same products in the same order, so the results are the generic ones; TILE_ROWS * 2 of them leave
// registers for one row of x at a time.
constexpr int FLOAT_ROWS_OF_X = 1;

template <int rm, class Tiles>
inline void float_tile(const Tiles& w, int64_t tile, const float* x, int64_t m0, int64_t K, float* y, int64_t N) {
  __m256 acc[TILE_ROWS][rm][2];
  for (int r = 0; r < TILE_ROWS; ++r)
    for (int m = 0; m < rm; ++m) acc[r][m][0] = acc[r][m][1] = _mm256_setzero_ps();
  for (int64_t chunk = 0; chunk < K / LANES; ++chunk) {
    for (int h = 0; h < 2; ++h) {
      __m256 xs[rm];
      for (int m = 0; m < rm; ++m) xs[m] = _mm256_loadu_ps(x + (m0 + m) * K + chunk * LANES + 8 * h);
      for (int r = 0; r < TILE_ROWS; ++r) {
        const __m256 weights = w.half(tile, chunk, r, h);
        for (int m = 0; m < rm; ++m) acc[r][m][h] = _mm256_fmadd_ps(weights, xs[m], acc[r][m][h]);
      }
    }
  }
  for (int r = 0; r < TILE_ROWS; ++r) {
    int64_t n = tile * TILE_ROWS + r;
    if (n >= N) break;  // the last tile's padding rows
    for (int m = 0; m < rm; ++m) y[(m0 + m) * N + n] = sqlscout::sum_halves(acc[r][m][0], acc[r][m][1]) * w.scale(n);
  }
}
#else
// Rows of x per pass over a tile: TILE_ROWS * rm vector accumulators must fit the registers beside the
// weights' and inputs' vectors.
constexpr int FLOAT_ROWS_OF_X = 4;

template <int rm, class Tiles>
inline void float_tile(const Tiles& w, int64_t tile, const float* x, int64_t m0, int64_t K, float* y, int64_t N) {
  f32v acc[TILE_ROWS][rm] = {};
  for (int64_t chunk = 0; chunk < K / LANES; ++chunk) {
    f32v xs[rm];
    for (int m = 0; m < rm; ++m) xs[m] = load<f32v>(x + (m0 + m) * K + chunk * LANES);
    for (int r = 0; r < TILE_ROWS; ++r) {
      f32v weights = w.vector(tile, chunk, r);
      for (int m = 0; m < rm; ++m) acc[r][m] += weights * xs[m];
    }
  }
  for (int r = 0; r < TILE_ROWS; ++r) {
    int64_t n = tile * TILE_ROWS + r;
    if (n >= N) break;  // the last tile's padding rows
    for (int m = 0; m < rm; ++m) y[(m0 + m) * N + n] = sum(acc[r][m]) * w.scale(n);
  }
}
#endif

// bf16 weights times bf16 activations, on CPUs with bf16 dot products (AVX512_BF16): a tile's rows 2p and 2p + 1
// lie side by side (LANES values each), so one 512-bit load takes both and one instruction multiplies 32 pairs
// into fp32, against x's LANES values broadcast to both halves: a sixth of the instructions of widening the
// weights, which keeps a pass of up to BF16_ROWS_OF_X rows of x (a verify pass of drafted tokens) near the cost
// of one. Each half sums its lanes as a 256-bit dot product would. Elsewhere bf16_dot_linear widens the
// activations once and takes the fp32 path.
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
constexpr int BF16_ROWS_OF_X = 8;

template <int rm>
inline void bf16_dot_tile(const uint16_t* tiles, int64_t tile, const uint16_t* x, int64_t m0, int64_t K,
                          float* y, int64_t N) {
  constexpr int PAIRS = TILE_ROWS / 2;
  __m512 acc[PAIRS][rm];
  for (int p = 0; p < PAIRS; ++p)
    for (int m = 0; m < rm; ++m) acc[p][m] = _mm512_setzero_ps();
  for (int64_t chunk = 0; chunk < K / LANES; ++chunk) {
    __m512bh xs[rm];
    for (int m = 0; m < rm; ++m)
      xs[m] = (__m512bh)_mm512_broadcast_i64x4(load<__m256i>(x + (m0 + m) * K + chunk * LANES));
    for (int p = 0; p < PAIRS; ++p) {
      __m512bh weights = load<__m512bh>(tiles + (tile * K + chunk * LANES) * TILE_ROWS + 2 * p * LANES);
      for (int m = 0; m < rm; ++m) acc[p][m] = _mm512_dpbf16_ps(acc[p][m], weights, xs[m]);
    }
  }
  for (int r = 0; r < TILE_ROWS; ++r) {
    int64_t n = tile * TILE_ROWS + r;
    if (n >= N) break;
    for (int m = 0; m < rm; ++m) {
      float lanes[16];
      _mm512_storeu_ps(lanes, acc[r / 2][m]);
      const float* l = lanes + 8 * (r % 2);
      y[(m0 + m) * N + n] = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
    }
  }
}

template <int rm>
inline void bf16_dot_rows(const uint16_t* w, int64_t tile, const uint16_t* xs, int64_t m, int64_t K, float* out,
                          int64_t N, int64_t left) {
  if constexpr (rm > 0) {
    if (left == rm) return bf16_dot_tile<rm>(w, tile, xs, m, K, out, N);
    bf16_dot_rows<rm - 1>(w, tile, xs, m, K, out, N, left);
  }
}
#endif

template <class Tiles>
void float_product(const Tiles& w, const float* x, int64_t M, int64_t N, int64_t K, float* y) {
  at::parallel_for(0, (N + TILE_ROWS - 1) / TILE_ROWS, GRAIN_TILES, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      int64_t m = 0;
      for (; m + FLOAT_ROWS_OF_X <= M; m += FLOAT_ROWS_OF_X) float_tile<FLOAT_ROWS_OF_X>(w, tile, x, m, K, y, N);
      switch (M - m) {
        case 3: float_tile<3>(w, tile, x, m, K, y, N); break;
        case 2: float_tile<2>(w, tile, x, m, K, y, N); break;
        case 1: float_tile<1>(w, tile, x, m, K, y, N); break;
        default: break;
      }
    }
  });
}

// Integer weights against int8 activations, both with scales per block of BLOCK values (llama.cpp's Q8_0 for x:
// its scale is the block's largest magnitude over 127, its values rounded half to even), so a block's dot product
// is exact in int32 and costs its scales once. Rows are row-major with K permuted within each CHUNK
// (kernels/reference/weight_products.py): 32-bit lane i of the chunk's 64-byte vector j holds values
// 32i + 4j .. 32i + 4j + 3, so eight 4-byte dot products per lane (one instruction per 64 bytes where the CPU has
// them) sum one block, and a chunk's 16 block sums take one convert, one multiply and one multiply-add. 4- and
// 6-bit rows pack a chunk's vectors (AffineRows), unpacked with masks and shifts.
constexpr int64_t BLOCK = 32;
constexpr int64_t CHUNK = 512;
constexpr int64_t VECTOR = 64;  // bytes per dot-product vector
constexpr int64_t BLOCKS_PER_CHUNK = CHUNK / BLOCK;
constexpr int INTEGER_ROWS_OF_X = 8;
constexpr int64_t GRAIN_ROWS = 64;
// How far ahead of its reads a row product asks for the weights: a pass of 5 to 9 rows of x (a verify pass)
// streamed int8 weights at 15-17 GB/s with it against 10-15 without (two Xeon cores, 0.8 GB of weights).
constexpr int64_t PREFETCH_BYTES = 4096;
using u8x64 = uint8_t __attribute__((vector_size(VECTOR)));
using i8x64 = int8_t __attribute__((vector_size(VECTOR)));

// Lane i of acc plus the dot product of bytes 4i .. 4i + 3 of w and x, both read as signed (exact for unsigned w
// below 128): Arm's dot product instruction, else plain C++.
SQLSCOUT_INLINE i32v signed_bytes_dot4(i32v acc, const int8_t* w, const int8_t* x) {
#if defined(__ARM_FEATURE_DOTPROD)
  int32x4_t sums[4];
  std::memcpy(sums, &acc, sizeof sums);
  for (int q = 0; q < 4; ++q) sums[q] = vdotq_s32(sums[q], vld1q_s8(w + 16 * q), vld1q_s8(x + 16 * q));
  return load<i32v>(sums);
#else
  int32_t lanes[LANES];
  std::memcpy(lanes, &acc, sizeof lanes);
  for (int i = 0; i < LANES; ++i)
    for (int t = 0; t < 4; ++t) lanes[i] += int32_t(w[4 * i + t]) * int32_t(x[4 * i + t]);
  return load<i32v>(lanes);
#endif
}

// unsigned_dot4(acc, w, x): lane i of acc plus the dot product of w's bytes 4i .. 4i + 3 (unsigned, below 128
// unless the CPU has VNNI) and x's (signed).
SQLSCOUT_INLINE i32v unsigned_dot4(i32v acc, u8x64 w, i8x64 x) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  __m512i sums = _mm512_dpbusd_epi32(load<__m512i>(&acc), load<__m512i>(&w), load<__m512i>(&x));
  return load<i32v>(&sums);
#elif defined(__AVX2__)
  __m256i sums[2], ws[2], xs[2];
  std::memcpy(sums, &acc, sizeof sums);
  std::memcpy(ws, &w, sizeof ws);
  std::memcpy(xs, &x, sizeof xs);
  for (int h = 0; h < 2; ++h) {
#if defined(__AVXVNNI__)
    sums[h] = _mm256_dpbusd_avx_epi32(sums[h], ws[h], xs[h]);
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
    sums[h] = _mm256_dpbusd_epi32(sums[h], ws[h], xs[h]);
#else
    // Pairs of products summed in 16 bits (w < 128, |x| <= 127: no saturation), then pairs into 32-bit lanes.
    sums[h] = _mm256_add_epi32(sums[h], _mm256_madd_epi16(_mm256_maddubs_epi16(ws[h], xs[h]), _mm256_set1_epi16(1)));
#endif
  }
  return load<i32v>(sums);
#else
  return signed_bytes_dot4(acc, reinterpret_cast<const int8_t*>(&w), reinterpret_cast<const int8_t*>(&x));
#endif
}

// signed_dot4(acc, prepare(w), x): as unsigned_dot4 for signed w. Where the instruction multiplies unsigned by
// signed bytes (x86), VNNI flips w's sign bit (w + 128) and the quantized x starts each block's sum at -128 times
// the block's sum (DOT_IS_BIASED) to take it out; AVX2 multiplies |w| by x with w's sign, as llama.cpp does.
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
constexpr bool DOT_IS_BIASED = true;
using PreparedWeights = u8x64;
SQLSCOUT_INLINE PreparedWeights prepare(const int8_t* w) { return load<u8x64>(w) ^ 0x80; }
SQLSCOUT_INLINE i32v signed_dot4(i32v acc, PreparedWeights w, i8x64 x) { return unsigned_dot4(acc, w, x); }
#elif defined(__AVX2__)
constexpr bool DOT_IS_BIASED = false;
struct PreparedWeights {
  __m256i signs[2], magnitudes[2];
};
SQLSCOUT_INLINE PreparedWeights prepare(const int8_t* w) {
  PreparedWeights prepared;
  for (int h = 0; h < 2; ++h) {
    prepared.signs[h] = load<__m256i>(w + 32 * h);
    prepared.magnitudes[h] = _mm256_abs_epi8(prepared.signs[h]);
  }
  return prepared;
}
SQLSCOUT_INLINE i32v signed_dot4(i32v acc, const PreparedWeights& w, i8x64 x) {
  __m256i xs[2];
  std::memcpy(xs, &x, sizeof xs);
  for (int h = 0; h < 2; ++h) xs[h] = _mm256_sign_epi8(xs[h], w.signs[h]);
  return unsigned_dot4(acc, load<u8x64>(w.magnitudes), load<i8x64>(xs));
}
#else
constexpr bool DOT_IS_BIASED = false;
using PreparedWeights = i8x64;
SQLSCOUT_INLINE PreparedWeights prepare(const int8_t* w) { return load<i8x64>(w); }
SQLSCOUT_INLINE i32v signed_dot4(i32v acc, PreparedWeights w, i8x64 x) {
  return signed_bytes_dot4(acc, reinterpret_cast<const int8_t*>(&w), reinterpret_cast<const int8_t*>(&x));
}
#endif

// x quantized for the integer products: values [M, K] int8 in the weights' permuted order, and per block its
// scale, the start of its int8 dot products (-128 times the block's sum of values where DOT_IS_BIASED, else 0)
// and its dequantized sum (scale times the sum of values), which affine rows' minimums multiply.
struct QuantizedX {
  std::vector<int8_t> values;
  std::vector<float> scales;
  std::vector<int32_t> starts;
  std::vector<float> sums;
};

QuantizedX quantize_x(const float* x, int64_t M, int64_t K) {
  const int64_t blocks = K / BLOCK;
  QuantizedX q{std::vector<int8_t>(M * K), std::vector<float>(M * blocks), std::vector<int32_t>(M * blocks),
               std::vector<float>(M * blocks)};
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* block = x + m * K + b * BLOCK;
      float largest = 0.0f;
      for (int64_t e = 0; e < BLOCK; ++e) largest = std::max(largest, std::fabs(block[e]));
      const float scale = largest / 127.0f;
      // Block b is lane b % 16 of chunk b / 16: its value e lies in vector e / 4, byte e % 4 of that lane.
      int8_t* lane = q.values.data() + m * K + b / BLOCKS_PER_CHUNK * CHUNK + b % BLOCKS_PER_CHUNK * 4;
      int32_t total = 0;
      for (int64_t e = 0; e < BLOCK; ++e) {
        float value = scale > 0.0f ? std::nearbyint(block[e] / scale) : 0.0f;
        int8_t v = int8_t(std::min(127.0f, std::max(-127.0f, value)));
        lane[e / 4 * VECTOR + e % 4] = v;
        total += v;
      }
      q.scales[m * blocks + b] = scale;
      q.starts[m * blocks + b] = DOT_IS_BIASED ? -128 * total : 0;
      q.sums[m * blocks + b] = scale * float(total);
    }
  }
  return q;
}

// 16 fp16 values widened to fp32.
SQLSCOUT_INLINE f32v halves_to_floats(const uint16_t* p) {
#if defined(__AVX512F__)
  __m512 wide = _mm512_cvtph_ps(load<__m256i>(p));
  return load<f32v>(&wide);
#elif defined(__F16C__)
  __m256 wide[2] = {_mm256_cvtph_ps(load<__m128i>(p)), _mm256_cvtph_ps(load<__m128i>(p + 8))};
  return load<f32v>(wide);
#else
  float lanes[LANES];
  for (int i = 0; i < LANES; ++i) lanes[i] = half_to_float(p[i]);
  return load<f32v>(lanes);
#endif
}

// int8 rows with an fp16 scale per block.
struct Int8Rows {
  const int8_t* data;
  const uint16_t* scales;
  int64_t K;
};

// Affine rows of `bits` (4 or 6) bit values v: a weight is scale * v + minimum, a block's scale being
// steps[0] * scales[block] and its minimum steps[1] * minimums[block] + steps[2], with STEPS steps per chunk. A row
// is one stream: per group of GROUP_CHUNKS chunks (the last may hold fewer), a header of the group's scales
// (uint8), minimums (int8) and steps (fp32) padded to VECTOR bytes, then the chunks' bytes. A chunk's bytes are
// its eight vectors' low nibbles (vectors 2p and 2p + 1 in the low and high nibbles of 64 bytes p), then for 6 bits
// their upper two bits (vectors 4q .. 4q + 3 in bits 0-1 .. 6-7 of 64 bytes q).
constexpr int64_t STEPS = 3;
constexpr int64_t GROUP_CHUNKS = 4;
constexpr int64_t HEADER_BYTES_PER_CHUNK = 2 * BLOCKS_PER_CHUNK + 4 * STEPS;
constexpr int64_t chunk_bytes(int bits) { return CHUNK * bits / 8; }
constexpr int64_t header_bytes(int64_t chunks) {
  return (chunks * HEADER_BYTES_PER_CHUNK + VECTOR - 1) / VECTOR * VECTOR;
}
constexpr int64_t group_bytes(int64_t chunks, int bits) { return header_bytes(chunks) + chunks * chunk_bytes(bits); }

int64_t affine_row_bytes(int64_t K, int bits) {
  const int64_t chunks = K / CHUNK, rest = chunks % GROUP_CHUNKS;
  return chunks / GROUP_CHUNKS * group_bytes(GROUP_CHUNKS, bits) + (rest ? group_bytes(rest, bits) : 0);
}

struct AffineRows {
  const uint8_t* data;
  int64_t K;
  int64_t row_bytes;
};

// Where chunk `chunk` of a row's stream keeps its parts.
struct AffineChunk {
  const uint8_t* values;
  const uint8_t* scales;
  const int8_t* minimums;
  const float* steps;
};

template <int bits>
SQLSCOUT_INLINE AffineChunk affine_chunk(const uint8_t* row, int64_t chunks, int64_t chunk) {
  const int64_t first = chunk / GROUP_CHUNKS * GROUP_CHUNKS, at = chunk - first;
  const int64_t count = std::min(GROUP_CHUNKS, chunks - first);
  const uint8_t* group = row + first / GROUP_CHUNKS * group_bytes(GROUP_CHUNKS, bits);
  return {group + header_bytes(count) + at * chunk_bytes(bits), group + at * BLOCKS_PER_CHUNK,
          reinterpret_cast<const int8_t*>(group + (count + at) * BLOCKS_PER_CHUNK),
          reinterpret_cast<const float*>(group + 2 * count * BLOCKS_PER_CHUNK) + at * STEPS};
}

// LANES bytes from p (unsigned or signed) as fp32: compilers widen bytes a lane at a time unless told the
// instruction.
template <class Byte>
SQLSCOUT_INLINE f32v bytes_to_floats(const Byte* p) {
  constexpr bool is_signed = std::is_signed_v<Byte>;
#if defined(__AVX512F__)
  const __m128i bytes = load<__m128i>(p);
  const __m512i wide = is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
  return to_floats(load<i32v>(&wide));
#elif defined(__AVX2__)
  __m256i wide[2];
  for (int h = 0; h < 2; ++h) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h));
    wide[h] = is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
  }
  return to_floats(load<i32v>(wide));
#else
  float lanes[LANES];
  for (int i = 0; i < LANES; ++i) lanes[i] = float(p[i]);
  return load<f32v>(lanes);
#endif
}

// The upper two bits of vector t of a group of four (bits 2t, 2t + 1 of `high`) moved to bits 4 and 5.
template <int t>
SQLSCOUT_INLINE u8x64 upper_bits(u8x64 high) {
  if constexpr (t == 3) return (high >> 2) & 0x30;
  return (high << (4 - 2 * t)) & 0x30;
}

// Vectors 2p and 2p + 1 of an affine chunk's packed values (see AffineRows), one byte a value.
template <int bits>
SQLSCOUT_INLINE void unpack_vector_pair(const uint8_t* values, int p, u8x64& low, u8x64& high) {
  const u8x64 packed = load<u8x64>(values + p * VECTOR);
  low = packed & 0xF;
  high = packed >> 4;
  if constexpr (bits == 6) {
    const u8x64 upper = load<u8x64>(values + CHUNK / 2 + p / 2 * VECTOR);
    low |= p % 2 ? upper_bits<2>(upper) : upper_bits<0>(upper);
    high |= p % 2 ? upper_bits<3>(upper) : upper_bits<1>(upper);
  }
}

// Row n of W against rows m0 .. m0 + rm - 1 of x.
template <int rm>
inline void int8_row(const Int8Rows& w, const QuantizedX& q, int64_t m0, int64_t n, int64_t N, float* y) {
  const int64_t K = w.K, blocks = K / BLOCK;
  const int8_t* row = w.data + n * K;
  const int8_t* xs = q.values.data() + m0 * K;
  f32v acc[rm] = {};
  for (int64_t chunk = 0; chunk < K / CHUNK; ++chunk) {
    const int64_t block0 = chunk * BLOCKS_PER_CHUNK;
    const int8_t* chunk_x = xs + chunk * CHUNK;
    i32v sums[rm];
    for (int m = 0; m < rm; ++m) sums[m] = load<i32v>(q.starts.data() + (m0 + m) * blocks + block0);
    for (int64_t v = 0; v < CHUNK / VECTOR; ++v) {
      __builtin_prefetch(row + PREFETCH_BYTES + chunk * CHUNK + v * VECTOR);
      const PreparedWeights weights = prepare(row + chunk * CHUNK + v * VECTOR);
      for (int m = 0; m < rm; ++m) sums[m] = signed_dot4(sums[m], weights, load<i8x64>(chunk_x + m * K + v * VECTOR));
    }
    const f32v weight_scales = halves_to_floats(w.scales + n * blocks + block0);
    for (int m = 0; m < rm; ++m)
      acc[m] += to_floats(sums[m]) * (load<f32v>(q.scales.data() + (m0 + m) * blocks + block0) * weight_scales);
  }
  for (int m = 0; m < rm; ++m) y[(m0 + m) * N + n] = sum(acc[m]);
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// AVX2 holds a 64-byte vector in two registers. The generic affine row below computes its unpacked values as
// 64-byte vectors, which GCC splits for the dot products through the stack, eight bytes at a time (the int4
// product ran at a fifth of the int8 one's speed): here each vector is unpacked and multiplied a half at a time,
// the half's 8 blocks in the lanes of one register.
//
// Without VNNI a 4-byte dot product is two instructions, maddubs (pairs of products summed in 16 bits) and madd
// (pairs of those summed in 32): here the 16-bit sums of PAIRS_IN_16_BITS<bits> vector pairs are added before one
// madd widens them, as llama.cpp's AVX2 Q4_K product does (int4 rows in cache, one Zen 4 core: 20 GB/s against
// 18-19). With values below 2^bits and |x| <= 127 a vector pair adds at most 4 * (2^bits - 1) * 127 to a 16-bit
// lane: 7,620 at 4 bits (four pairs fit), 32,004 at 6 (one).
template <int bits>
constexpr int PAIRS_IN_16_BITS = bits == 4 ? 4 : 1;
static_assert((CHUNK / VECTOR / 2) % PAIRS_IN_16_BITS<4> == 0, "a chunk's 16-bit sums are widened at its end");

// 16-bit lanes of sums plus the pairs of products of w's (unsigned) and x's (signed) bytes.
SQLSCOUT_INLINE __m256i pair_sums(__m256i sums, __m256i w, __m256i x) {
  return _mm256_add_epi16(sums, _mm256_maddubs_epi16(w, x));
}

// Half of upper_bits<t>: a 16-bit shift moves bits across the bytes of a pair, but only into bits the mask clears.
template <int t>
SQLSCOUT_INLINE __m256i upper_bits_half(__m256i high) {
  const __m256i mask = _mm256_set1_epi8(0x30);
  if constexpr (t == 3) return _mm256_and_si256(_mm256_srli_epi16(high, 2), mask);
  return _mm256_and_si256(_mm256_slli_epi16(high, 4 - 2 * t), mask);
}

// Half h of unpack_vector_pair.
template <int bits>
SQLSCOUT_INLINE void unpack_half_pair(const uint8_t* values, int p, int h, __m256i& low, __m256i& high) {
  const __m256i nibble = _mm256_set1_epi8(0xF);
  const __m256i packed = load<__m256i>(values + p * VECTOR + 32 * h);
  low = _mm256_and_si256(packed, nibble);
  high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
  if constexpr (bits == 6) {
    const __m256i upper = load<__m256i>(values + CHUNK / 2 + p / 2 * VECTOR + 32 * h);
    low = _mm256_or_si256(low, p % 2 ? upper_bits_half<2>(upper) : upper_bits_half<0>(upper));
    high = _mm256_or_si256(high, p % 2 ? upper_bits_half<3>(upper) : upper_bits_half<1>(upper));
  }
}

// 8 bytes from p (unsigned or signed) as 8 fp32 lanes.
template <class Byte>
SQLSCOUT_INLINE __m256 bytes_to_floats_half(const Byte* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(std::is_signed_v<Byte> ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
}

template <int rm, int bits>
inline void affine_row(const AffineRows& w, const QuantizedX& q, int64_t m0, int64_t n, int64_t N, float* y) {
  const int64_t K = w.K, blocks = K / BLOCK, chunks = K / CHUNK;
  const uint8_t* row = w.data + n * w.row_bytes;
  const int8_t* xs = q.values.data() + m0 * K;
  __m256 acc[rm][2];
  for (int m = 0; m < rm; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t block0 = chunk * BLOCKS_PER_CHUNK;
    const AffineChunk parts = affine_chunk<bits>(row, chunks, chunk);
    const int8_t* chunk_x = xs + chunk * CHUNK;
    for (int h = 0; h < 2; ++h) {
      __m256i sums[rm], pairs[rm];
      for (int m = 0; m < rm; ++m) sums[m] = pairs[m] = _mm256_setzero_si256();
      for (int p = 0; p < CHUNK / VECTOR / 2; ++p) {
        __m256i low, high;
        unpack_half_pair<bits>(parts.values, p, h, low, high);
        for (int m = 0; m < rm; ++m) {
          const int8_t* at = chunk_x + m * K + 2 * p * VECTOR + 32 * h;
#if defined(__AVXVNNI__)
          sums[m] = _mm256_dpbusd_avx_epi32(sums[m], low, load<__m256i>(at));
          sums[m] = _mm256_dpbusd_avx_epi32(sums[m], high, load<__m256i>(at + VECTOR));
#else
          pairs[m] = pair_sums(pair_sums(pairs[m], low, load<__m256i>(at)), high, load<__m256i>(at + VECTOR));
          if ((p + 1) % PAIRS_IN_16_BITS<bits> == 0) {
            sums[m] = _mm256_add_epi32(sums[m], _mm256_madd_epi16(pairs[m], _mm256_set1_epi16(1)));
            pairs[m] = _mm256_setzero_si256();
          }
#endif
        }
      }
      const __m256 scales = _mm256_mul_ps(bytes_to_floats_half(parts.scales + 8 * h), _mm256_set1_ps(parts.steps[0]));
      const __m256 minimums = _mm256_add_ps(
          _mm256_mul_ps(bytes_to_floats_half(parts.minimums + 8 * h), _mm256_set1_ps(parts.steps[1])),
          _mm256_set1_ps(parts.steps[2]));
      for (int m = 0; m < rm; ++m) {
        const int64_t at = (m0 + m) * blocks + block0 + 8 * h;
        const __m256 products = _mm256_mul_ps(_mm256_cvtepi32_ps(sums[m]), _mm256_mul_ps(_mm256_loadu_ps(q.scales.data() + at), scales));
        acc[m][h] = _mm256_add_ps(acc[m][h], products);
        acc[m][h] = _mm256_add_ps(acc[m][h], _mm256_mul_ps(minimums, _mm256_loadu_ps(q.sums.data() + at)));
      }
    }
  }
  for (int m = 0; m < rm; ++m) y[(m0 + m) * N + n] = sqlscout::sum_halves(acc[m][0], acc[m][1]);
}
#else
template <int rm, int bits>
inline void affine_row(const AffineRows& w, const QuantizedX& q, int64_t m0, int64_t n, int64_t N, float* y) {
  const int64_t K = w.K, blocks = K / BLOCK, chunks = K / CHUNK;
  const uint8_t* row = w.data + n * w.row_bytes;
  const int8_t* xs = q.values.data() + m0 * K;
  f32v acc[rm] = {};
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t block0 = chunk * BLOCKS_PER_CHUNK;
    const AffineChunk parts = affine_chunk<bits>(row, chunks, chunk);
    const int8_t* chunk_x = xs + chunk * CHUNK;
    // Values are unsigned: the biased starts of signed weights do not apply.
    i32v sums[rm] = {};
    for (int p = 0; p < CHUNK / VECTOR / 2; ++p) {
      u8x64 low, high;
      unpack_vector_pair<bits>(parts.values, p, low, high);
      for (int m = 0; m < rm; ++m) {
        const int8_t* at = chunk_x + m * K + 2 * p * VECTOR;
        sums[m] = unsigned_dot4(sums[m], low, load<i8x64>(at));
        sums[m] = unsigned_dot4(sums[m], high, load<i8x64>(at + VECTOR));
      }
    }
    const f32v scales = bytes_to_floats(parts.scales) * parts.steps[0];
    const f32v minimums = bytes_to_floats(parts.minimums) * parts.steps[1] + parts.steps[2];
    for (int m = 0; m < rm; ++m) {
      const int64_t at = (m0 + m) * blocks + block0;
      acc[m] += to_floats(sums[m]) * (load<f32v>(q.scales.data() + at) * scales);
      acc[m] += minimums * load<f32v>(q.sums.data() + at);
    }
  }
  for (int m = 0; m < rm; ++m) y[(m0 + m) * N + n] = sum(acc[m]);
}
#endif

// f(std::integral_constant<int, rm>{}) for the rm = left in 1 .. rows.
template <int rows, class F>
inline void with_rows(int64_t left, const F& f) {
  if constexpr (rows > 0) {
    if (left == rows) return f(std::integral_constant<int, rows>{});
    with_rows<rows - 1>(left, f);
  }
}

// Every row n of W against the rows of x, INTEGER_ROWS_OF_X at a time: row(rm, q, m, n) writes y's entries.
template <class Row>
void integer_product(const float* x, int64_t M, int64_t N, int64_t K, const Row& row) {
  const QuantizedX q = quantize_x(x, M, K);
  at::parallel_for(0, N, GRAIN_ROWS, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      for (int64_t m = 0; m < M; m += INTEGER_ROWS_OF_X)
        with_rows<INTEGER_ROWS_OF_X>(std::min<int64_t>(INTEGER_ROWS_OF_X, M - m), [&](auto rm) { row(rm, q, m, n); });
  });
}

void check_tiles(const at::Tensor& data, at::ScalarType type, int64_t N, int64_t K, int64_t bytes_per_row) {
  TORCH_CHECK(data.scalar_type() == type, "tiled weights must be ", type, ", got ", data.scalar_type());
  TORCH_CHECK(data.is_contiguous() && data.device().is_cpu(), "tiled weights must be contiguous on the CPU");
  TORCH_CHECK(K % LANES == 0, "K must be a multiple of ", LANES, ", got ", K);
  TORCH_CHECK(data.numel() * data.element_size() == (N + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS * bytes_per_row,
              "tiled weights hold ", data.numel(), " elements, not the tiles of a [", N, ", ", K, "] matrix");
}

void check_input(const at::Tensor& x, int64_t K) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "x must be float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() == 2 && x.size(1) == K, "x must be [M, ", K, "], got ", x.sizes());
  TORCH_CHECK(x.is_contiguous() && x.device().is_cpu(), "x must be a contiguous CPU tensor");
}

void check_output(const at::Tensor& y, int64_t M) {
  TORCH_CHECK(y.scalar_type() == at::kFloat && y.dim() == 2 && y.size(0) == M && y.is_contiguous(),
              "out must be a contiguous float32 [M, N] tensor");
}

void float_linear_out(const at::Tensor& x, const at::Tensor& tiles, at::Tensor& y) {
  const int64_t K = x.size(1), M = x.size(0), N = y.size(1);
  check_input(x, K);
  check_output(y, M);
  if (tiles.scalar_type() == at::kFloat) {
    check_tiles(tiles, at::kFloat, N, K, K * 4);
    float_product(Fp32Tiles{tiles.data_ptr<float>(), K}, x.data_ptr<float>(), M, N, K, y.data_ptr<float>());
  } else {
    check_tiles(tiles, at::kBFloat16, N, K, K * 2);
    Bf16Tiles w{reinterpret_cast<const uint16_t*>(tiles.data_ptr()), K};
    float_product(w, x.data_ptr<float>(), M, N, K, y.data_ptr<float>());
  }
}

void bf16_dot_linear_out(const at::Tensor& x, const at::Tensor& tiles, at::Tensor& y) {
  const int64_t K = x.size(1), M = x.size(0), N = y.size(1);
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2 && x.is_contiguous() && x.device().is_cpu(),
              "x must be a contiguous [M, K] bfloat16 CPU tensor");
  check_output(y, M);
  check_tiles(tiles, at::kBFloat16, N, K, K * 2);
  const uint16_t* w = reinterpret_cast<const uint16_t*>(tiles.data_ptr());
#if !(defined(__AVX512BF16__) && defined(__AVX512VL__))
  at::Tensor widened = x.to(at::kFloat);
  float_product(Bf16Tiles{w, K}, widened.data_ptr<float>(), M, N, K, y.data_ptr<float>());
#else
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(x.data_ptr());
  float* out = y.data_ptr<float>();
  at::parallel_for(0, (N + TILE_ROWS - 1) / TILE_ROWS, GRAIN_TILES, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      int64_t m = 0;
      for (; m + BF16_ROWS_OF_X <= M; m += BF16_ROWS_OF_X) bf16_dot_tile<BF16_ROWS_OF_X>(w, tile, xs, m, K, out, N);
      bf16_dot_rows<BF16_ROWS_OF_X - 1>(w, tile, xs, m, K, out, N, M - m);
    }
  });
#endif
}

// x [M, K] fp32 and y [M, N] for the integer products, K a multiple of CHUNK.
void check_integer_product(const at::Tensor& x, const at::Tensor& y) {
  check_input(x, x.size(1));
  check_output(y, x.size(0));
  TORCH_CHECK(x.size(1) % CHUNK == 0, "integer products take K in multiples of ", CHUNK, ", got ", x.size(1));
}

void check_part(const at::Tensor& t, const char* name, at::ScalarType type, int64_t numel) {
  TORCH_CHECK(t.scalar_type() == type && t.is_contiguous() && t.device().is_cpu() && t.numel() == numel, name,
              " must be a contiguous ", type, " CPU tensor of ", numel, " elements, got ", t.scalar_type(), " ",
              t.sizes());
}

// rows int8 [N, K]; scales fp16 [N, K / BLOCK].
void int8_linear_out(const at::Tensor& x, const at::Tensor& rows, const at::Tensor& scales, at::Tensor& y) {
  check_integer_product(x, y);
  const int64_t K = x.size(1), N = y.size(1);
  check_part(rows, "int8 rows", at::kChar, N * K);
  check_part(scales, "int8 scales", at::kHalf, N * (K / BLOCK));
  const Int8Rows w{rows.data_ptr<int8_t>(), reinterpret_cast<const uint16_t*>(scales.data_ptr()), K};
  float* out = y.data_ptr<float>();
  integer_product(x.data_ptr<float>(), x.size(0), N, K, [&](auto rm, const QuantizedX& q, int64_t m, int64_t n) {
    int8_row<decltype(rm)::value>(w, q, m, n, N, out);
  });
}

// rows uint8 [N, affine_row_bytes(K, bits)] (see AffineRows).
void affine_linear_out(const at::Tensor& x, const at::Tensor& rows, int64_t bits, at::Tensor& y) {
  TORCH_CHECK(bits == 4 || bits == 6, "affine products take 4- or 6-bit values, not ", bits);
  check_integer_product(x, y);
  const int64_t K = x.size(1), N = y.size(1), row_bytes = affine_row_bytes(K, bits);
  check_part(rows, "affine rows", at::kByte, N * row_bytes);
  const AffineRows w{rows.data_ptr<uint8_t>(), K, row_bytes};
  float* out = y.data_ptr<float>();
  integer_product(x.data_ptr<float>(), x.size(0), N, K, [&](auto rm, const QuantizedX& q, int64_t m, int64_t n) {
    if (bits == 4)
      affine_row<decltype(rm)::value, 4>(w, q, m, n, N, out);
    else
      affine_row<decltype(rm)::value, 6>(w, q, m, n, N, out);
  });
}

// The functional forms, which allocate out [M, N] (fp32): N is the matrix's row count.
at::Tensor products(const at::Tensor& x, int64_t n) { return at::empty({x.size(0), n}, x.options().dtype(at::kFloat)); }

at::Tensor float_linear(const at::Tensor& x, const at::Tensor& tiles, int64_t n) {
  at::Tensor y = products(x, n);
  float_linear_out(x, tiles, y);
  return y;
}

at::Tensor bf16_dot_linear(const at::Tensor& x, const at::Tensor& tiles, int64_t n) {
  at::Tensor y = products(x, n);
  bf16_dot_linear_out(x, tiles, y);
  return y;
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& rows, const at::Tensor& scales) {
  at::Tensor y = products(x, rows.size(0));
  int8_linear_out(x, rows, scales, y);
  return y;
}

at::Tensor affine_linear(const at::Tensor& x, const at::Tensor& rows, int64_t bits) {
  at::Tensor y = products(x, rows.size(0));
  affine_linear_out(x, rows, bits, y);
  return y;
}

}  // namespace

// Each gives x @ W.T [M, N]. Registered for CPU tensors only, so that torch.compile can be given a fake
// (shape-only) version of each. Every op of the library has a functional form, which the model calls, and an
// `.out` form writing into a given tensor, which the tests poison first: torch.compile's Inductor mis-orders
// reshapes of fresh buffers that an op writes in place (pytorch/pytorch#189271), so compiled steps take
// functional ops.
TORCH_LIBRARY(sqlscout_cpu, m) {
  m.def("float_linear(Tensor x, Tensor tiles, int n) -> Tensor");
  m.def("float_linear.out(Tensor x, Tensor tiles, Tensor(a!) out) -> ()");
  m.def("bf16_dot_linear(Tensor x, Tensor tiles, int n) -> Tensor");
  m.def("bf16_dot_linear.out(Tensor x, Tensor tiles, Tensor(a!) out) -> ()");
  m.def("int8_linear(Tensor x, Tensor rows, Tensor scales) -> Tensor");
  m.def("int8_linear.out(Tensor x, Tensor rows, Tensor scales, Tensor(a!) out) -> ()");
  m.def("affine_linear(Tensor x, Tensor rows, int bits) -> Tensor");
  m.def("affine_linear.out(Tensor x, Tensor rows, int bits, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) {
  m.impl("float_linear", &float_linear);
  m.impl("float_linear.out", &float_linear_out);
  m.impl("bf16_dot_linear", &bf16_dot_linear);
  m.impl("bf16_dot_linear.out", &bf16_dot_linear_out);
  m.impl("int8_linear", &int8_linear);
  m.impl("int8_linear.out", &int8_linear_out);
  m.impl("affine_linear", &affine_linear);
  m.impl("affine_linear.out", &affine_linear_out);
}
