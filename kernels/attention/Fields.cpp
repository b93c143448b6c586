//===- Fields.cpp - the attention Configs' fields by name -----------------===//
//
// The tables AttentionFields.h declares. A new switch of either Config gets
// a row here: the CLI offers it, --against takes it and resolveConfig /
// resolveBackwardConfig refuse values other than 1, 0 and -1 for it.
//
//===----------------------------------------------------------------------===//
#include "kiln/kernels/AttentionFields.h"

namespace kiln::kernels {

namespace {
using F = AttentionField<AttentionConfig>;
using B = AttentionField<AttentionBackwardConfig>;
using C = AttentionConfig;
using BC = AttentionBackwardConfig;
constexpr FieldKind Positive = FieldKind::Positive, Switch = FieldKind::Switch;

const F kForward[] = {
    {"block-m", "blockM", &C::blockM, Positive},
    {"block-n", "blockN", &C::blockN, Positive},
    {"warps", "warps", &C::warps},
    {"stages", "stages", &C::stages, Positive},
    {"reload-ids", "reloadThreadIds", &C::reloadThreadIds, Switch},
    {"block-n-diagonal", "blockNDiagonal", &C::blockNDiagonal},
    {"block-n-ragged-end", "blockNRaggedEnd", &C::blockNRaggedEnd},
    {"ragged-end-in-loop", "raggedEndInLoop", &C::raggedEndInLoop, Switch},
    {"masked-first", "maskedBlockFirst", &C::maskedBlockFirst, Switch},
    {"align-rows-to-end", "alignRowsToEnd", &C::alignRowsToEnd, Switch},
    {"narrow-in-diagonal", "narrowStepInDiagonal", &C::narrowStepInDiagonal,
     Switch},
    {"copy-per-register", "copyAddressesPerRegister",
     &C::copyAddressesPerRegister, Switch},
    {"longest-first-globally", "longestFirstGlobally",
     &C::longestFirstGlobally, Switch},
    {"head-group", "headGroup", &C::headGroup},
    {"dynamic-tiles", "dynamicTiles", &C::dynamicTiles, Switch},
    {"wgmma", "wgmma", &C::wgmma, Switch},
    {"tma", "tma", &C::tma, Switch},
    {"tma-store", "tmaStore", &C::tmaStore, Switch},
    {"skip-dead-rows", "skipDeadRows", &C::skipDeadRows, Switch},
    {"one-shot-loads", "oneShotLoads", &C::oneShotLoads, Switch},
    {"warp-specialize", "warpSpecialize", &C::warpSpecialize, Switch},
    {"pingpong", "pingpong", &C::pingpong, Switch},
    {"overlap", "overlap", &C::overlap, Switch},
    {"peel-first", "peelFirstStep", &C::peelFirstStep, Switch},
    {"persistent", "persistent", &C::persistent, Switch},
    {"min-blocks-per-sm", "minBlocksPerSM", &C::minBlocksPerSM},
    {"split-keys", "splitKeys", &C::splitKeys},
    {"small-tiles", "smallTiles", &C::smallTiles, Switch},
    {"static-shapes", "staticShapes", &C::staticShapes, Switch}};

const B kBackward[] = {
    {"block-m", "blockM", &BC::blockM},
    {"block-n", "blockN", &BC::blockN},
    {"dq-block-m", "dqBlockM", &BC::dqBlockM},
    {"dq-block-n", "dqBlockN", &BC::dqBlockN},
    {"warps", "warps", &BC::warps},
    {"dq-warps", "dqWarps", &BC::dqWarps},
    {"stages", "stages", &BC::stages, Positive},
    {"pingpong", "pingpong", &BC::pingpong, Switch},
    {"overlap", "overlap", &BC::overlap, Switch},
    {"min-blocks-per-sm", "minBlocksPerSM", &BC::minBlocksPerSM},
    {"wgmma", "wgmma", &BC::wgmma, Switch},
    {"tma", "tma", &BC::tma, Switch},
    {"warp-specialize", "warpSpecialize", &BC::warpSpecialize, Switch},
    {"static-shapes", "staticShapes", &BC::staticShapes, Switch},
    {"separate-dk-dv", "separateDkDv", &BC::separateDkDv, Switch},
    {"deterministic", "deterministic", &BC::deterministic, Switch},
    {"reload-ids", "reloadThreadIds", &BC::reloadThreadIds, Switch},
    {"persistent", "persistent", &BC::persistent, Switch},
    {"dynamic-tiles", "dynamicTiles", &BC::dynamicTiles, Switch},
    {"longest-first-globally", "longestFirst", &BC::longestFirst, Switch},
    {"kv-in-registers", "kvInRegisters", &BC::kvInRegisters, Switch},
    {"scores-by-queries", "scoresByQueries", &BC::scoresByQueries, Switch},
    {"fold-statistics", "foldStatistics", &BC::foldStatistics, Switch},
    {"tma-store", "tmaStore", &BC::tmaStore, Switch},
    {"convert-dq-last", "convertDqLast", &BC::convertDqLast, Switch},
    {"overlap-dq-convert", "overlapDqConvert", &BC::overlapDqConvert, Switch},
    {"head-group", "headGroup", &BC::headGroup}};
} // namespace

std::span<const AttentionField<AttentionConfig>> attentionConfigFields() {
  return kForward;
}

std::span<const AttentionField<AttentionBackwardConfig>>
attentionBackwardConfigFields() {
  return kBackward;
}

} // namespace kiln::kernels
