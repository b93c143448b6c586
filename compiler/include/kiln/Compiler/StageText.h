//===- StageText.h - a compile stage's text, read on first use --*- C++ -*-===//
//
// The inspection texts of a compiled kernel (the lowered IR, the LLVM IR, the
// IR after each pass) are megabytes for a Hopper attention kernel, and a
// launch needs none of them. A disk-cache hit therefore maps the entry and
// leaves these texts in the mapping: a StageText holds either its own string
// or a view into a mapped entry (kept alive by `owner`), and copies the view
// into a string the first time someone reads it. Copies of a StageText share
// that one string; reading is thread-safe.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_COMPILER_STAGETEXT_H
#define KILN_COMPILER_STAGETEXT_H

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln {

class StageText {
public:
  StageText() = default;
  StageText(std::string text) { *this = std::move(text); }
  StageText(const char *text) : StageText(std::string(text)) {}
  StageText &operator=(std::string text) {
    state_ = std::make_shared<State>();
    state_->text = std::move(text);
    return *this;
  }

  /// A view of `view`, which `owner` keeps alive (a mapped cache entry).
  static StageText mapped(std::shared_ptr<const void> owner,
                          std::string_view view) {
    StageText t;
    t.state_ = std::make_shared<State>();
    t.state_->owner = std::move(owner);
    t.state_->view = view;
    return t;
  }

  const std::string &str() const {
    static const std::string none;
    if (!state_)
      return none;
    if (state_->owner) // mapped: copied out once
      std::call_once(state_->once,
                     [s = state_.get()] { s->text.assign(s->view); });
    return state_->text;
  }
  operator const std::string &() const { return str(); }
  /// Without reading a mapped text.
  size_t size() const {
    if (!state_)
      return 0;
    return state_->owner ? state_->view.size() : state_->text.size();
  }
  bool empty() const { return size() == 0; }

private:
  struct State {
    std::once_flag once;
    std::string text;
    std::shared_ptr<const void> owner; // never changes after construction
    std::string_view view;             // likewise
  };
  std::shared_ptr<State> state_;
};

} // namespace kiln

#endif // KILN_COMPILER_STAGETEXT_H
