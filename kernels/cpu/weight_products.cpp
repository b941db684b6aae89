// Weight products for the CPU: y[M, N] = x[M, K] (fp32) @ W[N, K]^T with W stored as fp32, bf16 or int4
// (asymmetric: a scale and a minimum per group of K), widened to fp32 a vector at a time in registers and
// accumulated in fp32, or as int8 (a scale per block of 32 values of a row), multiplied in integers against x
// quantized the same way (see int8_linear). A decode step reads every weight once per token, so these products are
// written to stream W at the memory's speed:
// - W is stored in tiles of TILE_ROWS rows, each tile's rows interleaved LANES values at a time (int4: 32 values
//   in 16 bytes), so that a tile is read as one sequential stream (rows read side by side from a plain row-major
//   matrix are TILE_ROWS short streams, which the hardware prefetcher follows at about half the speed);
// - each weight is read once per call whatever M is: a tile stays in cache while every input row passes over it;
// - threads split W by tiles (at::parallel_for, torch's own thread pool).
// kernels/reference/weight_products.py holds the layout's torch reference. Written with GCC/Clang vector
// extensions, and intrinsics only to widen bytes, so one source compiles to AVX2, AVX-512 or NEON for the CPU it
// is built on (-march=native / -mcpu=native).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace {

constexpr int64_t LANES = 16;
constexpr int64_t TILE_ROWS = 4;
constexpr int64_t INT4_BLOCK = 32;  // values per 16 bytes of int4
using f32v = float __attribute__((vector_size(LANES * 4)));
using u32v = uint32_t __attribute__((vector_size(LANES * 4)));
using u16v = uint16_t __attribute__((vector_size(LANES * 2)));
using u8v = uint8_t __attribute__((vector_size(LANES)));
using i32v = int32_t __attribute__((vector_size(LANES * 4)));

// Tiles a thread takes at least, so that small matrices do not pay for waking threads.
constexpr int64_t GRAIN_TILES = 16;

template <class T>
inline T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The lanes summed by halves (lane i plus lane i + 8, then + 4, + 2, + 1), in shuffles where AVX-512 has them.
inline float sum(f32v v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(load<__m512>(&v));
#else
  float lanes[LANES];
  std::memcpy(lanes, &v, sizeof lanes);
  for (int width = LANES / 2; width > 0; width /= 2)
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
#endif
}

inline float half_to_float(uint16_t bits) {
  _Float16 value;
  std::memcpy(&value, &bits, sizeof value);
  return float(value);
}

// 16 unsigned bytes widened to 16 int32 lanes, written per instruction set: compilers widen the byte lanes of a
// generic vector one lane at a time.
inline i32v bytes_to_ints(u8v bytes) {
#if defined(__AVX512F__)
  __m128i packed;
  std::memcpy(&packed, &bytes, sizeof packed);
  __m512i wide = _mm512_cvtepu8_epi32(packed);
  return load<i32v>(&wide);
#elif defined(__AVX2__)
  __m128i packed;
  std::memcpy(&packed, &bytes, sizeof packed);
  __m256i halves[2] = {_mm256_cvtepu8_epi32(packed), _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(packed, packed))};
  return load<i32v>(halves);
#elif defined(__ARM_NEON)
  uint8x16_t raw = vld1q_u8(reinterpret_cast<const uint8_t*>(&bytes));
  uint16x8_t low = vmovl_u8(vget_low_u8(raw)), high = vmovl_u8(vget_high_u8(raw));
  uint32x4_t quarters[4] = {vmovl_u16(vget_low_u16(low)), vmovl_u16(vget_high_u16(low)),
                            vmovl_u16(vget_low_u16(high)), vmovl_u16(vget_high_u16(high))};
  return load<i32v>(quarters);
#else
  int32_t lanes[LANES];
  for (int i = 0; i < LANES; ++i) lanes[i] = int32_t(bytes[i]);
  return load<i32v>(lanes);
#endif
}

inline f32v to_floats(i32v ints) { return __builtin_convertvector(ints, f32v); }

// A tiled matrix of one element type: vector(tile, chunk, r) is the LANES values of row r of the tile at
// k = chunk * LANES; scale(n) multiplies row n's finished dot product.
struct Fp32Tiles {
  const float* data;
  int64_t K;
  f32v vector(int64_t tile, int64_t chunk, int64_t r) const {
    return load<f32v>(data + (tile * K + chunk * LANES) * TILE_ROWS + r * LANES);
  }
  float scale(int64_t) const { return 1.0f; }
};

