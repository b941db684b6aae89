// SwiGLU on the CPU, silu(gate) * up in fp32 rounded once to the activations' dtype, in one pass over the MLP's
// gate and up halves as the projection left them (rows apart by a stride): the torch reference takes four ops and
// two fp32 copies of the rows, whose dispatch costs a decode token more than the arithmetic.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "vectors.h"

namespace {

template <class T>
void swiglu_into(const at::Tensor& gate, const at::Tensor& up, at::Tensor& out) {
  const int64_t rows = gate.size(0), width = gate.size(1);
  const int64_t gate_stride = gate.stride(0), up_stride = up.stride(0);
  const T *gates = gate.data_ptr<T>(), *ups = up.data_ptr<T>();
  T* outs = out.data_ptr<T>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T *g = gates + r * gate_stride, *u = ups + r * up_stride;
      T* target = outs + r * width;
      int64_t i = 0;
      for (; i + sqlscout::LANES <= width; i += sqlscout::LANES)
        sqlscout::narrow(sqlscout::silu(sqlscout::widen(g + i)) * sqlscout::widen(u + i), target + i);
      for (; i < width; ++i) target[i] = T(sqlscout::silu(float(g[i])) * float(u[i]));
    }
  });
}

at::Tensor swiglu_rows(const at::Tensor& gate, const at::Tensor& up) {
  const auto type = gate.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kBFloat16, "gate must be float32 or bfloat16, got ", type);
  for (const at::Tensor* t : {&gate, &up})
    TORCH_CHECK(t->scalar_type() == type && t->device().is_cpu() && t->dim() == 2 && t->stride(1) == 1 &&
                    t->sizes() == gate.sizes(),
                "gate and up must be [rows, width] CPU tensors of one dtype and shape, each row contiguous");
  at::Tensor out = at::empty(gate.sizes(), gate.options());
  if (type == at::kFloat)
    swiglu_into<float>(gate, up, out);
  else
    swiglu_into<c10::BFloat16>(gate, up, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sqlscout_cpu, m) { m.def("swiglu_rows(Tensor gate, Tensor up) -> Tensor"); }

TORCH_LIBRARY_IMPL(sqlscout_cpu, CPU, m) { m.impl("swiglu_rows", &swiglu_rows); }
