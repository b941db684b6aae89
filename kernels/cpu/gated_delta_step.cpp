// One token of the gated delta rule per row on the CPU, fused: the state [B, Hv, dk, dv] (fp32, in place) is
// decayed, read for its prediction of v, corrected by the delta and read for the output in two passes over each
// head's 64 KB (which stays in cache between them), where the op-by-op torch reference
// (kernels/reference/gated_delta_rule.py, `_step`) makes four passes and a dozen small ops a layer. Same math,
// same order of operations per element; sums run in another order (fp32 rounding apart).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <initializer_list>
#include <vector>

namespace {

constexpr float NORM_EPS = 1e-6f;  // l2_normalize's
constexpr float SOFTPLUS_THRESHOLD = 20.0f;  // torch's softplus is the identity above it

inline float softplus(float x) { return x > SOFTPLUS_THRESHOLD ? x : std::log1p(std::exp(x)); }

// x (dk values) times rsqrt(sum of squares + eps), then times scale: l2_normalize, then the query's scaling.
template <class T>
void normalized(const T* x, int64_t dk, float scale, float* out) {
  float squares = 0.0f;
  for (int64_t i = 0; i < dk; ++i) squares += float(x[i]) * float(x[i]);
  const float inverse = 1.0f / std::sqrt(squares + NORM_EPS);
  for (int64_t i = 0; i < dk; ++i) out[i] = float(x[i]) * inverse * scale;
}

template <class T>
void step(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& a, const at::Tensor& b,
          const at::Tensor& A_log, const at::Tensor& dt_bias, at::Tensor& state, at::Tensor& out) {
  const int64_t batch = q.size(0), key_heads = q.size(2), dk = q.size(3);
  const int64_t value_heads = v.size(2), dv = v.size(3), per_key = value_heads / key_heads;
  const T *qs = q.data_ptr<T>(), *ks = k.data_ptr<T>(), *vs = v.data_ptr<T>();
  const T *as = a.data_ptr<T>(), *bs = b.data_ptr<T>();
  const float *a_log = A_log.data_ptr<float>(), *bias = dt_bias.data_ptr<float>();
  float* states = state.data_ptr<float>();
  T* outs = out.data_ptr<T>();
  const float query_scale = 1.0f / std::sqrt(float(dk));
  at::parallel_for(0, batch * value_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(dk), kf(dk), predicted(dv), delta(dv), o(dv);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / value_heads, h = task % value_heads, kh = h / per_key;
      normalized(qs + (row * key_heads + kh) * dk, dk, query_scale, qf.data());
      normalized(ks + (row * key_heads + kh) * dk, dk, 1.0f, kf.data());
      const float g = -std::exp(a_log[h]) * softplus(float(as[row * value_heads + h]) + bias[h]);
      const float decay = std::exp(g), beta = 1.0f / (1.0f + std::exp(-float(bs[row * value_heads + h])));
      float* s = states + task * dk * dv;
      std::fill(predicted.begin(), predicted.end(), 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        float* line = s + i * dv;
        for (int64_t j = 0; j < dv; ++j) {
          line[j] *= decay;
          predicted[j] += kf[i] * line[j];
        }
      }
      const T* value = vs + (row * value_heads + h) * dv;
      for (int64_t j = 0; j < dv; ++j) delta[j] = (float(value[j]) - predicted[j]) * beta;
      std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t i = 0; i < dk; ++i) {
        float* line = s + i * dv;
        for (int64_t j = 0; j < dv; ++j) {
          line[j] += kf[i] * delta[j];
          o[j] += qf[i] * line[j];
        }
      }
      T* target = outs + (row * value_heads + h) * dv;
      for (int64_t j = 0; j < dv; ++j) target[j] = T(o[j]);
    }
  });
}

void gated_delta_step(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& a,
                      const at::Tensor& b, const at::Tensor& A_log, const at::Tensor& dt_bias, at::Tensor& state,
                      at::Tensor& out) {
  const auto type = v.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kBFloat16, "v must be float32 or bfloat16, got ", type);
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&q, &k, &v, &a, &b, &out})
    TORCH_CHECK(t->scalar_type() == type && t->is_contiguous() && t->device().is_cpu(),
                "q, k, v, a, b and out must be contiguous CPU tensors of v's dtype");
  TORCH_CHECK(q.dim() == 4 && q.size(1) == 1 && k.sizes() == q.sizes(), "q and k must be [B, 1, Hk, dk]");
  TORCH_CHECK(v.dim() == 4 && v.size(1) == 1 && v.size(0) == q.size(0) && v.size(2) % q.size(2) == 0,
              "v must be [B, 1, Hv, dv] with Hv a multiple of Hk");
  TORCH_CHECK(out.sizes() == v.sizes(), "out must have v's shape");
  TORCH_CHECK(a.numel() == v.size(0) * v.size(2) && b.numel() == a.numel(), "a and b must be [B, 1, Hv]");
  for (const at::Tensor* t : {&A_log, &dt_bias})
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous() && t->numel() == v.size(2),
                "A_log and dt_bias must be contiguous float32 [Hv]");
  TORCH_CHECK(state.scalar_type() == at::kFloat && state.is_contiguous() &&
                  state.sizes() == at::IntArrayRef({v.size(0), v.size(2), q.size(3), v.size(3)}),
              "state must be a contiguous float32 [B, Hv, dk, dv] tensor");
  if (type == at::kFloat)
    step<float>(q, k, v, a, b, A_log, dt_bias, state, out);
  else
    step<c10::BFloat16>(q, k, v, a, b, A_log, dt_bias, state, out);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) {
  m.def(
      "gated_delta_step(Tensor q, Tensor k, Tensor v, Tensor a, Tensor b, Tensor A_log, Tensor dt_bias, "
      "Tensor(a!) state, Tensor(b!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) { m.impl("gated_delta_step", &gated_delta_step); }