struct Bf16Tiles {
  const uint16_t* data;
  int64_t K;
  f32v vector(int64_t tile, int64_t chunk, int64_t r) const {
    // A bf16 number is the upper half of the fp32 of the same value: widening is a shift.
    u16v bits = load<u16v>(data + (tile * K + chunk * LANES) * TILE_ROWS + r * LANES);
    u32v wide = __builtin_convertvector(bits, u32v) << 16;
    return load<f32v>(&wide);
  }
  float scale(int64_t) const { return 1.0f; }
};

// Rows of x per pass over a tile: TILE_ROWS * rm vector accumulators must fit the registers beside the
// weights' and inputs' vectors.
constexpr int FLOAT_ROWS_OF_X = 4;
constexpr int INT4_ROWS_OF_X = 2;

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

// int4 tiles: per tile and 32-value block, row r's 16 bytes hold value j in the low nibble of byte j and value
// j + 16 in its high nibble; value = scale * q + minimum with q in [0, 15], scale and minimum per group of K and
// stored tile-major too ([tiles][groups][TILE_ROWS], fp16). So a group's dot with x is
// scale * dot(q, x) + minimum * sum(x): the sums of x per group are computed once per call.
struct Int4Tiles {
  const uint8_t* data;
  const uint16_t* scales;
  const uint16_t* minimums;
  int64_t K;
  int64_t group;
};

template <int rm>
inline void int4_tile(const Int4Tiles& w, int64_t tile, const float* x, const float* x_sums, int64_t m0,
                      float* y, int64_t N) {
  const int64_t K = w.K, groups = K / w.group;
  const uint8_t* bytes = w.data + tile * TILE_ROWS * (K / 2);
  f32v acc[TILE_ROWS][rm] = {};
  float offset[TILE_ROWS][rm] = {};
  for (int64_t g = 0; g < groups; ++g) {
    f32v group_acc[TILE_ROWS][rm] = {};
    for (int64_t block = g * w.group; block < (g + 1) * w.group; block += INT4_BLOCK) {
      f32v xs[rm][2];
      for (int m = 0; m < rm; ++m) {
        xs[m][0] = load<f32v>(x + (m0 + m) * K + block);
        xs[m][1] = load<f32v>(x + (m0 + m) * K + block + LANES);
      }
      for (int r = 0; r < TILE_ROWS; ++r) {
        // Nibbles split after widening to int32 lanes: a shift needs no mask there, and the widening is one
        // instruction for both halves.
        i32v wide = bytes_to_ints(load<u8v>(bytes + (block / INT4_BLOCK * TILE_ROWS + r) * LANES));
        f32v low = to_floats(wide & 0xF), high = to_floats(wide >> 4);
        for (int m = 0; m < rm; ++m) {
          // Two statements, so each contracts to a fused multiply-add.
          group_acc[r][m] += low * xs[m][0];
          group_acc[r][m] += high * xs[m][1];
        }
      }
    }
    for (int r = 0; r < TILE_ROWS; ++r) {
      int64_t at = (tile * groups + g) * TILE_ROWS + r;
      float scale = half_to_float(w.scales[at]), minimum = half_to_float(w.minimums[at]);
      for (int m = 0; m < rm; ++m) {
        acc[r][m] += group_acc[r][m] * scale;
        offset[r][m] += minimum * x_sums[(m0 + m) * groups + g];
      }
    }
  }
  for (int r = 0; r < TILE_ROWS; ++r) {
    int64_t n = tile * TILE_ROWS + r;
    if (n >= N) break;
    for (int m = 0; m < rm; ++m) y[(m0 + m) * N + n] = sum(acc[r][m]) + offset[r][m];
  }
}

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

// int8 weights against int8 activations, both with a scale per block of INT8_BLOCK values (llama.cpp's Q8_0: x's
// scale is the block's largest magnitude over 127, its values rounded half to even), so a block's dot product
// is exact in int32 and costs its two scales. Rows are row-major with K permuted within each INT8_CHUNK
// (kernels/reference/weight_products.py): 32-bit lane i of the chunk's 64-byte vector j holds values
// 32i + 4j .. 32i + 4j + 3, so eight 4-byte dot products per lane (one instruction per 64 bytes where the CPU has
// them) sum one block, and a chunk's 16 block sums take one convert, one multiply and one multiply-add.
constexpr int64_t INT8_BLOCK = 32;
constexpr int64_t INT8_CHUNK = 512;
constexpr int64_t INT8_VECTOR = 64;  // bytes per dot-product vector
constexpr int INT8_ROWS_OF_X = 8;
constexpr int64_t INT8_GRAIN_ROWS = 64;
using i8v = int8_t __attribute__((vector_size(INT8_VECTOR)));

