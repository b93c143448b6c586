//===- attention_autograd.cpp - kiln.attention's eager autograd in C++ ----===//
//
// The eager paths of kiln.attention and kiln.attention_qkvpacked as
// torch::autograd::Functions: autograd's device thread runs kiln's backward
// here without the GIL or the interpreter (a Python Function's backward took
// 100-190 us of host time there before its first kernel,
// docs/experiments/2026-11-26-session31.txt, section 11). Built by
// python/kiln/_cpp.py with torch.utils.cpp_extension against the installed
// torch, once per torch version; it calls libkiln_c through the function
// addresses the ctypes binding hands to bind(), so it links no kiln and every
// launch stays the C API's (the same kernels, the same checks, the same bits as
// the Python path).
//
//===----------------------------------------------------------------------===//
#include "kiln_c.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>

#include <utility>

namespace {

using ForwardFn = decltype(&kiln_c_attention_forward);
using BackwardFn = decltype(&kiln_c_attention_backward);
using WorkspaceFn = decltype(&kiln_c_attention_backward_workspace);
ForwardFn forwardFn = nullptr;
BackwardFn backwardFn = nullptr;
WorkspaceFn workspaceFn = nullptr;

/// The C API's view of `t`: (B, H, N, D), a (B, N, H, D) tensor's middle
/// dimensions swapped; a 3-D one (LSE) with a zero fourth.
kiln_c_tensor view(const at::Tensor &t, bool bshd) {
  kiln_c_tensor v{t.data_ptr(), {0, 0, 0, 0}, {0, 0, 0, 0}};
  for (int64_t i = 0; i < t.dim(); ++i) {
    v.sizes[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  if (bshd && t.dim() == 4) {
    std::swap(v.sizes[1], v.sizes[2]);
    std::swap(v.strides[1], v.strides[2]);
  }
  return v;
}

/// Launched on torch's current stream of q's device; q, k and v were
/// checked by kiln.attention (_check) and the rest allocated here.
kiln_c_attention_options options(const at::Tensor &q, bool causal,
                                 double scale) {
  kiln_c_attention_options o{};
  o.dtype = q.scalar_type() == at::kHalf ? KILN_C_F16 : KILN_C_BF16;
  o.causal = causal;
  o.scale = scale;
  o.device = q.device().index();
  o.stream = c10::cuda::getCurrentCUDAStream(o.device).stream();
  o.deterministic = at::globalContext().deterministicAlgorithms();
  o.pointers_checked = 1;
  return o;
}

/// The Python path's exceptions: ValueError for refused input, else
/// RuntimeError, the C side's message after "kiln.attention: ".
void check(int code, const char *error) {
  if (code == KILN_C_OK)
    return;
  TORCH_CHECK_VALUE(code != KILN_C_BAD_INPUT, "kiln.attention: ", error);
  TORCH_CHECK(false, "kiln.attention: ", error);
}

at::Tensor emptyLike(const at::Tensor &t) {
  return at::empty_like(t, t.options(), at::MemoryFormat::Contiguous);
}

struct Attention : torch::autograd::Function<Attention> {
  static torch::autograd::variable_list
  forward(torch::autograd::AutogradContext *ctx, const at::Tensor &q,
          const at::Tensor &k, const at::Tensor &v, bool causal, double scale,
          bool bshd) {
    const int64_t B = q.size(0), H = q.size(bshd ? 2 : 1),
                  N = q.size(bshd ? 1 : 2);
    at::Tensor o = emptyLike(q);
    at::Tensor lse = at::empty({B, H, N}, q.options().dtype(at::kFloat));
    kiln_c_tensor tq = view(q, bshd), tk = view(k, bshd), tv = view(v, bshd),
                  to = view(o, bshd), tl = view(lse, false);
    kiln_c_attention_options opt = options(q, causal, scale);
    char error[1024] = "";
    check(forwardFn(&opt, &tq, &tk, &tv, &to, &tl, error, sizeof error), error);
    ctx->save_for_backward({q, k, v, o, lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["bshd"] = bshd;
    // Gradients flow through O only (LSE is for inspection), and none is
    // made for LSE's: no allocation and fill kernel each backward.
    ctx->mark_non_differentiable({lse});
    ctx->set_materialize_grads(false);
    return {o, lse};
  }

  static torch::autograd::variable_list
  backward(torch::autograd::AutogradContext *ctx,
           torch::autograd::variable_list grads) {
    const at::Tensor none;
    at::Tensor gradO = grads[0];
    if (!gradO.defined()) // O took no part in the loss
      return {none, none, none, none, none, none};
    if (gradO.stride(-1) != 1) // autograd may hand an expanded gradient
      gradO = gradO.contiguous();
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3],
                     &lse = saved[4];
    const bool causal = ctx->saved_data["causal"].toBool(),
               bshd = ctx->saved_data["bshd"].toBool();
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t B = q.size(0), H = q.size(bshd ? 2 : 1),
                  N = q.size(bshd ? 1 : 2), D = q.size(3);
    at::Tensor dq = emptyLike(q), dk = emptyLike(k), dv = emptyLike(v);
    at::Tensor ws =
        at::empty({workspaceFn(B, H, N, D)}, q.options().dtype(at::kFloat));
    kiln_c_tensor tq = view(q, bshd), tk = view(k, bshd), tv = view(v, bshd),
                  to = view(o, bshd), tdo = view(gradO, bshd),
                  tl = view(lse, false), tdq = view(dq, bshd),
                  tdk = view(dk, bshd), tdv = view(dv, bshd);
    kiln_c_attention_options opt = options(q, causal, scale);
    char error[1024] = "";
    check(backwardFn(&opt, &tq, &tk, &tv, &to, &tdo, &tl, ws.data_ptr(), &tdq,
                     &tdk, &tdv, error, sizeof error),
          error);
    return {dq, dk, dv, none, none, none};
  }
};

/// kiln.attention_qkvpacked: q, k and v views of one (B, N, 3, H, D) tensor
/// (the "bshd" layout), and its gradient one tensor of that shape.
struct AttentionPacked : torch::autograd::Function<AttentionPacked> {
  static torch::autograd::variable_list
  forward(torch::autograd::AutogradContext *ctx, const at::Tensor &qkv,
          bool causal, double scale) {
    const at::Tensor q = qkv.select(2, 0);
    const int64_t B = q.size(0), N = q.size(1), H = q.size(2);
    at::Tensor o = emptyLike(q);
    at::Tensor lse = at::empty({B, H, N}, q.options().dtype(at::kFloat));
    kiln_c_tensor tq = view(q, true), tk = view(qkv.select(2, 1), true),
                  tv = view(qkv.select(2, 2), true), to = view(o, true),
                  tl = view(lse, false);
    kiln_c_attention_options opt = options(q, causal, scale);
    char error[1024] = "";
    check(forwardFn(&opt, &tq, &tk, &tv, &to, &tl, error, sizeof error), error);
    ctx->save_for_backward({qkv, o, lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["scale"] = scale;
    ctx->mark_non_differentiable({lse});
    ctx->set_materialize_grads(false);
    return {o, lse};
  }

  static torch::autograd::variable_list
  backward(torch::autograd::AutogradContext *ctx,
           torch::autograd::variable_list grads) {
    const at::Tensor none;
    at::Tensor gradO = grads[0];
    if (!gradO.defined())
      return {none, none, none};
    if (gradO.stride(-1) != 1)
      gradO = gradO.contiguous();
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &qkv = saved[0], &o = saved[1], &lse = saved[2];
    const bool causal = ctx->saved_data["causal"].toBool();
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t B = qkv.size(0), N = qkv.size(1), H = qkv.size(3),
                  D = qkv.size(4);
    at::Tensor dqkv = emptyLike(qkv);
    at::Tensor ws =
        at::empty({workspaceFn(B, H, N, D)}, qkv.options().dtype(at::kFloat));
    kiln_c_tensor tq = view(qkv.select(2, 0), true),
                  tk = view(qkv.select(2, 1), true),
                  tv = view(qkv.select(2, 2), true), to = view(o, true),
                  tdo = view(gradO, true), tl = view(lse, false),
                  tdq = view(dqkv.select(2, 0), true),
                  tdk = view(dqkv.select(2, 1), true),
                  tdv = view(dqkv.select(2, 2), true);
    kiln_c_attention_options opt = options(qkv, causal, scale);
    char error[1024] = "";
    check(backwardFn(&opt, &tq, &tk, &tv, &to, &tdo, &tl, ws.data_ptr(), &tdq,
                     &tdk, &tdv, error, sizeof error),
          error);
    return {dqkv, none, none};
  }
};

/// (O, LSE); recorded for autograd where grad mode is on and an input
/// requires a gradient.
std::vector<at::Tensor> attention(const at::Tensor &q, const at::Tensor &k,
                                  const at::Tensor &v, bool causal,
                                  double scale, bool bshd) {
  TORCH_CHECK(forwardFn && backwardFn && workspaceFn,
              "kiln.attention: the C++ path is not bound to libkiln_c");
  torch::autograd::variable_list r =
      Attention::apply(q, k, v, causal, scale, bshd);
  return {r[0], r[1]};
}

std::vector<at::Tensor> attentionPacked(const at::Tensor &qkv, bool causal,
                                        double scale) {
  TORCH_CHECK(forwardFn && backwardFn && workspaceFn,
              "kiln.attention: the C++ path is not bound to libkiln_c");
  torch::autograd::variable_list r = AttentionPacked::apply(qkv, causal, scale);
  return {r[0], r[1]};
}

/// The addresses of libkiln_c's functions (ctypes: the library loaded once).
void bind(int64_t forward, int64_t backward, int64_t workspace) {
  forwardFn = reinterpret_cast<ForwardFn>(forward);
  backwardFn = reinterpret_cast<BackwardFn>(backward);
  workspaceFn = reinterpret_cast<WorkspaceFn>(workspace);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attention", &attention);
  m.def("attention_qkvpacked", &attentionPacked);
  m.def("bind", &bind);
}
