// RMSNorm of each row on the CPU in one pass, with the residual add before it: what the torch reference
// (kernels/reference/rms_norm.py) does in five to eight ops a call, each a pass over the rows with its own
// dispatch. Same roundings to the activations' dtype (the sum before the norm, the output); sums in another
// order. A row's result depends on that row alone, so a verify pass's rows equal decode steps' rows.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

namespace {

template <class T>
void normalize_rows(const at::Tensor& x, const at::Tensor& weight, double eps, bool zero_centered,
                    const at::Tensor* residual, at::Tensor* sum_out, at::Tensor& out) {
  const int64_t width = x.size(-1), rows = x.numel() / width;
  const T *xs = x.data_ptr<T>(), *w = weight.data_ptr<T>();
  const T* adds = residual ? residual->data_ptr<T>() : nullptr;
  T* sums = sum_out ? sum_out->data_ptr<T>() : nullptr;
  T* outs = out.data_ptr<T>();
  const float offset = zero_centered ? 1.0f : 0.0f;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* in = xs + r * width;
      T* target = outs + r * width;
      float squares = 0.0f;
      if (adds) {
        // The sum is rounded to T before the norm reads it, as an unfused model does.
        T* h = sums + r * width;
        for (int64_t i = 0; i < width; ++i) {
          h[i] = T(float(in[i]) + float(adds[r * width + i]));
          squares += float(h[i]) * float(h[i]);
        }
        in = h;
      } else {
        for (int64_t i = 0; i < width; ++i) squares += float(in[i]) * float(in[i]);
      }
      const float inverse = 1.0f / std::sqrt(squares / float(width) + float(eps));
      for (int64_t i = 0; i < width; ++i) target[i] = T(float(in[i]) * inverse * (offset + float(w[i])));
    }
  });
}

void check_like(const at::Tensor& t, const at::Tensor& x, const char* what) {
  TORCH_CHECK(t.scalar_type() == x.scalar_type() && t.is_contiguous() && t.device().is_cpu() && t.sizes() == x.sizes(),
              what, " must be a contiguous CPU tensor of x's dtype and shape");
}

// An empty residual: no add.
void rms_norm_rows_out(const at::Tensor& x, const at::Tensor& weight, double eps, bool zero_centered,
                       const at::Tensor& residual, at::Tensor& sum_out, at::Tensor& out) {
  const auto type = x.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kBFloat16, "x must be float32 or bfloat16, got ", type);
  TORCH_CHECK(x.dim() >= 1 && x.is_contiguous() && x.device().is_cpu(), "x must be a contiguous CPU tensor");
  TORCH_CHECK(weight.scalar_type() == type && weight.is_contiguous() && weight.dim() == 1 &&
                  weight.size(0) == x.size(-1),
              "weight must be a contiguous [", x.size(-1), "] tensor of x's dtype");
  const bool adds = residual.numel() > 0;
  if (adds) {
    check_like(residual, x, "residual");
    check_like(sum_out, x, "sum_out");
  }
  check_like(out, x, "out");
  if (type == at::kFloat)
    normalize_rows<float>(x, weight, eps, zero_centered, adds ? &residual : nullptr, adds ? &sum_out : nullptr, out);
  else
    normalize_rows<c10::BFloat16>(x, weight, eps, zero_centered, adds ? &residual : nullptr,
                                  adds ? &sum_out : nullptr, out);
}

at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps, bool zero_centered) {
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous), none = at::empty({0}, x.options());
  rms_norm_rows_out(x, weight, eps, zero_centered, none, none, out);
  return out;
}

// (norm(x + residual), x + residual).
std::tuple<at::Tensor, at::Tensor> add_rms_norm_rows(const at::Tensor& x, const at::Tensor& residual,
                                                     const at::Tensor& weight, double eps, bool zero_centered) {
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous), sum = at::empty_like(out);
  rms_norm_rows_out(x, weight, eps, zero_centered, residual, sum, out);
  return {out, sum};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) {
  m.def("rms_norm_rows(Tensor x, Tensor weight, float eps, bool zero_centered) -> Tensor");
  m.def(
      "add_rms_norm_rows(Tensor x, Tensor residual, Tensor weight, float eps, bool zero_centered) -> "
      "(Tensor, Tensor)");
  m.def(
      "rms_norm_rows.out(Tensor x, Tensor weight, float eps, bool zero_centered, Tensor residual, "
      "Tensor(a!) sum_out, Tensor(b!) out) -> ()");
}

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) {
  m.impl("rms_norm_rows", &rms_norm_rows);
  m.impl("add_rms_norm_rows", &add_rms_norm_rows);
  m.impl("rms_norm_rows.out", &rms_norm_rows_out);
}
