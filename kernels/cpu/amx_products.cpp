// bf16 weights times bf16 activations on AMX tiles (Intel Xeons since Sapphire Rapids), y[M, N] in fp32.
// The dot-product kernel (weight_products.cpp) multiplies each row of x by the weights with vector instructions of
// their own, so a verify pass of 5 rows costs up to 1.7 times one row there; a tile product multiplies up to 16 rows
// of x by 16 rows of weights in one instruction, and a pass of up to 16 rows streams the weights as one row does.
//
// Layout (kernels/reference/weight_products.py, amx_tiles): per group of AMX_ROWS rows of W and block of AMX_K
// values of K, 1 KB: pair p (values 2p and 2p + 1) of the group's 16 rows side by side, which is the B operand of
// TDPBF16PS as it is loaded (64 bytes a line); the groups follow each other, each its blocks in order, so a thread
// reads its groups as one stream. x's rows are the A operand as they lie in memory and y's [rows, 16] block the C
// tile. Each row of x is a row of the tile, multiplied independently of the others: a row's products are the same
// whatever M is, so a verify pass rounds as the decode steps it stands for. Products of bf16 pairs are exact and
// summed in fp32 (denormals flushed, as the instruction does).
//
// Also here: the layout's rows written out row-major (for the dense products of a prefill), and amx_ready, whether
// this build has the products and Linux lets the process use the tiles.

#include <ATen/ops/zeros.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define SQLSCOUT_AMX 1
#endif

namespace {

constexpr int64_t AMX_ROWS = 16;                 // rows of W in a group; rows of x in a tile at most
constexpr int64_t AMX_K = 32;                    // values of K in a block: 64 bytes of bf16
constexpr int64_t AMX_BLOCK = AMX_ROWS * AMX_K;  // values in a group's block
// Tiles of rows of x multiplied per pass over a group's blocks: a group's weights are loaded once per 32 rows of x.
constexpr int64_t PASS_TILES = 2;
// Groups a thread takes at least.
constexpr int64_t GRAIN_GROUPS = 4;

#ifdef SQLSCOUT_AMX
// Linux gives a process AMX's tile state only once it asks (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA,
// feature 18); the permission holds for all its threads.
constexpr int ARCH_REQ_XCOMP_PERM = 0x1023;
constexpr int XFEATURE_XTILEDATA = 18;

bool amx_permitted() {
  static const bool permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
  return permitted;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Tile shapes for passes over `rows` rows of x a tile (the calling thread's; released by _tile_release): B tiles 5
// and 6 hold AMX_ROWS rows of weights (pairs of values), every other tile `rows` rows.
void configure_tiles(int64_t rows) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = AMX_K * 2;
    config.rows[t] = t == 5 || t == 6 ? AMX_ROWS : rows;
  }
  _tile_loadconfig(&config);
}

// The tile numbers are literals, as GCC's intrinsics paste them into the assembly. C tiles 0 and 1 sum a pass's
// first tile of rows of x over the even and the odd blocks, 2 and 3 its second's; A tiles 4 and 7 take the rows'
// values of an even and an odd block, B tiles 5 and 6 the weights. Two chains of products, each with tiles of its
// own, let a block's loads run while the previous block is multiplied.
#define SQLSCOUT_EVEN_BLOCK(c, values) \
  do {                                 \
    _tile_loadd(4, (values), pitch);   \
    _tile_dpbf16ps(c, 4, 5);           \
  } while (0)
#define SQLSCOUT_ODD_BLOCK(c, values) \
  do {                                \
    _tile_loadd(7, (values), pitch);  \
    _tile_dpbf16ps(c, 7, 6);          \
  } while (0)

// y[tiles * rows, columns] (pitch y_pitch floats) = `tiles` (1 or 2) tiles of rows of x (pitch K values) times a
// group's K / AMX_K blocks: the even blocks' sum plus the odd blocks', whatever the number of tiles, so that a row
// of x gets the same result in any pass.
void group_pass(const uint16_t* group, const uint16_t* x, int64_t rows, int64_t tiles, int64_t K, float* y,
                int64_t columns, int64_t y_pitch) {
  const int64_t pitch = K * 2, blocks = K / AMX_K, tile_values = rows * K;
  _tile_zero(0);
  _tile_zero(1);
  if (tiles > 1) {
    _tile_zero(2);
    _tile_zero(3);
  }
  int64_t b = 0;
  for (; b + 1 < blocks; b += 2) {
    // The next two blocks: tile loads alone keep too few reads in flight to stream memory at its speed.
    const char* next = reinterpret_cast<const char*>(group + (b + 2) * AMX_BLOCK);
    for (int64_t line = 0; line < 2 * AMX_BLOCK * 2; line += 64) __builtin_prefetch(next + line);
    _tile_loadd(5, group + b * AMX_BLOCK, AMX_K * 2);
    _tile_loadd(6, group + (b + 1) * AMX_BLOCK, AMX_K * 2);
    const uint16_t* values = x + b * AMX_K;
    SQLSCOUT_EVEN_BLOCK(0, values);
    SQLSCOUT_ODD_BLOCK(1, values + AMX_K);
    if (tiles > 1) {
      SQLSCOUT_EVEN_BLOCK(2, values + tile_values);
      SQLSCOUT_ODD_BLOCK(3, values + tile_values + AMX_K);
    }
  }
  if (b < blocks) {
    _tile_loadd(5, group + b * AMX_BLOCK, AMX_K * 2);
    SQLSCOUT_EVEN_BLOCK(0, x + b * AMX_K);
    if (tiles > 1) SQLSCOUT_EVEN_BLOCK(2, x + tile_values + b * AMX_K);
  }
  alignas(64) float sums[2 * PASS_TILES][AMX_ROWS * AMX_ROWS];
  _tile_stored(0, sums[0], AMX_ROWS * 4);
  _tile_stored(1, sums[1], AMX_ROWS * 4);
  if (tiles > 1) {
    _tile_stored(2, sums[2], AMX_ROWS * 4);
    _tile_stored(3, sums[3], AMX_ROWS * 4);
  }
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t n = 0; n < columns; ++n)
        y[(t * rows + m) * y_pitch + n] = sums[2 * t][m * AMX_ROWS + n] + sums[2 * t + 1][m * AMX_ROWS + n];
}
#undef SQLSCOUT_EVEN_BLOCK
#undef SQLSCOUT_ODD_BLOCK

