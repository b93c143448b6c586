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
#include "ops.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/extension.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using ForwardFn = decltype(&kiln_c_attention_forward);
using ForwardKeyLengthsFn = decltype(&kiln_c_attention_forward_key_lengths);
using ForwardWorkspaceFn = decltype(&kiln_c_attention_forward_workspace);
using BackwardFn = decltype(&kiln_c_attention_backward);
using WorkspaceFn = decltype(&kiln_c_attention_backward_workspace);
ForwardFn forwardFn = nullptr;
ForwardKeyLengthsFn forwardKeyLengthsFn = nullptr;
ForwardWorkspaceFn forwardWorkspaceFn = nullptr;
ForwardWorkspaceFn forwardKeyLengthsWorkspaceFn = nullptr;
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
  kiln_ext::checkCode(code, "kiln.attention", error);
}

at::Tensor emptyLike(const at::Tensor &t) {
  return at::empty_like(t, t.options(), at::MemoryFormat::Contiguous);
}

/// LSE's tensor, fp32 (B, H, Nq). It is not an output of the Functions
/// (the entries allocate it, the forward writes it): it carries no gradient,
/// as the Python path's non-differentiable output does, and compiled
/// autograd takes the node (it asserts on outputs marked non-differentiable
/// in a C++ Function).
at::Tensor lseFor(const at::Tensor &q, bool bshd) {
  return at::empty({q.size(0), q.size(bshd ? 2 : 1), q.size(bshd ? 1 : 2)},
                   q.options().dtype(at::kFloat));
}

/// O of q, k and v (views of one tensor or three); LSE into `lse`. With
/// `keyLengths`, batch b attends to its first keyLengths[b] keys.
at::Tensor forwardOf(const at::Tensor &q, const at::Tensor &k,
                     const at::Tensor &v, const at::Tensor &lse, bool causal,
                     double scale, bool bshd,
                     const at::Tensor *keyLengths = nullptr) {
  at::Tensor o = emptyLike(q);
  kiln_c_tensor tq = view(q, bshd), tk = view(k, bshd), tv = view(v, bshd),
                to = view(o, bshd), tl = view(lse, false);
  kiln_c_attention_options opt = options(q, causal, scale);
  char error[1024] = "";
  // The keys split in ranges where few row blocks leave SMs idle: their
  // partial O and LSE take a workspace.
  int64_t elements = 0;
  check((keyLengths ? forwardKeyLengthsWorkspaceFn : forwardWorkspaceFn)(
            &opt, &tq, &tk, &elements, error, sizeof error),
        error);
  at::Tensor ws;
  if (elements)
    ws = at::empty({elements}, q.options().dtype(at::kFloat));
  void *w = elements ? ws.data_ptr() : nullptr;
  if (keyLengths) {
    kiln_c_tensor tn = view(*keyLengths, false);
    check(forwardKeyLengthsFn(&opt, &tq, &tk, &tv, &tn, &to, &tl, w, error,
                              sizeof error),
          error);
  } else {
    check(forwardFn(&opt, &tq, &tk, &tv, &to, &tl, w, error, sizeof error),
          error);
  }
  return o;
}

/// Saves what the backward reads; no zeros are made for an unused O's
/// gradient.
void saveForBackward(torch::autograd::AutogradContext *ctx,
                     torch::autograd::variable_list tensors, bool causal,
                     double scale, bool bshd) {
  ctx->save_for_backward(std::move(tensors));
  ctx->saved_data["causal"] = causal;
  ctx->saved_data["scale"] = scale;
  ctx->saved_data["bshd"] = bshd;
  ctx->set_materialize_grads(false);
}

/// O's gradient as the kernels take it; undefined where O took no part in
/// the loss.
at::Tensor gradientOfO(const torch::autograd::variable_list &grads) {
  at::Tensor g = grads[0];
  if (g.defined() && g.stride(-1) != 1) // autograd may hand it expanded
    g = g.contiguous();
  return g;
}

/// dQ, dK and dV (views of one tensor or three) of the saved forward.
void backwardInto(torch::autograd::AutogradContext *ctx, const at::Tensor &q,
                  const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
                  const at::Tensor &lse, const at::Tensor &gradO,
                  const at::Tensor &dq, const at::Tensor &dk,
                  const at::Tensor &dv) {
  const bool causal = ctx->saved_data["causal"].toBool(),
             bshd = ctx->saved_data["bshd"].toBool();
  const double scale = ctx->saved_data["scale"].toDouble();
  const int64_t B = q.size(0), H = q.size(bshd ? 2 : 1),
                N = q.size(bshd ? 1 : 2), D = q.size(3);
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
}

