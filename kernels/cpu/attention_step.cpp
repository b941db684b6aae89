// Gated GQA attention of a decode step's query per row over a KV cache on the CPU, fused: the query heads of a KV
// head's group read its keys and values once between them as they are stored (bf16 widened in registers), where the
// torch reference (kernels/reference/attention.py) first copies the whole cache to fp32 for SDPA. Scores, softmax and
// sums in fp32; returns softmax(q K^T * scale) V * sigmoid(gate) in q's dtype. The T queries of a verify pass run as T
// steps would, position t of row b over the first start[b] + t + 1 positions, each computed as a step computes it,
// their task's keys and values read from cache after the first.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "vectors.h"

namespace {

using sqlscout::f32r;
using sqlscout::f32v;
using sqlscout::LANES;
using sqlscout::REGISTER_LANES;
using sqlscout::sum;
using sqlscout::widen;

// Query heads a task takes at most: the heads of a KV head's group read each key and value once between them,
// with one sum each in flight (a lone sum waits on its previous multiply-add every step); more would spill the
// accumulators of the value pass.
constexpr int HEADS_PER_TASK = 4;
// Register-wide vectors of a head's values the value pass sums at once per query head: HEADS_PER_TASK *
// VALUE_VECTORS accumulators, half the registers, the rest for the values and the weights.
constexpr int VALUE_VECTORS = sqlscout::REGISTERS / (2 * HEADS_PER_TASK);

// Keys or values of one KV head: position s's dim values start at data + s * stride.
template <class C>
struct Positions {
  const C* data;
  int64_t stride, length;
  const C* at(int64_t s) const { return data + s * stride; }
};

// exp(score - largest) of each of a head's scores, in place; returns their sum.
inline float exponentiate(float* scores, int64_t length) {
  const float largest = *std::max_element(scores, scores + length);
  f32v lanes = {};
  int64_t s = 0;
  for (; s + LANES <= length; s += LANES) {
    const f32v e = sqlscout::exp(widen(scores + s) - largest);
    sqlscout::narrow(e, scores + s);
    lanes += e;
  }
  float total = sum(lanes);
  for (; s < length; ++s) total += scores[s] = std::exp(scores[s] - largest);
  return total;
}

// V register-wide vectors of values at column d0 of the sum over positions of each head's weights (scores) times
// the values, into out.
template <int H, int V, class C>
void weigh(const float* scores, const Positions<C>& values, int64_t d0, int64_t dim, float* out) {
  f32r sums[H][V] = {};
  for (int64_t s = 0; s < values.length; ++s) {
    const C* value = values.at(s) + d0;
    for (int c = 0; c < V; ++c) {
      const f32r widened = widen<REGISTER_LANES>(value + c * REGISTER_LANES);
      for (int g = 0; g < H; ++g) sums[g][c] += scores[g * values.length + s] * widened;
    }
  }
  for (int g = 0; g < H; ++g)
    for (int c = 0; c < V; ++c) sqlscout::narrow(sums[g][c], out + g * dim + d0 + c * REGISTER_LANES);
}

// H query heads (fp32, dim values each) against one KV head: softmax(q K^T * factor) V into out [H, dim] (fp32).
// H is a constant so that the heads' sums stay in registers, which are register-wide vectors for that reason.
template <int H, class C>
void attend_heads(const float* query, int64_t dim, const Positions<C>& keys, const Positions<C>& values,
                  float factor, float* scores, float* out) {
  const int64_t length = keys.length;
  for (int64_t s = 0; s < length; ++s) {
    const C* key = keys.at(s);
    f32r dots[H] = {};
    for (int64_t d = 0; d < dim; d += REGISTER_LANES) {
      const f32r widened = widen<REGISTER_LANES>(key + d);
      for (int g = 0; g < H; ++g) dots[g] += widen<REGISTER_LANES>(query + g * dim + d) * widened;
    }
    for (int g = 0; g < H; ++g) scores[g * length + s] = sum(dots[g]) * factor;
  }
  float totals[H];
  for (int g = 0; g < H; ++g) totals[g] = exponentiate(scores + g * length, length);
  int64_t d0 = 0;
  for (; d0 + VALUE_VECTORS * REGISTER_LANES <= dim; d0 += VALUE_VECTORS * REGISTER_LANES)
    weigh<H, VALUE_VECTORS>(scores, values, d0, dim, out);
  for (; d0 < dim; d0 += REGISTER_LANES) weigh<H, 1>(scores, values, d0, dim, out);
  for (int g = 0; g < H; ++g)
    for (int64_t d = 0; d < dim; ++d) out[g * dim + d] /= totals[g];
}

template <int H, class C>
void attend_some(int64_t heads, const float* query, int64_t dim, const Positions<C>& keys,
                 const Positions<C>& values, float factor, float* scores, float* out) {
  if constexpr (H > 0) {
    if (heads == H) return attend_heads<H>(query, dim, keys, values, factor, scores, out);
    attend_some<H - 1>(heads, query, dim, keys, values, factor, scores, out);
  }
}

template <class T, class C>
void attend(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& gate,
            const at::Tensor& start, double scale, at::Tensor& out) {
  const int64_t batch = q.size(0), positions = q.size(1), q_heads = q.size(2), dim = q.size(3);
  const int64_t kv_heads = k_cache.size(1);
  const int64_t group = q_heads / kv_heads;
  // Fewer heads a task where the tasks would otherwise not fill the threads.
  const int64_t fill = (batch * q_heads + at::get_num_threads() - 1) / at::get_num_threads();
  const int64_t per_task = std::max<int64_t>(1, std::min({int64_t(HEADS_PER_TASK), group, fill}));
  const int64_t tasks_per_kv = (group + per_task - 1) / per_task;
  const T *qs = q.data_ptr<T>(), *gates = gate.data_ptr<T>();
  const C *keys = k_cache.data_ptr<C>(), *values = v_cache.data_ptr<C>();
  const int64_t* starts = start.data_ptr<int64_t>();
  T* outs = out.data_ptr<T>();
  at::parallel_for(0, batch * kv_heads * tasks_per_kv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> query(HEADS_PER_TASK * dim), attended(HEADS_PER_TASK * dim), scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / (kv_heads * tasks_per_kv), kv = task / tasks_per_kv % kv_heads;
      const int64_t head0 = kv * group + task % tasks_per_kv * per_task;
      const int64_t heads = std::min(per_task, (kv + 1) * group - head0);
      // A task's positions in turn, its keys and values staying in cache between them.
      for (int64_t t = 0; t < positions; ++t) {
        const int64_t length = std::min(starts[row] + t + 1, k_cache.size(2));
        const int64_t first = ((row * positions + t) * q_heads + head0) * dim;
        for (int64_t i = 0; i < heads * dim; ++i) query[i] = float(qs[first + i]);
        scores.resize(heads * length);
        const Positions<C> k{keys + row * k_cache.stride(0) + kv * k_cache.stride(1), k_cache.stride(2), length};
        const Positions<C> v{values + row * v_cache.stride(0) + kv * v_cache.stride(1), v_cache.stride(2), length};
        attend_some<HEADS_PER_TASK>(heads, query.data(), dim, k, v, float(scale), scores.data(), attended.data());
        // Times the output gate sigmoid(gate), LANES values at a time (dim is a multiple of LANES).
        for (int64_t i = 0; i < heads * dim; i += LANES) {
          const f32v g = widen(gates + first + i);
          sqlscout::narrow(widen(attended.data() + i) / (1.0f + sqlscout::exp(-g)), outs + first + i);
        }
      }
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

void attention_step_out(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& gate, const at::Tensor& start, double scale, at::Tensor& out) {
  const auto type = q.scalar_type(), cache_type = k_cache.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kBFloat16, "q must be float32 or bfloat16, got ", type);
  TORCH_CHECK(cache_type == at::kFloat || cache_type == at::kBFloat16, "the KV cache must be float32 or bfloat16");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&q, &gate, &out})
    TORCH_CHECK(t->scalar_type() == type && t->is_contiguous() && t->device().is_cpu() && t->sizes() == q.sizes(),
                "q, gate and out must be contiguous CPU tensors of one dtype and shape");
  TORCH_CHECK(q.dim() == 4 && q.size(3) % LANES == 0, "q must be [B, T, Hq, D], D a multiple of ", LANES);
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

at::Tensor attention_step(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& gate, const at::Tensor& start, double scale) {
  at::Tensor out = at::empty_like(q, at::MemoryFormat::Contiguous);
  attention_step_out(q, k_cache, v_cache, gate, start, scale, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) {
  m.def("attention_step(Tensor q, Tensor k_cache, Tensor v_cache, Tensor gate, Tensor start, float scale) -> Tensor");
  m.def(
      "attention_step.out(Tensor q, Tensor k_cache, Tensor v_cache, Tensor gate, Tensor start, float scale, "
      "Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) {
  m.impl("attention_step", &attention_step);
  m.impl("attention_step.out", &attention_step_out);
}