// y [M, N] = x [M, K] (M a multiple of rows, rows <= AMX_ROWS) times the groups of W.
void amx_product(const uint16_t* w, const uint16_t* x, int64_t M, int64_t rows, int64_t N, int64_t K, float* y) {
  const int64_t groups = (N + AMX_ROWS - 1) / AMX_ROWS, tiles = M / rows;
  at::parallel_for(0, groups, GRAIN_GROUPS, [&](int64_t begin, int64_t end) {
    configure_tiles(rows);
    for (int64_t g = begin; g < end; ++g) {
      const int64_t n0 = g * AMX_ROWS, columns = std::min(AMX_ROWS, N - n0);
      for (int64_t t = 0; t < tiles; t += PASS_TILES)
        group_pass(w + g * AMX_ROWS * K, x + t * rows * K, rows, std::min(PASS_TILES, tiles - t), K,
                   y + t * rows * N + n0, columns, N);
    }
    _tile_release();
  });
}
#endif

bool amx_ready() {
#ifdef SQLSCOUT_AMX
  return amx_permitted();
#else
  return false;
#endif
}

void check_amx_tiles(const at::Tensor& tiles, int64_t N, int64_t K) {
  TORCH_CHECK(tiles.scalar_type() == at::kBFloat16 && tiles.dim() == 2 && tiles.is_contiguous() &&
                  tiles.device().is_cpu(),
              "AMX tiles must be a contiguous bfloat16 [N, K] CPU tensor");
  TORCH_CHECK(K % AMX_K == 0 && tiles.size(1) == K, "AMX tiles take K in multiples of ", AMX_K, " (as x), got ",
              tiles.size(1));
  TORCH_CHECK(tiles.size(0) == (N + AMX_ROWS - 1) / AMX_ROWS * AMX_ROWS, "AMX tiles of ", tiles.size(0),
              " rows do not hold the groups of a matrix of ", N, " rows");
}

// y [M, N] fp32 = x [M, K] bf16 @ W.T, W in AMX tiles (K padded to AMX_K, rows to AMX_ROWS).
void amx_bf16_linear_out(const at::Tensor& x, const at::Tensor& tiles, at::Tensor& y) {
  const int64_t M = x.size(0), K = x.size(1), N = y.size(1);
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2 && x.is_contiguous() && x.device().is_cpu(),
              "x must be a contiguous [M, K] bfloat16 CPU tensor");
  check_output(y, M);
  check_amx_tiles(tiles, N, K);
  TORCH_CHECK(amx_ready(), "AMX products need a CPU with AMX tiles, a build for it, and Linux's permission");
