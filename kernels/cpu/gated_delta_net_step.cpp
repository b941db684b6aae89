// A Gated DeltaNet layer between its two projections, one token per row, fused on the CPU: from the input
// projection's output [conv inputs | z | b | a], the short causal conv and SiLU (its state [B, C, K-1] shifted in
// place), the gated delta rule on the state [B, Hv, dk, dv] (fp32, in place) and the gated RMSNorm of its output by
// silu(z), ready for the output projection. The torch reference (kernels/reference/gated_delta_net.py) composes
// causal_conv1d, gated_delta_rule and gated_rms_norm in a dozen small ops each, four passes over the state where
// this makes two (a head's 64 KB stays in cache between them). Same math and roundings to the activations' dtype;
// sums run in another order (fp32 rounding apart).
// T tokens (a verify pass) run one after another, each exactly as a decode step runs it, the states after each
// token written to the trails; rows marked inactive are left untouched (their outputs are zeros). Each of a row's
// heads (and blocks of conv channels) runs all T tokens in turn, its 64 KB of state staying in cache, and writes
// its own part of the trails: T tokens cost little more than one.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "vectors.h"

namespace {

using sqlscout::f32v;
using sqlscout::LANES;

constexpr float NORM_EPS = 1e-6f;  // l2_normalize's
constexpr float SOFTPLUS_THRESHOLD = 20.0f;  // torch's softplus is the identity above it

inline float softplus(float x) { return x > SOFTPLUS_THRESHOLD ? x : std::log1p(std::exp(x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// x (dk values) times rsqrt(sum of squares + eps), then times scale: l2_normalize, then the query's scaling.
template <class T>
void normalized(const T* x, int64_t dk, float scale, float* out) {
  float squares = 0.0f;
  for (int64_t i = 0; i < dk; ++i) squares += float(x[i]) * float(x[i]);
  const float inverse = 1.0f / std::sqrt(squares + NORM_EPS);
  for (int64_t i = 0; i < dk; ++i) out[i] = float(x[i]) * inverse * scale;
}

// The layer's sizes, from the tensors' shapes.
struct Sizes {
  int64_t batch, tokens, width;  // rows, tokens per row, values per token of the projection's output
  int64_t channels, history;     // conv channels (q, k, v), previous inputs kept (kernel width - 1)
  int64_t key_heads, value_heads, dk, dv;
};

// silu of n fp32 values into T, LANES at a time (a scalar exp a value costs more than a layer's conv).
template <class T>
void silu_into(const float* x, int64_t n, T* out) {
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES) sqlscout::narrow(sqlscout::silu(sqlscout::widen(x + i)), out + i);
  for (; i < n; ++i) out[i] = T(sqlscout::silu(x[i]));
}

// Channels of the conv a thread takes at once: a one-row step splits its channels between the threads.
constexpr int64_t CONV_CHANNELS = 1024;

// One token of one row, channels [first, last): the conv over its projection `x`, into `mixed` (C values in T, as
// the reference rounds them); `sums` holds CONV_CHANNELS floats of scratch.
template <class T>
void conv_token(const Sizes& s, int64_t first, int64_t last, const T* x, const T* weight, T* state, T* mixed,
                float* sums) {
  const int64_t width = s.history + 1;
  for (int64_t c = first; c < last; ++c) {
    T* past = state + c * s.history;
    const T* w = weight + c * width;
    float total = 0.0f;
    for (int64_t j = 0; j < s.history; ++j) total += float(past[j]) * float(w[j]);
    sums[c - first] = total + float(x[c]) * float(w[s.history]);
    for (int64_t j = 0; j + 1 < s.history; ++j) past[j] = past[j + 1];
    past[s.history - 1] = x[c];
  }
  silu_into(sums, last - first, mixed + first);
}

// Value columns the delta rule takes at once with its sums in registers (AVX-512): three sums of PANEL_VECTORS
// vectors each, 24 of the 32 registers. Built for AVX2 the same code ran at half the generic loop's speed (a
// vector of LANES floats takes two of its sixteen registers), so there, and on NEON, the generic loop runs.
constexpr int64_t PANEL_VECTORS = 8;

// The gated delta rule on V * LANES value columns of one head's state st (lines `stride` floats apart), with its
// sums in registers (the generic loop's arrays go through memory on every line, as the compiler cannot tell them
// from the state): decay the state and predict the values from the key, write the beta-weighted error along the
// key, read the query; o takes the columns' output. Columns are independent, so a head is done panel by panel.
template <int V, class T>
void delta_rule(int64_t dk, int64_t stride, const float* kf, const float* qf, float decay, float beta, const T* value,
                float* st, float* o) {
  f32v predicted[V] = {}, delta[V], out[V] = {};
  for (int64_t i = 0; i < dk; ++i) {
    float* line = st + i * stride;
    for (int c = 0; c < V; ++c) {
      const f32v decayed = sqlscout::load<f32v>(line + c * LANES) * decay;
      std::memcpy(line + c * LANES, &decayed, sizeof decayed);
      predicted[c] += kf[i] * decayed;
    }
  }
  for (int c = 0; c < V; ++c) delta[c] = (sqlscout::widen(value + c * LANES) - predicted[c]) * beta;
  for (int64_t i = 0; i < dk; ++i) {
    float* line = st + i * stride;
    for (int c = 0; c < V; ++c) {
      const f32v updated = sqlscout::load<f32v>(line + c * LANES) + kf[i] * delta[c];
      std::memcpy(line + c * LANES, &updated, sizeof updated);
      out[c] += qf[i] * updated;
    }
  }
  std::memcpy(o, out, sizeof out);
}

// delta_rule over a head's dv columns in panels, for the widths that split into panels of 1, 2, 4 or 8 vectors;
// false (nothing done) for others.
template <class T>
bool delta_rule_in_registers(int64_t dv, int64_t dk, const float* kf, const float* qf, float decay, float beta,
                             const T* value, float* st, float* o) {
#if defined(__AVX512F__)
  const int64_t panel = std::min(dv, PANEL_VECTORS * LANES), vectors = panel / LANES;
  if (dv % LANES || dv % panel || (vectors != 1 && vectors != 2 && vectors != 4 && vectors != 8)) return false;
  for (int64_t c0 = 0; c0 < dv; c0 += panel) {
    const T* v = value + c0;
    float *columns = st + c0, *out = o + c0;
    switch (vectors) {
      case 1: delta_rule<1>(dk, dv, kf, qf, decay, beta, v, columns, out); break;
      case 2: delta_rule<2>(dk, dv, kf, qf, decay, beta, v, columns, out); break;
      case 4: delta_rule<4>(dk, dv, kf, qf, decay, beta, v, columns, out); break;
      default: delta_rule<8>(dk, dv, kf, qf, decay, beta, v, columns, out); break;
    }
  }
  return true;
#else
  return false;
#endif
}

// One value head of one token: the gated delta rule on its state `st`, then the gated norm into `target`.
template <class T>
void head_token(const Sizes& s, const T* mixed, const T* projection, int64_t h, float a_log, float bias,
                const T* norm_weight, float eps, float* st, T* target, std::vector<float>& work) {
  const int64_t dk = s.dk, dv = s.dv, kh = h / (s.value_heads / s.key_heads);
  float *qf = work.data(), *kf = qf + dk, *predicted = kf + dk, *delta = predicted + dv, *o = delta + dv;
  normalized(mixed + kh * dk, dk, 1.0f / std::sqrt(float(dk)), qf);
  normalized(mixed + (s.key_heads + kh) * dk, dk, 1.0f, kf);
  const T* value = mixed + 2 * s.key_heads * dk + h * dv;
  const T* z = projection + s.channels + h * dv;
  const T* gate_b = projection + s.channels + s.value_heads * dv;
  const T* gate_a = gate_b + s.value_heads;
  const float decay = std::exp(-std::exp(a_log) * softplus(float(gate_a[h]) + bias));
  const float beta = sigmoid(float(gate_b[h]));
  if (!delta_rule_in_registers(dv, dk, kf, qf, decay, beta, value, st, o)) {
    std::fill(predicted, predicted + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* line = st + i * dv;
      for (int64_t j = 0; j < dv; ++j) {
        line[j] *= decay;
        predicted[j] += kf[i] * line[j];
      }
    }
    for (int64_t j = 0; j < dv; ++j) delta[j] = (float(value[j]) - predicted[j]) * beta;
    std::fill(o, o + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* line = st + i * dv;
      for (int64_t j = 0; j < dv; ++j) {
        line[j] += kf[i] * delta[j];
        o[j] += qf[i] * line[j];
      }
    }
  }
  // The rule's output is rounded to T before the norm reads it, as the reference's separate ops do.
  float squares = 0.0f;
  for (int64_t j = 0; j < dv; ++j) {
    o[j] = float(T(o[j]));
    squares += o[j] * o[j];
  }
  const float inverse = 1.0f / std::sqrt(squares / float(dv) + eps);
  for (int64_t j = 0; j < dv; ++j) delta[j] = float(z[j]);  // delta is spent: it takes silu(z)
  silu_into(delta, dv, delta);
  for (int64_t j = 0; j < dv; ++j) target[j] = T(float(norm_weight[j]) * (o[j] * inverse) * delta[j]);
}

template <class T>
void layer_step(const Sizes& s, const at::Tensor& projected, const at::Tensor& conv_weight, at::Tensor& conv_state,
                const at::Tensor& A_log, const at::Tensor& dt_bias, at::Tensor& state, const at::Tensor& norm_weight,
                double eps, const bool* active, T* conv_trail, float* recurrent_trail, at::Tensor& out) {
  const T *xs = projected.data_ptr<T>(), *weight = conv_weight.data_ptr<T>(), *norm = norm_weight.data_ptr<T>();
  const float *a_log = A_log.data_ptr<float>(), *bias = dt_bias.data_ptr<float>();
  T* conv = conv_state.data_ptr<T>();
  float* states = state.data_ptr<float>();
  T* outs = out.data_ptr<T>();
  const int64_t conv_size = s.channels * s.history, state_size = s.value_heads * s.dk * s.dv;
  const int64_t out_width = s.value_heads * s.dv;
  const int64_t blocks = (s.channels + CONV_CHANNELS - 1) / CONV_CHANNELS;
  std::vector<T> mixed(s.batch * s.tokens * s.channels);
  // A task takes every token of its channels (then of its head) in order, so that their state stays in cache
  // between tokens and the trails are written by all threads.
  at::parallel_for(0, s.batch * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> sums(CONV_CHANNELS);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / blocks, first = task % blocks * CONV_CHANNELS;
      const int64_t last = std::min(first + CONV_CHANNELS, s.channels);
      T* past = conv + row * conv_size;
      for (int64_t t = 0; t < s.tokens; ++t) {
        const int64_t at = row * s.tokens + t;
        if (!active || active[row])
          conv_token(s, first, last, xs + at * s.width, weight, past, mixed.data() + at * s.channels, sums.data());
        if (conv_trail)
          std::copy_n(past + first * s.history, (last - first) * s.history,
                      conv_trail + at * conv_size + first * s.history);
      }
    }
  });
  const int64_t head_size = s.dk * s.dv;
  at::parallel_for(0, s.batch * s.value_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> work(2 * s.dk + 3 * s.dv);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / s.value_heads, h = task % s.value_heads;
      float* st = states + task * head_size;
      for (int64_t t = 0; t < s.tokens; ++t) {
        const int64_t at = row * s.tokens + t;
        T* target = outs + at * out_width + h * s.dv;
        if (active && !active[row])
          std::fill(target, target + s.dv, T(0.0f));
        else
          head_token(s, mixed.data() + at * s.channels, xs + at * s.width, h, a_log[h], bias[h], norm, float(eps),
                     st, target, work);
        if (recurrent_trail) std::copy_n(st, head_size, recurrent_trail + at * state_size + h * head_size);
      }
    }
  });
}