struct Attention : torch::autograd::Function<Attention> {
  static torch::autograd::variable_list
  forward(torch::autograd::AutogradContext *ctx, const at::Tensor &q,
          const at::Tensor &k, const at::Tensor &v, const at::Tensor &lse,
          bool causal, double scale, bool bshd) {
    at::Tensor o = forwardOf(q, k, v, lse, causal, scale, bshd);
    saveForBackward(ctx, {q, k, v, o, lse}, causal, scale, bshd);
    return {o};
  }

  static torch::autograd::variable_list
  backward(torch::autograd::AutogradContext *ctx,
           torch::autograd::variable_list grads) {
    const at::Tensor none, gradO = gradientOfO(grads);
    if (!gradO.defined())
      return {none, none, none, none, none, none, none};
    torch::autograd::variable_list s = ctx->get_saved_variables();
    at::Tensor dq = emptyLike(s[0]), dk = emptyLike(s[1]), dv = emptyLike(s[2]);
    backwardInto(ctx, s[0], s[1], s[2], s[3], s[4], gradO, dq, dk, dv);
    return {dq, dk, dv, none, none, none, none};
  }
};

/// kiln.attention_qkvpacked: q, k and v views of one (B, N, 3, H, D) tensor
/// (the "bshd" layout), and its gradient one tensor of that shape.
struct AttentionPacked : torch::autograd::Function<AttentionPacked> {
  static torch::autograd::variable_list
  forward(torch::autograd::AutogradContext *ctx, const at::Tensor &qkv,
          const at::Tensor &lse, bool causal, double scale) {
    at::Tensor o = forwardOf(qkv.select(2, 0), qkv.select(2, 1),
                             qkv.select(2, 2), lse, causal, scale,
                             /*bshd=*/true);
    saveForBackward(ctx, {qkv, o, lse}, causal, scale, true);
    return {o};
  }

  static torch::autograd::variable_list
  backward(torch::autograd::AutogradContext *ctx,
           torch::autograd::variable_list grads) {
    const at::Tensor none, gradO = gradientOfO(grads);
    if (!gradO.defined())
      return {none, none, none, none};
    torch::autograd::variable_list s = ctx->get_saved_variables();
    const at::Tensor &qkv = s[0];
    at::Tensor dqkv = emptyLike(qkv);
    backwardInto(ctx, qkv.select(2, 0), qkv.select(2, 1), qkv.select(2, 2),
                 s[1], s[2], gradO, dqkv.select(2, 0), dqkv.select(2, 1),
                 dqkv.select(2, 2));
    return {dqkv, none, none, none};
  }
};

/// (O, LSE); recorded for autograd where grad mode is on and an input
/// requires a gradient.
std::vector<at::Tensor> attention(const at::Tensor &q, const at::Tensor &k,
                                  const at::Tensor &v, bool causal,
                                  double scale, bool bshd) {
  TORCH_CHECK(forwardFn && forwardWorkspaceFn && backwardFn && workspaceFn,
              "kiln.attention: the C++ path is not bound to libkiln_c");
  at::Tensor lse = lseFor(q, bshd);
  return {Attention::apply(q, k, v, lse, causal, scale, bshd)[0], lse};
}

std::vector<at::Tensor> attentionPacked(const at::Tensor &qkv, bool causal,
                                        double scale) {
  TORCH_CHECK(forwardFn && forwardWorkspaceFn && backwardFn && workspaceFn,
              "kiln.attention: the C++ path is not bound to libkiln_c");
  at::Tensor lse = lseFor(qkv.select(2, 0), /*bshd=*/true);
  return {AttentionPacked::apply(qkv, lse, causal, scale)[0], lse};
}

/// kiln.attention's common case, checked here rather than by the Python
/// _check (~8 us of a decode call's host time): q, k and v plain CUDA
/// tensors of one bf16 or fp16 dtype and one device, 4-D in the layout,
/// unit last stride, k and v 16-byte aligned (else the Python path copies
/// them and says so), matching shapes, D 64 or 128, none empty. False for
/// anything else: the Python path then names the problem or takes its
/// own way.
bool commonCase(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                std::optional<double> scale, bool bshd) {
  if (!forwardFn || !q.is_cuda() ||
      (q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf) ||
      (scale && !(std::isfinite(*scale) && *scale > 0)))
    return false;
  const int64_t elementBytes = q.element_size();
  for (const at::Tensor *t : {&q, &k, &v}) {
    if (t->dim() != 4 || t->scalar_type() != q.scalar_type() ||
        t->device() != q.device() || t->stride(3) != 1 || t->numel() == 0)
      return false;
    if (t != &q) { // K and V as the kernels read them fast
      if (!kiln_ext::aligned(*t))
        return false;
      for (int i = 0; i < 3; ++i)
        if (t->stride(i) * elementBytes % 16)
          return false;
    }
  }
  const int64_t heads = bshd ? 2 : 1, D = q.size(3);
  // K/V heads: q's, or a divisor of them (grouped-query attention).
  return (D == 64 || D == 128) && k.size(0) == q.size(0) &&
         k.size(heads) >= 1 && q.size(heads) % k.size(heads) == 0 &&
         k.size(3) == D && v.sizes().equals(k.sizes());
}

