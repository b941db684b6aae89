// The CPU kernels' one translation unit: torch's headers, most of each file's compile time, are parsed once
// (a build in about a third of the CPU time of compiling the files apart).

#include "weight_products.cpp"
#include "dense_rows.cpp"
#include "amx_products.cpp"
#include "gated_delta_net_step.cpp"
#include "attention_step.cpp"
#include "rms_norm.cpp"
#include "attention_inputs.cpp"
#include "swiglu.cpp"
#include "instructions.cpp"
