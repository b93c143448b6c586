//===- GpuReference.cpp - reference kernels run on the GPU ----------------===//
#include "kiln/kernels/GpuReference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/Nvrtc.h"

#include <cmath>
#include <mutex>
#include <optional>

namespace kiln::kernels {

// One thread per query row: a max pass over the keys, then an exp-and-
// accumulate pass. Straight from the definition of softmax(QKᵀ·scale)·V; no
// tiling, no shared memory, nothing shared with kiln's code generation.
static const char *kSource = R"cuda(
struct Strides { long long s[4]; };

__device__ float loadElem(const void *p, long long i, int dtype) {
  if (dtype == 0)
    return static_cast<const float *>(p)[i];
  unsigned b = static_cast<const unsigned short *>(p)[i];
  if (dtype == 2) // bf16: the high half of an fp32
    return __uint_as_float(b << 16);
  unsigned sign = (b & 0x8000u) << 16, exp = (b >> 10) & 0x1fu, man = b & 0x3ffu;
  if (exp == 0) { // zero or subnormal half
    float f = float(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  if (exp == 31)
    return __uint_as_float(sign | 0x7f800000u | (man << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

extern "C" __global__ void attention_reference(
    const void *q, const void *k, const void *v, Strides sq, Strides sk,
    Strides sv, float *o, float *lse, int H, int Nq, int Nk, int D,
    int causal, float scale, int dtype, int G) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int b = blockIdx.y, h = blockIdx.z, bh = b * H + h; // B, H <= 65535
  if (i >= Nq)
    return;
  long long qi = b * sq.s[0] + h * sq.s[1] + i * sq.s[2];
  int hk = h / G; // grouped heads: G query heads per K/V head
  long long k0 = b * sk.s[0] + hk * sk.s[1], v0 = b * sv.s[0] + hk * sv.s[1];
  int last = causal ? min(i, Nk - 1) : Nk - 1;
  float mx = __int_as_float(0xff800000); // -inf
  for (int j = 0; j <= last; ++j) {
    float s = 0.f;
    for (int d = 0; d < D; ++d)
      s += loadElem(q, qi + d * sq.s[3], dtype) *
           loadElem(k, k0 + j * sk.s[2] + d * sk.s[3], dtype);
    mx = fmaxf(mx, s * scale);
  }
  float acc[256];
  for (int d = 0; d < D; ++d)
    acc[d] = 0.f;
  float sum = 0.f;
  for (int j = 0; j <= last; ++j) {
    float s = 0.f;
    for (int d = 0; d < D; ++d)
      s += loadElem(q, qi + d * sq.s[3], dtype) *
           loadElem(k, k0 + j * sk.s[2] + d * sk.s[3], dtype);
    float p = expf(s * scale - mx);
    sum += p;
    for (int d = 0; d < D; ++d)
      acc[d] += p * loadElem(v, v0 + j * sv.s[2] + d * sv.s[3], dtype);
  }
  long long row = (long long)bh * Nq + i;
  for (int d = 0; d < D; ++d)
    o[row * D + d] = acc[d] / sum;
  lse[row] = mx + logf(sum);
}
)cuda";

const char *gpuReferenceSource() { return kSource; }

namespace {
struct Strides {
  long long s[4];
};

Strides stridesOf(const TensorRef &t, const char *name) {
  if (t.strides.size() != 4)
    throw Error(std::string("attentionReferenceGpu: ") + name +
                " must be a (B,H,N,D) tensor");
  Strides s;
  for (int i = 0; i < 4; ++i)
    s.s[i] = t.strides[i];
  return s;
}
} // namespace

void attentionReferenceGpu(const AttentionShape &s, const TensorRef &q,
                           const TensorRef &k, const TensorRef &v, void *o,
                           void *lse) {
  if (s.headDim > 256)
    throw Error("attentionReferenceGpu: head dim above 256");
  static std::once_flag once;
  static std::optional<cuda::Module> module;
  std::call_once(once, [] {
    module.emplace(cuda::Module::fromPtx(nvrtc::compileToPtx(
        kSource, "attention_reference.cu", cuda::device().arch())));
  });
  cuda::Function fn = module->function("attention_reference");
  Strides sq = stridesOf(q, "Q"), sk = stridesOf(k, "K"),
          sv = stridesOf(v, "V");
  const void *qp = q.data, *kp = k.data, *vp = v.data;
  int H = int(s.heads), Nq = int(s.seqQ), Nk = int(s.seqK), D = int(s.headDim);
  int causal = s.causal, dtype = s.dtype == DType::f32   ? 0
                                 : s.dtype == DType::f16 ? 1
                                                         : 2;
  float scale = float(s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(D)));
  int G = int(queryHeadsPerKv(s));
  std::vector<void *> args = {&qp, &kp, &vp, &sq, &sk,     &sv,    &o,     &lse,
                              &H,  &Nq, &Nk, &D,  &causal, &scale, &dtype, &G};
  unsigned threads = 128;
  fn.launch({unsigned((Nq + threads - 1) / threads), unsigned(s.batch),
             unsigned(s.heads)},
            {threads, 1, 1}, 0, args.data());
  cuda::synchronize();
}

} // namespace kiln::kernels
