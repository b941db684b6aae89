// A gated attention layer's inputs on the CPU, from its QKV projection's output in one pass: each query head's
// RMSNorm and rotary embedding, its output gate copied out beside it, and each key head's norm and rotation
// written with its values into the KV cache at the tokens' positions. The torch reference (the composition in
// kernels.attention_inputs) takes about twenty small ops a layer, which cost a decode token more than their
// arithmetic. Same roundings to the activations' dtype (after the norm, after the rotation); the angles' cos and
// sin in fp32 from the fp32 product of position and frequency, as the reference computes them.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

namespace {

// The head's dim values x RMS-normed with the zero-centred weight (1 + w), rotated by the angles whose cos and sin
// are given (rotate_half over the first 2 * half dims), into out.
template <class T>
void norm_and_rotate(const T* x, const T* weight, float eps, const float* cos, const float* sin, int64_t half,
                     int64_t dim, T* out, float* normed) {
  float squares = 0.0f;
  for (int64_t i = 0; i < dim; ++i) squares += float(x[i]) * float(x[i]);
  const float inverse = 1.0f / std::sqrt(squares / float(dim) + eps);
  // Rounded to T, as the norm's output is before the rotation reads it.
  for (int64_t i = 0; i < dim; ++i) normed[i] = float(T(float(x[i]) * inverse * (1.0f + float(weight[i]))));
  for (int64_t i = 0; i < half; ++i) {
    out[i] = T(normed[i] * cos[i] - normed[i + half] * sin[i]);
    out[i + half] = T(normed[i + half] * cos[i] + normed[i] * sin[i]);
  }
  for (int64_t i = 2 * half; i < dim; ++i) out[i] = T(normed[i]);
}

template <class T>
void prepare(const at::Tensor& projected, const at::Tensor& q_norm, const at::Tensor& k_norm, double eps,
             const at::Tensor& positions, const at::Tensor& inv_freq, at::Tensor& k_cache, at::Tensor& v_cache,
             at::Tensor& query, at::Tensor& gate) {
  const int64_t batch = projected.size(0), tokens = projected.size(1), width = projected.size(2);
  const int64_t dim = q_norm.size(0), kv_heads = k_cache.size(1), q_heads = query.size(2);
  const int64_t half = inv_freq.size(0);
  const T *in = projected.data_ptr<T>(), *qw = q_norm.data_ptr<T>(), *kw = k_norm.data_ptr<T>();
  const int64_t* where = positions.data_ptr<int64_t>();
  const float* frequencies = inv_freq.data_ptr<float>();
  T *keys = k_cache.data_ptr<T>(), *values = v_cache.data_ptr<T>();
  T *queries = query.data_ptr<T>(), *gates = gate.data_ptr<T>();
  at::parallel_for(0, batch * tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> cos(half), sin(half), normed(dim);
    for (int64_t token = begin; token < end; ++token) {
      const int64_t b = token / tokens, position = where[token];
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(position) * frequencies[i];
        cos[i] = std::cos(angle);
        sin[i] = std::sin(angle);
      }
      const T* row = in + token * width;
      for (int64_t h = 0; h < q_heads; ++h) {
        T* q_out = queries + (token * q_heads + h) * dim;
        norm_and_rotate(row + h * 2 * dim, qw, float(eps), cos.data(), sin.data(), half, dim, q_out, normed.data());
        std::copy_n(row + h * 2 * dim + dim, dim, gates + (token * q_heads + h) * dim);
      }
      const T *key_row = row + q_heads * 2 * dim, *value_row = key_row + kv_heads * dim;
      for (int64_t h = 0; h < kv_heads; ++h) {
        const int64_t k_at = b * k_cache.stride(0) + h * k_cache.stride(1) + position * k_cache.stride(2);
        const int64_t v_at = b * v_cache.stride(0) + h * v_cache.stride(1) + position * v_cache.stride(2);
        norm_and_rotate(key_row + h * dim, kw, float(eps), cos.data(), sin.data(), half, dim, keys + k_at,
                        normed.data());
        std::copy_n(value_row + h * dim, dim, values + v_at);
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> attention_inputs(const at::Tensor& projected, const at::Tensor& q_norm,
                                                    const at::Tensor& k_norm, double eps, const at::Tensor& positions,
                                                    const at::Tensor& inv_freq, at::Tensor& k_cache,
                                                    at::Tensor& v_cache) {
  const auto type = projected.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kBFloat16, "projected must be float32 or bfloat16, got ", type);
  TORCH_CHECK(projected.dim() == 3 && projected.is_contiguous() && projected.device().is_cpu(),
              "projected must be a contiguous [B, T, P] CPU tensor");
  const int64_t batch = projected.size(0), tokens = projected.size(1), dim = q_norm.numel();
  for (const at::Tensor* w : {&q_norm, &k_norm})
    TORCH_CHECK(w->scalar_type() == type && w->is_contiguous() && w->dim() == 1 && w->numel() == dim,
                "q_norm and k_norm must be contiguous [D] tensors of projected's dtype");
  for (const at::Tensor* c : {&k_cache, &v_cache})
    TORCH_CHECK(c->scalar_type() == type && c->device().is_cpu() && c->dim() == 4 && c->size(0) == batch &&
                    c->size(3) == dim && c->stride(3) == 1 && c->sizes() == k_cache.sizes(),
                "the KV caches must be [B, Hkv, S, D] CPU tensors of projected's dtype, each position's D values "
                "contiguous");
  const int64_t kv_heads = k_cache.size(1), query_width = projected.size(2) - 2 * kv_heads * dim;
  TORCH_CHECK(query_width > 0 && query_width % (2 * dim) == 0, "projected must hold Hq * 2D + 2 * Hkv * D values");
  TORCH_CHECK(inv_freq.scalar_type() == at::kFloat && inv_freq.is_contiguous() && inv_freq.dim() == 1 &&
                  2 * inv_freq.size(0) <= dim,
              "inv_freq must be a contiguous float32 [R / 2] tensor, R at most D");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.is_contiguous() && positions.dim() == 2 &&
                  positions.size(0) == batch && positions.size(1) == tokens,
              "positions must be a contiguous int64 [B, T] tensor");
  const int64_t* where = positions.data_ptr<int64_t>();
  for (int64_t i = 0; i < positions.numel(); ++i)
    TORCH_CHECK(where[i] >= 0 && where[i] < k_cache.size(2), "position ", where[i], " is outside the cache's ",
                k_cache.size(2));
  at::Tensor query = at::empty({batch, tokens, query_width / (2 * dim), dim}, projected.options());
  at::Tensor gate = at::empty_like(query);
  if (type == at::kFloat)
    prepare<float>(projected, q_norm, k_norm, eps, positions, inv_freq, k_cache, v_cache, query, gate);
  else
    prepare<c10::BFloat16>(projected, q_norm, k_norm, eps, positions, inv_freq, k_cache, v_cache, query, gate);
  return {query, gate};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) {
  m.def(
      "attention_inputs(Tensor projected, Tensor q_norm, Tensor k_norm, float eps, Tensor positions, "
      "Tensor inv_freq, Tensor(a!) k_cache, Tensor(b!) v_cache) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) { m.impl("attention_inputs", &attention_inputs); }