// dot4(acc, prepare(w), x): lane i of acc plus the dot product of w's and x's bytes 4i .. 4i + 3. Where the
// instruction multiplies unsigned by signed bytes (x86's VNNI), prepare flips w's sign bit (w + 128) and the
// product's input starts each block's sum at -128 times the block's sum of x (DOT_IS_BIASED) to take it out.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr bool DOT_IS_BIASED = true;
using PreparedWeights = __m512i;
inline PreparedWeights prepare(const int8_t* w) {
  return _mm512_xor_si512(load<__m512i>(w), _mm512_set1_epi8(char(0x80)));
}
inline i32v dot4(i32v acc, PreparedWeights w, const int8_t* x) {
  __m512i sums = _mm512_dpbusd_epi32(load<__m512i>(&acc), w, load<__m512i>(x));
  return load<i32v>(&sums);
}
#elif defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
constexpr bool DOT_IS_BIASED = true;
struct PreparedWeights {
  __m256i halves[2];
};
inline PreparedWeights prepare(const int8_t* w) {
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  return {{_mm256_xor_si256(load<__m256i>(w), flip), _mm256_xor_si256(load<__m256i>(w + 32), flip)}};
}
inline i32v dot4(i32v acc, const PreparedWeights& w, const int8_t* x) {
  __m256i sums[2];
  std::memcpy(sums, &acc, sizeof sums);
  for (int h = 0; h < 2; ++h) {
#if defined(__AVXVNNI__)
    sums[h] = _mm256_dpbusd_avx_epi32(sums[h], w.halves[h], load<__m256i>(x + 32 * h));
#else
    sums[h] = _mm256_dpbusd_epi32(sums[h], w.halves[h], load<__m256i>(x + 32 * h));
#endif
  }
  return load<i32v>(sums);
}
#elif defined(__AVX2__)
// Without VNNI: |w| times x with w's sign, in 16-bit pairs (|w|, |x| <= 127, so a pair never saturates), then
// pairs summed into 32-bit lanes, as llama.cpp does on AVX2.
constexpr bool DOT_IS_BIASED = false;
struct PreparedWeights {
  __m256i signs[2], magnitudes[2];
};
inline PreparedWeights prepare(const int8_t* w) {
  PreparedWeights prepared;
  for (int h = 0; h < 2; ++h) {
    prepared.signs[h] = load<__m256i>(w + 32 * h);
    prepared.magnitudes[h] = _mm256_abs_epi8(prepared.signs[h]);
  }
  return prepared;
}
inline i32v dot4(i32v acc, const PreparedWeights& w, const int8_t* x) {
  __m256i sums[2];
  std::memcpy(sums, &acc, sizeof sums);
  for (int h = 0; h < 2; ++h) {
    __m256i pairs = _mm256_maddubs_epi16(w.magnitudes[h], _mm256_sign_epi8(load<__m256i>(x + 32 * h), w.signs[h]));
    sums[h] = _mm256_add_epi32(sums[h], _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  return load<i32v>(sums);
}
#elif defined(__ARM_FEATURE_DOTPROD)
constexpr bool DOT_IS_BIASED = false;
using PreparedWeights = const int8_t*;
inline PreparedWeights prepare(const int8_t* w) { return w; }
inline i32v dot4(i32v acc, PreparedWeights w, const int8_t* x) {
  int32x4_t sums[4];
  std::memcpy(sums, &acc, sizeof sums);
  for (int q = 0; q < 4; ++q) sums[q] = vdotq_s32(sums[q], vld1q_s8(w + 16 * q), vld1q_s8(x + 16 * q));
  return load<i32v>(sums);
}
#else
constexpr bool DOT_IS_BIASED = false;
using PreparedWeights = const int8_t*;
inline PreparedWeights prepare(const int8_t* w) { return w; }
inline i32v dot4(i32v acc, PreparedWeights w, const int8_t* x) {
  int32_t lanes[LANES];
  std::memcpy(lanes, &acc, sizeof lanes);
  for (int i = 0; i < LANES; ++i)
    for (int t = 0; t < 4; ++t) lanes[i] += int32_t(w[4 * i + t]) * int32_t(x[4 * i + t]);
  return load<i32v>(lanes);
}
#endif

// x quantized for int8_rows: values [M, K] int8 in the weights' permuted order, and per block its scale and the
// start of its integer sum (-128 times the block's sum of values where DOT_IS_BIASED, else 0).
struct QuantizedX {
  std::vector<int8_t> values;
  std::vector<float> scales;
  std::vector<int32_t> starts;
};

QuantizedX quantize_x(const float* x, int64_t M, int64_t K) {
  const int64_t blocks = K / INT8_BLOCK, lanes = INT8_CHUNK / INT8_BLOCK;
  QuantizedX q{std::vector<int8_t>(M * K), std::vector<float>(M * blocks), std::vector<int32_t>(M * blocks)};
  int8_t* values = q.values.data();
  float* scales = q.scales.data();
  int32_t* starts = q.starts.data();
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* block = x + m * K + b * INT8_BLOCK;
      float largest = 0.0f;
      for (int64_t e = 0; e < INT8_BLOCK; ++e) largest = std::max(largest, std::fabs(block[e]));
      const float scale = largest / 127.0f;
      // Block b is lane b % 16 of chunk b / 16: its value e lies in vector e / 4, byte e % 4 of that lane.
      int8_t* lane = values + m * K + b / lanes * INT8_CHUNK + b % lanes * 4;
      int32_t total = 0;
      for (int64_t e = 0; e < INT8_BLOCK; ++e) {
        float value = scale > 0.0f ? std::nearbyint(block[e] / scale) : 0.0f;
        int8_t v = int8_t(std::min(127.0f, std::max(-127.0f, value)));
        lane[e / 4 * INT8_VECTOR + e % 4] = v;
        total += v;
      }
      scales[m * blocks + b] = scale;
      starts[m * blocks + b] = DOT_IS_BIASED ? -128 * total : 0;
    }
  }
  return q;
}