double scaleOr(std::optional<double> scale, const at::Tensor &q) {
  return scale ? *scale : 1.0 / std::sqrt(double(q.size(3)));
}

std::optional<std::vector<at::Tensor>>
attentionChecked(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                 bool causal, std::optional<double> scale, bool bshd) {
  if (!commonCase(q, k, v, scale, bshd))
    return std::nullopt;
  return attention(q, k, v, causal, scaleOr(scale, q), bshd);
}

/// kiln.attention's key_lengths, where commonCase holds, lengths are int32
/// (B,) on q's device and no gradient is asked for (else None: the Python
/// path names the problem). (O, LSE), recorded for no autograd.
std::optional<std::vector<at::Tensor>>
attentionKeyLengthsChecked(const at::Tensor &q, const at::Tensor &k,
                           const at::Tensor &v, const at::Tensor &lengths,
                           bool causal, std::optional<double> scale,
                           bool bshd) {
  if (!forwardKeyLengthsFn || !forwardKeyLengthsWorkspaceFn ||
      !commonCase(q, k, v, scale, bshd) || lengths.scalar_type() != at::kInt ||
      lengths.dim() != 1 || lengths.size(0) != q.size(0) ||
      lengths.device() != q.device() ||
      (at::GradMode::is_enabled() &&
       (q.requires_grad() || k.requires_grad() || v.requires_grad())))
    return std::nullopt;
  at::Tensor lse = lseFor(q, bshd);
  at::Tensor o =
      forwardOf(q, k, v, lse, causal, scaleOr(scale, q), bshd, &lengths);
  return std::vector<at::Tensor>{o, lse};
}

/// The addresses of libkiln_c's functions (ctypes: the library loaded once).
void bind(int64_t forward, int64_t forwardKeyLengths, int64_t forwardWorkspace,
          int64_t forwardKeyLengthsWorkspace, int64_t backward,
          int64_t workspace) {
  forwardKeyLengthsWorkspaceFn =
      reinterpret_cast<ForwardWorkspaceFn>(forwardKeyLengthsWorkspace);
  forwardFn = reinterpret_cast<ForwardFn>(forward);
  forwardKeyLengthsFn =
      reinterpret_cast<ForwardKeyLengthsFn>(forwardKeyLengths);
  forwardWorkspaceFn = reinterpret_cast<ForwardWorkspaceFn>(forwardWorkspace);
  backwardFn = reinterpret_cast<BackwardFn>(backward);
  workspaceFn = reinterpret_cast<WorkspaceFn>(workspace);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attention", &attention);
  m.def("attention_checked", &attentionChecked);
  m.def("attention_key_lengths_checked", &attentionKeyLengthsChecked);
  m.def("attention_qkvpacked", &attentionPacked);
  m.def("bind", &bind);
  m.def("bind_op", [](int64_t op, int64_t rowNorm, int64_t rowNormBackward,
                      int64_t rowNormBackwardPrograms, int64_t linearSplitK) {
    kiln_ext::opFn = reinterpret_cast<decltype(&kiln_c_op)>(op);
    kiln_ext::rowNormFn = reinterpret_cast<decltype(&kiln_c_row_norm)>(rowNorm);
    kiln_ext::rowNormBackwardFn =
        reinterpret_cast<decltype(&kiln_c_row_norm_backward)>(rowNormBackward);
    kiln_ext::rowNormBackwardProgramsFn =
        reinterpret_cast<decltype(&kiln_c_row_norm_backward_programs)>(
            rowNormBackwardPrograms);
    kiln_ext::linearSplitKFn =
        reinterpret_cast<decltype(&kiln_c_linear_split_k)>(linearSplitK);
  });
  m.def("op", &kiln_ext::op);
  m.def("linear", &kiln_ext::linear);
  m.def("linear_train", &kiln_ext::linearTrain);
  m.def("row_norm", &kiln_ext::rowNorm);
  m.def("rotary", &kiln_ext::rotary);
  m.def("cross_entropy", &kiln_ext::crossEntropy);
  m.def("autocast_bf16", [](const std::vector<std::optional<at::Tensor>> &ts) {
    std::vector<std::optional<at::Tensor>> out;
    for (const auto &t : ts)
      out.push_back(t ? std::optional(kiln_ext::autocastBf16(*t)) : t);
    return out;
  });
}