void check_state(const at::Tensor& t, at::ScalarType type, at::IntArrayRef shape, const char* what) {
  TORCH_CHECK(t.scalar_type() == type && t.is_contiguous() && t.device().is_cpu() && t.sizes() == shape, what,
              " must be a contiguous ", type, " CPU tensor of shape ", shape, ", got ", t.scalar_type(), " ",
              t.sizes());
}

void gated_delta_net_step_out(const at::Tensor& projected, const at::Tensor& conv_weight, at::Tensor& conv_state,
                              const at::Tensor& A_log, const at::Tensor& dt_bias, at::Tensor& state,
                              const at::Tensor& norm_weight, double eps, const std::optional<at::Tensor>& active,
                              const std::optional<at::Tensor>& conv_trail,
                              const std::optional<at::Tensor>& recurrent_trail, at::Tensor& out) {
  const auto type = projected.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kBFloat16, "projected must be float32 or bfloat16, got ", type);
  TORCH_CHECK(projected.dim() == 3 && projected.is_contiguous() && projected.device().is_cpu(),
              "projected must be a contiguous [B, T, P] CPU tensor");
  TORCH_CHECK(state.dim() == 4 && conv_weight.dim() == 2 && norm_weight.dim() == 1,
              "state must be [B, Hv, dk, dv], conv_weight [C, K] and norm_weight [dv]");
  Sizes s{projected.size(0), projected.size(1), projected.size(2), conv_weight.size(0), conv_weight.size(1) - 1,
          0, state.size(1), state.size(2), state.size(3)};
  const int64_t value_width = s.value_heads * s.dv, key_width = (s.channels - value_width) / 2;
  TORCH_CHECK(s.history >= 1 && key_width > 0 && key_width % s.dk == 0, "conv_weight has ", s.channels,
              " channels: not 2 * key heads * dk + value heads * dv");
  s.key_heads = key_width / s.dk;
  TORCH_CHECK(s.value_heads % s.key_heads == 0, "value heads must be a multiple of key heads");
  TORCH_CHECK(s.width == s.channels + value_width + 2 * s.value_heads, "projected must hold ",
              s.channels + value_width + 2 * s.value_heads, " values a token (conv inputs, z, b, a), got ", s.width);
  check_state(conv_weight, type, {s.channels, s.history + 1}, "conv_weight");
  check_state(conv_state, type, {s.batch, s.channels, s.history}, "conv_state");
  check_state(state, at::kFloat, {s.batch, s.value_heads, s.dk, s.dv}, "state");
  check_state(norm_weight, type, {s.dv}, "norm_weight");
  check_state(A_log, at::kFloat, {s.value_heads}, "A_log");
  check_state(dt_bias, at::kFloat, {s.value_heads}, "dt_bias");
  check_state(out, type, {s.batch, s.tokens, value_width}, "out");
  const bool* rows = nullptr;
  if (active) {
    check_state(*active, at::kBool, {s.batch}, "active");
    rows = active->data_ptr<bool>();
  }
  TORCH_CHECK(conv_trail.has_value() == recurrent_trail.has_value(), "the conv and recurrent trails come together");
  const bool trails = conv_trail.has_value();
  if (trails) {
    check_state(*conv_trail, type, {s.batch, s.tokens, s.channels, s.history}, "conv_trail");
    check_state(*recurrent_trail, at::kFloat, {s.batch, s.tokens, s.value_heads, s.dk, s.dv}, "recurrent_trail");
  }
  float* recurrent = trails ? recurrent_trail->data_ptr<float>() : nullptr;
  if (type == at::kFloat)
    layer_step<float>(s, projected, conv_weight, conv_state, A_log, dt_bias, state, norm_weight, eps, rows,
                      trails ? conv_trail->data_ptr<float>() : nullptr, recurrent, out);
  else
    layer_step<c10::BFloat16>(s, projected, conv_weight, conv_state, A_log, dt_bias, state, norm_weight, eps, rows,
                              trails ? conv_trail->data_ptr<c10::BFloat16>() : nullptr, recurrent, out);
}