#ifdef SQLSCOUT_AMX
  if (M == 0) return;
  const uint16_t* w = reinterpret_cast<const uint16_t*>(tiles.data_ptr());
  const int64_t rows = std::min(M, AMX_ROWS);
  if (M % rows == 0) {
    amx_product(w, reinterpret_cast<const uint16_t*>(x.data_ptr()), M, rows, N, K, y.data_ptr<float>());
    return;
  }
  // More than one tile of rows, the last one short: zero rows fill it.
  const int64_t padded = (M + rows - 1) / rows * rows;
  at::Tensor full_x = at::zeros({padded, K}, x.options());
  full_x.narrow(0, 0, M).copy_(x);
  at::Tensor full_y = at::empty({padded, N}, y.options());
  amx_product(w, reinterpret_cast<const uint16_t*>(full_x.data_ptr()), padded, rows, N, K, full_y.data_ptr<float>());
  y.copy_(full_y.narrow(0, 0, M));
#endif
}

at::Tensor amx_bf16_linear(const at::Tensor& x, const at::Tensor& tiles, int64_t n) {
  at::Tensor y = products(x, n);
  amx_bf16_linear_out(x, tiles, y);
  return y;
}

// out [rows, K] (fp32 or bf16) = rows first .. first + rows - 1 of a matrix in AMX tiles, row-major.
void amx_untile_rows_out(const at::Tensor& tiles, int64_t first, at::Tensor& out) {
  const int64_t K = tiles.size(1), count = out.size(0);
  TORCH_CHECK(out.dim() == 2 && out.size(1) == K && out.is_contiguous() && out.device().is_cpu() &&
                  (out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16),
              "out must be a contiguous float32 or bfloat16 [rows, K] CPU tensor");
  check_amx_tiles(tiles, tiles.size(0), K);
  TORCH_CHECK(first >= 0 && first + count <= tiles.size(0), "rows ", first, " .. ", first + count,
              " lie outside the tiles' ", tiles.size(0));
  // A pair of bf16 values moves as one 32-bit word: word p of row i in a block is pair p of that row.
  const uint32_t* words = reinterpret_cast<const uint32_t*>(tiles.data_ptr());
  const int64_t pairs = AMX_K / 2, blocks = K / AMX_K;
  const bool wide = out.scalar_type() == at::kFloat;
  uint8_t* base = reinterpret_cast<uint8_t*>(out.data_ptr());
  at::parallel_for(first, first + count, AMX_ROWS, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const uint32_t* row = words + (n / AMX_ROWS * blocks * pairs) * AMX_ROWS + n % AMX_ROWS;
      if (wide) {
        float* target = reinterpret_cast<float*>(base) + (n - first) * K;
        for (int64_t p = 0; p < blocks * pairs; ++p) {
          const uint32_t pair = row[p * AMX_ROWS];
          const uint32_t low = pair << 16, high = pair & 0xFFFF0000u;
          std::memcpy(target + 2 * p, &low, 4);
          std::memcpy(target + 2 * p + 1, &high, 4);
        }
      } else {
        uint32_t* target = reinterpret_cast<uint32_t*>(base) + (n - first) * K / 2;
        for (int64_t p = 0; p < blocks * pairs; ++p) target[p] = row[p * AMX_ROWS];
      }
    }
  });
}

at::Tensor amx_untile_rows(const at::Tensor& tiles, int64_t first, int64_t count, at::ScalarType dtype) {
  at::Tensor out = at::empty({count, tiles.size(1)}, tiles.options().dtype(dtype));
  amx_untile_rows_out(tiles, first, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) {
  m.def("amx_ready() -> bool", &amx_ready);
  m.def("amx_bf16_linear(Tensor x, Tensor tiles, int n) -> Tensor");
  m.def("amx_bf16_linear.out(Tensor x, Tensor tiles, Tensor(a!) out) -> ()");
  m.def("amx_untile_rows(Tensor tiles, int first, int count, ScalarType dtype) -> Tensor");
  m.def("amx_untile_rows.out(Tensor tiles, int first, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) {
  m.impl("amx_bf16_linear", &amx_bf16_linear);
  m.impl("amx_bf16_linear.out", &amx_bf16_linear_out);
  m.impl("amx_untile_rows", &amx_untile_rows);
  m.impl("amx_untile_rows.out", &amx_untile_rows_out);
}
