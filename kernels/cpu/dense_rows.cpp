// Rows of a stored weight matrix written out row-major as plain fp32 or bf16, for the products of many rows (a
// prefill), which multiply densely (oneDNN) a block of rows at a time: one pass from the stored layout to the
// dense one, where the torch reference takes several (unpack, widen, scale, narrow). Each element is the reference's
// value in fp32 (kernels/reference/weight_products.py: dequantize_float, dequantize_int8, dequantize_affine), then
// rounded to bf16 where asked; scale * value + minimum may be one fused multiply-add here, within an fp32 rounding
// of the reference's two steps.
// Built after weight_products.cpp in the same translation unit (library.cpp): it reads that file's layouts.

namespace {

// The 512 values of one chunk in row-major order from their dot-product order: value 32i + 4j + t sits in byte t
// of 32-bit lane i of vector j.
inline void unpermute_chunk(const uint8_t* permuted, uint8_t* ordered) {
  for (int64_t lane = 0; lane < BLOCKS_PER_CHUNK; ++lane)
    for (int64_t vector = 0; vector < CHUNK / VECTOR; ++vector)
      std::memcpy(ordered + lane * BLOCK + vector * 4, permuted + vector * VECTOR + lane * 4, 4);
}

// The eight vectors of an affine chunk, unpacked to one byte per value (still in dot-product order).
template <int bits>
inline void unpack_affine_chunk(const uint8_t* values, uint8_t* unpacked) {
  for (int p = 0; p < CHUNK / VECTOR / 2; ++p) {
    u8x64 low, high;
    unpack_vector_pair<bits>(values, p, low, high);
    std::memcpy(unpacked + 2 * p * VECTOR, &low, VECTOR);
    std::memcpy(unpacked + (2 * p + 1) * VECTOR, &high, VECTOR);
  }
}

template <class Out>
void int8_dense_row(const Int8Rows& w, int64_t n, Out* out) {
  const int64_t blocks = w.K / BLOCK;
  alignas(64) uint8_t ordered[CHUNK];
  for (int64_t chunk = 0; chunk < w.K / CHUNK; ++chunk) {
    unpermute_chunk(reinterpret_cast<const uint8_t*>(w.data + n * w.K + chunk * CHUNK), ordered);
    const int8_t* values = reinterpret_cast<const int8_t*>(ordered);
    for (int64_t b = 0; b < BLOCKS_PER_CHUNK; ++b) {
      const float scale = half_to_float(w.scales[n * blocks + chunk * BLOCKS_PER_CHUNK + b]);
      for (int64_t half = 0; half < BLOCK; half += LANES) {
        const int64_t at = b * BLOCK + half;
        sqlscout::narrow(bytes_to_floats(values + at) * scale, out + chunk * CHUNK + at);
      }
    }
  }
}

template <int bits, class Out>
void affine_dense_row(const AffineRows& w, int64_t n, Out* out) {
  const int64_t chunks = w.K / CHUNK;
  const uint8_t* row = w.data + n * w.row_bytes;
  alignas(64) uint8_t unpacked[CHUNK], ordered[CHUNK];
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const AffineChunk parts = affine_chunk<bits>(row, chunks, chunk);
    unpack_affine_chunk<bits>(parts.values, unpacked);
    unpermute_chunk(unpacked, ordered);
    for (int64_t b = 0; b < BLOCKS_PER_CHUNK; ++b) {
      const float scale = float(parts.scales[b]) * parts.steps[0];
      const float minimum = float(parts.minimums[b]) * parts.steps[1] + parts.steps[2];
      for (int64_t half = 0; half < BLOCK; half += LANES) {
        const int64_t at = b * BLOCK + half;
        sqlscout::narrow(bytes_to_floats(ordered + at) * scale + minimum, out + chunk * CHUNK + at);
      }
    }
  }
}

template <class In, class Out>
void untile_row(const In* tiles, int64_t K, int64_t n, Out* out) {
  const In* tile = tiles + n / TILE_ROWS * TILE_ROWS * K + n % TILE_ROWS * LANES;
  for (int64_t chunk = 0; chunk < K / LANES; ++chunk)
    sqlscout::narrow(sqlscout::widen(tile + chunk * TILE_ROWS * LANES), out + chunk * LANES);
}

// out [rows, K] (fp32 or bf16) = rows first .. first + rows - 1 of the stored matrix; row(n, out_row) writes one,
// for the element type the caller picked.
template <class Row>
void dense_rows(at::Tensor& out, int64_t first, const Row& row) {
  TORCH_CHECK(out.dim() == 2 && out.is_contiguous() && out.device().is_cpu() &&
                  (out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16),
              "out must be a contiguous float32 or bfloat16 [rows, K] CPU tensor");
  const int64_t K = out.size(1);
  at::parallel_for(0, out.size(0), 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (out.scalar_type() == at::kFloat)
        row(first + r, out.data_ptr<float>() + r * K);
      else
        row(first + r, reinterpret_cast<c10::BFloat16*>(out.data_ptr()) + r * K);
    }
  });
}

void check_first_rows(const at::Tensor& out, int64_t first, int64_t stored_rows) {
  TORCH_CHECK(first >= 0 && first + out.size(0) <= stored_rows, "rows ", first, " .. ", first + out.size(0),
              " are not all within the matrix's ", stored_rows, " stored rows");
}

