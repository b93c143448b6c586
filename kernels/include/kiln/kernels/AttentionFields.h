//===- AttentionFields.h - the attention Configs' fields by name -*- C++ -*-===//
//
// One table per attention Config of its integer fields: the name of the CLI
// flag that sets it, the field's own name (the library's messages) and the
// values it takes. The CLI's flags and --against items and the library's
// check of the switches read the same table, so a switch listed once is
// offered and checked everywhere.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_KERNELS_ATTENTIONFIELDS_H
#define KILN_KERNELS_ATTENTIONFIELDS_H

#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionBackward.h"

#include <cstdint>
#include <span>
#include <variant>

namespace kiln::kernels {

/// What a field may hold besides its default: any integer of its type, a
/// count >= 1 (tiles, stages), or a switch (1 yes, 0 no; -1 the default).
enum class FieldKind { Any, Positive, Switch };

template <class Config> struct AttentionField {
  const char *flag; ///< the CLI's option without "--": "block-m"
  const char *name; ///< the Config's member: "blockM"
  std::variant<int64_t Config::*, int Config::*> member;
  FieldKind kind = FieldKind::Any;
};

/// The forward's fields the CLI sets (every switch of AttentionConfig).
std::span<const AttentionField<AttentionConfig>> attentionConfigFields();
/// The backward's (every switch of AttentionBackwardConfig).
std::span<const AttentionField<AttentionBackwardConfig>>
attentionBackwardConfigFields();

} // namespace kiln::kernels

#endif // KILN_KERNELS_ATTENTIONFIELDS_H
