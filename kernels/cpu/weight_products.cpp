// Weight-only products for the CPU: y[M, N] = x[M, K] (fp32) @ W[N, K]^T with W stored as fp32, bf16, int8 (one
// scale per row) or int4 (asymmetric: a scale and a minimum per group of K), widened to fp32 a vector at a time in
// registers and accumulated in fp32. A decode step reads every weight once per token, so these products are
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

#include <cstdint>
#include <cstring>

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

inline float sum(f32v v) {
  float lanes[LANES];
  std::memcpy(lanes, &v, sizeof lanes);
  for (int width = LANES / 2; width > 0; width /= 2)
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
}

inline float bf16_to_float(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

inline float half_to_float(uint16_t bits) {
  _Float16 value;
  std::memcpy(&value, &bits, sizeof value);
  return float(value);
}

// 16 bytes widened to 16 int32 lanes, written per instruction set: compilers widen the byte lanes of a generic
// vector one lane at a time.
template <bool is_signed>
inline i32v bytes_to_ints(u8v bytes) {
#if defined(__AVX512F__)
  __m128i packed;
  std::memcpy(&packed, &bytes, sizeof packed);
  __m512i wide = is_signed ? _mm512_cvtepi8_epi32(packed) : _mm512_cvtepu8_epi32(packed);
  return load<i32v>(&wide);
#elif defined(__AVX2__)
  __m128i packed;
  std::memcpy(&packed, &bytes, sizeof packed);
  __m128i upper = _mm_unpackhi_epi64(packed, packed);
  __m256i halves[2] = {is_signed ? _mm256_cvtepi8_epi32(packed) : _mm256_cvtepu8_epi32(packed),
                       is_signed ? _mm256_cvtepi8_epi32(upper) : _mm256_cvtepu8_epi32(upper)};
  return load<i32v>(halves);
#elif defined(__ARM_NEON)
  uint8x16_t raw = vld1q_u8(reinterpret_cast<const uint8_t*>(&bytes));
  int32x4_t quarters[4];
  if (is_signed) {
    int8x16_t values = vreinterpretq_s8_u8(raw);
    int16x8_t low = vmovl_s8(vget_low_s8(values)), high = vmovl_s8(vget_high_s8(values));
    quarters[0] = vmovl_s16(vget_low_s16(low));
    quarters[1] = vmovl_s16(vget_high_s16(low));
    quarters[2] = vmovl_s16(vget_low_s16(high));
    quarters[3] = vmovl_s16(vget_high_s16(high));
  } else {
    uint16x8_t low = vmovl_u8(vget_low_u8(raw)), high = vmovl_u8(vget_high_u8(raw));
    quarters[0] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(low)));
    quarters[1] = vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(low)));
    quarters[2] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(high)));
    quarters[3] = vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(high)));
  }
  return load<i32v>(quarters);
#else
  int32_t lanes[LANES];
  for (int i = 0; i < LANES; ++i) lanes[i] = is_signed ? int32_t(int8_t(bytes[i])) : int32_t(bytes[i]);
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

struct Int8Tiles {
  const int8_t* data;
  int64_t K;
  const uint16_t* scales;  // bf16, one per row
  f32v vector(int64_t tile, int64_t chunk, int64_t r) const {
    return to_floats(bytes_to_ints<true>(load<u8v>(data + (tile * K + chunk * LANES) * TILE_ROWS + r * LANES)));
  }
  float scale(int64_t n) const { return bf16_to_float(scales[n]); }
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
        i32v wide = bytes_to_ints<false>(load<u8v>(bytes + (block / INT4_BLOCK * TILE_ROWS + r) * LANES));
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

void int8_linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, at::Tensor& y) {
  const int64_t K = x.size(1), M = x.size(0), N = y.size(1);
  check_input(x, K);
  check_output(y, M);
  check_tiles(tiles, at::kChar, N, K, K);
  TORCH_CHECK(scales.scalar_type() == at::kBFloat16 && scales.numel() >= N && scales.is_contiguous(),
              "int8 scales must be at least N contiguous bfloat16 values");
  Int8Tiles w{tiles.data_ptr<int8_t>(), K, reinterpret_cast<const uint16_t*>(scales.data_ptr())};
  float_product(w, x.data_ptr<float>(), M, N, K, y.data_ptr<float>());
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