void untile_rows_out(const at::Tensor& tiles, int64_t first, at::Tensor& out) {
  const int64_t K = out.size(1);
  TORCH_CHECK(tiles.scalar_type() == at::kFloat || tiles.scalar_type() == at::kBFloat16,
              "tiled weights must be float32 or bfloat16, got ", tiles.scalar_type());
  TORCH_CHECK(tiles.dim() == 2 && tiles.size(1) == K, "tiles must be [N, ", K, "], got ", tiles.sizes());
  check_tiles(tiles, tiles.scalar_type(), tiles.size(0), K, K * tiles.element_size());
  check_first_rows(out, first, tiles.size(0));
  if (tiles.scalar_type() == at::kFloat) {
    const float* data = tiles.data_ptr<float>();
    dense_rows(out, first, [&](int64_t n, auto* row) { untile_row(data, K, n, row); });
  } else {
    const uint16_t* data = reinterpret_cast<const uint16_t*>(tiles.data_ptr());
    dense_rows(out, first, [&](int64_t n, auto* row) { untile_row(data, K, n, row); });
  }
}

void int8_rows_out(const at::Tensor& rows, const at::Tensor& scales, int64_t first, at::Tensor& out) {
  const int64_t K = out.size(1);
  TORCH_CHECK(K % CHUNK == 0, "int8 rows hold K in multiples of ", CHUNK, ", got ", K);
  TORCH_CHECK(rows.dim() == 2 && rows.size(1) == K, "int8 rows must be [N, ", K, "], got ", rows.sizes());
  check_part(rows, "int8 rows", at::kChar, rows.size(0) * K);
  check_part(scales, "int8 scales", at::kHalf, rows.size(0) * (K / BLOCK));
  check_first_rows(out, first, rows.size(0));
  const Int8Rows w{rows.data_ptr<int8_t>(), reinterpret_cast<const uint16_t*>(scales.data_ptr()), K};
  dense_rows(out, first, [&](int64_t n, auto* row) { int8_dense_row(w, n, row); });
}

void affine_rows_out(const at::Tensor& rows, int64_t bits, int64_t first, at::Tensor& out) {
  TORCH_CHECK(bits == 4 || bits == 6, "affine rows hold 4- or 6-bit values, not ", bits);
  const int64_t K = out.size(1);
  TORCH_CHECK(K % CHUNK == 0, "affine rows hold K in multiples of ", CHUNK, ", got ", K);
  const int64_t row_bytes = affine_row_bytes(K, bits);
  TORCH_CHECK(rows.dim() == 2 && rows.size(1) == row_bytes, "affine rows of K = ", K, " must be [N, ", row_bytes,
              "], got ", rows.sizes());
  check_part(rows, "affine rows", at::kByte, rows.size(0) * row_bytes);
  check_first_rows(out, first, rows.size(0));
  const AffineRows w{rows.data_ptr<uint8_t>(), K, row_bytes};
  dense_rows(out, first, [&](int64_t n, auto* row) {
    if (bits == 4)
      affine_dense_row<4>(w, n, row);
    else
      affine_dense_row<6>(w, n, row);
  });
}

at::Tensor dense(int64_t count, int64_t K, at::ScalarType dtype, const at::Tensor& like) {
  return at::empty({count, K}, like.options().dtype(dtype));
}

at::Tensor untile_rows(const at::Tensor& tiles, int64_t first, int64_t count, at::ScalarType dtype) {
  at::Tensor out = dense(count, tiles.size(1), dtype, tiles);
  untile_rows_out(tiles, first, out);
  return out;
}

at::Tensor int8_rows(const at::Tensor& rows, const at::Tensor& scales, int64_t first, int64_t count,
                     at::ScalarType dtype) {
  at::Tensor out = dense(count, rows.size(1), dtype, rows);
  int8_rows_out(rows, scales, first, out);
  return out;
}

at::Tensor affine_rows(const at::Tensor& rows, int64_t bits, int64_t first, int64_t count, int64_t K,
                       at::ScalarType dtype) {
  at::Tensor out = dense(count, K, dtype, rows);
  affine_rows_out(rows, bits, first, out);
  return out;
}

}  // namespace

// Each gives `count` rows from row `first` of a stored matrix, [count, K] in dtype (fp32 or bf16), with the
// padded columns' zeros.
TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) {
  m.def("untile_rows(Tensor tiles, int first, int count, ScalarType dtype) -> Tensor");
  m.def("untile_rows.out(Tensor tiles, int first, Tensor(a!) out) -> ()");
  m.def("int8_rows(Tensor rows, Tensor scales, int first, int count, ScalarType dtype) -> Tensor");
  m.def("int8_rows.out(Tensor rows, Tensor scales, int first, Tensor(a!) out) -> ()");
  m.def("affine_rows(Tensor rows, int bits, int first, int count, int k, ScalarType dtype) -> Tensor");
  m.def("affine_rows.out(Tensor rows, int bits, int first, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) {
  m.impl("untile_rows", &untile_rows);
  m.impl("untile_rows.out", &untile_rows_out);
  m.impl("int8_rows", &int8_rows);
  m.impl("int8_rows.out", &int8_rows_out);
  m.impl("affine_rows", &affine_rows);
  m.impl("affine_rows.out", &affine_rows_out);
}
