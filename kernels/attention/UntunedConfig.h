//===- UntunedConfig.h - the forward's schedule without `kiln tune` -*- C++ -*-===//
//
// Internal to kernels/attention: resolveConfig and resolveBackwardConfig as
// they decide when the tuning database has no record for the shape (the
// autotuner's baseline; AttentionTune.h).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_ATTENTION_UNTUNEDCONFIG_H
#define KILN_KERNELS_ATTENTION_UNTUNEDCONFIG_H

#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionBackward.h"

#include <cstdint>

namespace kiln::kernels {

/// resolveConfig(s, c), no tuned record read (Config.cpp).
AttentionConfig resolveUntunedConfig(const AttentionShape &s,
                                     AttentionConfig c);

/// resolveBackwardConfig(s, c), no tuned record read (BackwardConfig.cpp).
AttentionBackwardConfig
resolveUntunedBackwardConfig(const AttentionShape &s,
                             AttentionBackwardConfig c);

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTION_UNTUNEDCONFIG_H