at::Tensor gated_delta_net_step(const at::Tensor& projected, const at::Tensor& conv_weight, at::Tensor& conv_state,
                                const at::Tensor& A_log, const at::Tensor& dt_bias, at::Tensor& state,
                                const at::Tensor& norm_weight, double eps, const std::optional<at::Tensor>& active,
                                const std::optional<at::Tensor>& conv_trail,
                                const std::optional<at::Tensor>& recurrent_trail) {
  TORCH_CHECK(projected.dim() == 3 && state.dim() == 4, "projected must be [B, T, P] and state [B, Hv, dk, dv]");
  const int64_t width = state.size(1) * state.size(3);
  at::Tensor out = at::empty({projected.size(0), projected.size(1), width}, projected.options());
  gated_delta_net_step_out(projected, conv_weight, conv_state, A_log, dt_bias, state, norm_weight, eps, active,
                           conv_trail, recurrent_trail, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) {
  m.def(
      "gated_delta_net_step(Tensor projected, Tensor conv_weight, Tensor(a!) conv_state, Tensor A_log, "
      "Tensor dt_bias, Tensor(b!) state, Tensor norm_weight, float eps, Tensor? active, Tensor(c!)? conv_trail, "
      "Tensor(d!)? recurrent_trail) -> Tensor");
  m.def(
      "gated_delta_net_step.out(Tensor projected, Tensor conv_weight, Tensor(a!) conv_state, Tensor A_log, "
      "Tensor dt_bias, Tensor(b!) state, Tensor norm_weight, float eps, Tensor? active, Tensor(c!)? conv_trail, "
      "Tensor(d!)? recurrent_trail, Tensor(e!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) {
  m.impl("gated_delta_net_step", &gated_delta_net_step);
  m.impl("gated_delta_net_step.out", &gated_delta_net_step_out);
}
