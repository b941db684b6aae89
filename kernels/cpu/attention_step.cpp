// One query per row of gated GQA attention over a KV cache on the CPU, fused: each query head reads its KV head's
// keys and values once as they are stored (bf16 widened in registers), where the torch reference
// (kernels/reference/attention.py) first copies the whole cache to fp32 for SDPA. Scores, softmax and sums in
// fp32; returns softmax(q K^T * scale) V * sigmoid(gate) in q's dtype.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

namespace {

constexpr int64_t LANES = 16;
using f32v = float __attribute__((vector_size(LANES * 4)));
using u32v = uint32_t __attribute__((vector_size(LANES * 4)));
using u16v = uint16_t __attribute__((vector_size(LANES * 2)));

// LANES values from p widened to fp32 (a bf16 number is the upper half of the fp32 of the same value).
inline f32v lanes(const float* p) {
  f32v v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline f32v lanes(const c10::BFloat16* p) {
  u16v bits;
  std::memcpy(&bits, p, sizeof bits);
  u32v wide = __builtin_convertvector(bits, u32v) << 16;
  f32v v;
  std::memcpy(&v, &wide, sizeof v);
  return v;
}

inline float sum(f32v v) {
  float total = 0.0f;
  for (int64_t i = 0; i < LANES; ++i) total += v[i];
  return total;
}

template <class T, class C>
void attend(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& gate,
            const at::Tensor& start, double scale, at::Tensor& out) {
  const int64_t batch = q.size(0), q_heads = q.size(2), dim = q.size(3), kv_heads = k_cache.size(1);
  const int64_t group = q_heads / kv_heads;
  const T *qs = q.data_ptr<T>(), *gates = gate.data_ptr<T>();
  const C *keys = k_cache.data_ptr<C>(), *values = v_cache.data_ptr<C>();
  const int64_t* starts = start.data_ptr<int64_t>();
  T* outs = out.data_ptr<T>();
  const float factor = float(scale);
  at::parallel_for(0, batch * q_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> query(dim), scores;
    std::vector<f32v> sums(dim / LANES);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / q_heads, head = task % q_heads, kv = head / group;
      const int64_t length = std::min(starts[row] + 1, k_cache.size(2));
      const C* k = keys + row * k_cache.stride(0) + kv * k_cache.stride(1);
      const C* v = values + row * v_cache.stride(0) + kv * v_cache.stride(1);
      const T* x = qs + task * dim;
      for (int64_t d = 0; d < dim; ++d) query[d] = float(x[d]);
      scores.resize(length);
      float largest = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < length; ++s) {
        const C* key = k + s * k_cache.stride(2);
        f32v dot = {};
        for (int64_t d = 0; d < dim; d += LANES) dot += lanes(query.data() + d) * lanes(key + d);
        scores[s] = sum(dot) * factor;
        largest = std::max(largest, scores[s]);
      }
      float total = 0.0f;
      for (int64_t s = 0; s < length; ++s) total += scores[s] = std::exp(scores[s] - largest);
      std::fill(sums.begin(), sums.end(), f32v{});
      for (int64_t s = 0; s < length; ++s) {
        const C* value = v + s * v_cache.stride(2);
        const float weight = scores[s];
        for (int64_t c = 0; c < dim / LANES; ++c) sums[c] += weight * lanes(value + c * LANES);
      }
      const T* g = gates + task * dim;
      T* target = outs + task * dim;
      for (int64_t d = 0; d < dim; ++d)
        target[d] = T(sums[d / LANES][d % LANES] / total * (1.0f / (1.0f + std::exp(-float(g[d])))));
    }
  });
}

template <class T>
void attend_cache(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& gate,
                  const at::Tensor& start, double scale, at::Tensor& out) {
  if (k_cache.scalar_type() == at::kFloat)
    attend<T, float>(q, k_cache, v_cache, gate, start, scale, out);
  else
    attend<T, c10::BFloat16>(q, k_cache, v_cache, gate, start, scale, out);
}

void attention_step(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& gate,
                    const at::Tensor& start, double scale, at::Tensor& out) {
  const auto type = q.scalar_type(), cache_type = k_cache.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kBFloat16, "q must be float32 or bfloat16, got ", type);
  TORCH_CHECK(cache_type == at::kFloat || cache_type == at::kBFloat16, "the KV cache must be float32 or bfloat16");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&q, &gate, &out})
    TORCH_CHECK(t->scalar_type() == type && t->is_contiguous() && t->device().is_cpu() && t->sizes() == q.sizes(),
                "q, gate and out must be contiguous CPU tensors of one dtype and shape");
  TORCH_CHECK(q.dim() == 4 && q.size(1) == 1 && q.size(3) % LANES == 0, "q must be [B, 1, Hq, D], D a multiple of ",
              LANES);
  for (const at::Tensor* t : {&k_cache, &v_cache})
    TORCH_CHECK(t->scalar_type() == cache_type && t->device().is_cpu() && t->dim() == 4 && t->size(0) == q.size(0) &&
                    t->size(3) == q.size(3) && t->stride(3) == 1 && t->sizes() == k_cache.sizes() &&
                    t->strides() == k_cache.strides(),
                "the KV caches must be [B, Hkv, S, D] CPU tensors alike, each position's D values contiguous");
  TORCH_CHECK(q.size(2) % k_cache.size(1) == 0, "query heads must be a multiple of KV heads");
  TORCH_CHECK(start.scalar_type() == at::kLong && start.is_contiguous() && start.numel() == q.size(0),
              "start must be a contiguous int64 [B] tensor");
  if (type == at::kFloat)
    attend_cache<float>(q, k_cache, v_cache, gate, start, scale, out);
  else
    attend_cache<c10::BFloat16>(q, k_cache, v_cache, gate, start, scale, out);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) {
  m.def(
      "attention_step(Tensor q, Tensor k_cache, Tensor v_cache, Tensor gate, Tensor start, float scale, "
      "Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) { m.impl("attention_step", &attention_step); }