// 16 fp16 values widened to fp32.
inline f32v halves_to_floats(const uint16_t* p) {
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

template <int rm>
inline void int8_rows(const int8_t* w, const uint16_t* w_scales, const QuantizedX& q, int64_t m0, int64_t n,
                      int64_t K, int64_t N, float* y) {
  const int64_t blocks = K / INT8_BLOCK;
  const int8_t* row = w + n * K;
  const uint16_t* row_scales = w_scales + n * blocks;
  const int8_t* xs = q.values.data();
  const float* scales = q.scales.data();
  const int32_t* starts = q.starts.data();
  f32v acc[rm] = {};
  for (int64_t chunk = 0; chunk < K / INT8_CHUNK; ++chunk) {
    const int64_t block0 = chunk * (INT8_CHUNK / INT8_BLOCK);
    i32v sums[rm];
    for (int m = 0; m < rm; ++m) sums[m] = load<i32v>(starts + (m0 + m) * blocks + block0);
    for (int64_t v = 0; v < INT8_CHUNK / INT8_VECTOR; ++v) {
      const int64_t at = chunk * INT8_CHUNK + v * INT8_VECTOR;
      PreparedWeights weights = prepare(row + at);
      for (int m = 0; m < rm; ++m) sums[m] = dot4(sums[m], weights, xs + (m0 + m) * K + at);
    }
    const f32v weight_scales = halves_to_floats(row_scales + block0);
    for (int m = 0; m < rm; ++m)
      acc[m] += to_floats(sums[m]) * (load<f32v>(scales + (m0 + m) * blocks + block0) * weight_scales);
  }
  for (int m = 0; m < rm; ++m) y[(m0 + m) * N + n] = sum(acc[m]);
}

template <int rm>
inline void int8_rest(const int8_t* w, const uint16_t* w_scales, const QuantizedX& q, int64_t m, int64_t n,
                      int64_t K, int64_t N, float* y, int64_t left) {
  if constexpr (rm > 0) {
    if (left == rm) return int8_rows<rm>(w, w_scales, q, m, n, K, N, y);
    int8_rest<rm - 1>(w, w_scales, q, m, n, K, N, y, left);
  }
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

void float_linear(const at::Tensor& x, const at::Tensor& tiles, at::Tensor& y) {
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

void bf16_dot_linear(const at::Tensor& x, const at::Tensor& tiles, at::Tensor& y) {
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

void int8_linear(const at::Tensor& x, const at::Tensor& rows, const at::Tensor& scales, at::Tensor& y) {
  const int64_t K = x.size(1), M = x.size(0), N = y.size(1);
  check_input(x, K);
  check_output(y, M);
  TORCH_CHECK(K % INT8_CHUNK == 0, "int8 products take K in multiples of ", INT8_CHUNK, ", got ", K);
  TORCH_CHECK(rows.scalar_type() == at::kChar && rows.is_contiguous() && rows.device().is_cpu() &&
                  rows.dim() == 2 && rows.size(0) == N && rows.size(1) == K,
              "int8 rows must be a contiguous [", N, ", ", K, "] int8 CPU tensor, got ", rows.sizes());
  TORCH_CHECK(scales.scalar_type() == at::kHalf && scales.is_contiguous() &&
                  scales.numel() == N * (K / INT8_BLOCK),
              "int8 scales must be contiguous float16, one per block of ", INT8_BLOCK, " values of a row");
  const QuantizedX q = quantize_x(x.data_ptr<float>(), M, K);
  const int8_t* w = rows.data_ptr<int8_t>();
  const uint16_t* w_scales = reinterpret_cast<const uint16_t*>(scales.data_ptr());
  float* out = y.data_ptr<float>();
  at::parallel_for(0, N, INT8_GRAIN_ROWS, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      int64_t m = 0;
      for (; m + INT8_ROWS_OF_X <= M; m += INT8_ROWS_OF_X) int8_rows<INT8_ROWS_OF_X>(w, w_scales, q, m, n, K, N, out);
      int8_rest<INT8_ROWS_OF_X - 1>(w, w_scales, q, m, n, K, N, out, M - m);
    }
  });
}

void int4_linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales,
                 const at::Tensor& minimums, int64_t group, at::Tensor& y) {
  const int64_t K = x.size(1), M = x.size(0), N = y.size(1);
  check_input(x, K);
  check_output(y, M);
  check_tiles(tiles, at::kByte, N, K, K / 2);
  TORCH_CHECK(group % INT4_BLOCK == 0 && K % group == 0, "the int4 group must be a multiple of 32 dividing K");
  const int64_t groups = K / group, tiles_count = (N + TILE_ROWS - 1) / TILE_ROWS;
  for (const at::Tensor* t : {&scales, &minimums})
    TORCH_CHECK(t->scalar_type() == at::kHalf && t->numel() == tiles_count * TILE_ROWS * groups &&
                    t->is_contiguous(),
                "int4 scales and minimums must be contiguous float16, one per row and group");
  at::Tensor x_sums = x.view({M, groups, group}).sum(-1).contiguous();
  Int4Tiles w{tiles.data_ptr<uint8_t>(), reinterpret_cast<const uint16_t*>(scales.data_ptr()),
              reinterpret_cast<const uint16_t*>(minimums.data_ptr()), K, group};
  const float* xs = x.data_ptr<float>();
  const float* sums = x_sums.data_ptr<float>();
  float* out = y.data_ptr<float>();
  at::parallel_for(0, tiles_count, GRAIN_TILES, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      int64_t m = 0;
      for (; m + INT4_ROWS_OF_X <= M; m += INT4_ROWS_OF_X) int4_tile<INT4_ROWS_OF_X>(w, tile, xs, sums, m, out, N);
      for (; m < M; ++m) int4_tile<1>(w, tile, xs, sums, m, out, N);
    }
  });
}

}  // namespace

// Each writes x @ W.T into out [M, N]: N is out's width. Registered for CPU tensors only, so that torch.compile
// can be given a fake (shape-only) version of each.
TORCH_LIBRARY(sqlscout_cpu, m) {
  m.def("float_linear(Tensor x, Tensor tiles, Tensor(a!) out) -> ()");
  m.def("bf16_dot_linear(Tensor x, Tensor tiles, Tensor(a!) out) -> ()");
  m.def("int8_linear(Tensor x, Tensor tiles, Tensor scales, Tensor(a!) out) -> ()");
  m.def("int4_linear(Tensor x, Tensor tiles, Tensor scales, Tensor minimums, int group, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) {
  m.impl("float_linear", &float_linear);
  m.impl("bf16_dot_linear", &bf16_dot_linear);
  m.impl("int8_linear", &int8_linear);
  m.impl("int4_linear", &int4_linear);
}
