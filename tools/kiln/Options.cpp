//===- Options.cpp - the kiln command line's options, parsed by llvm::cl --===//
//
// Every option the kiln command takes is registered with llvm::cl (the names
// come from the usage text: an option is documented or it is not taken), and
// llvm::cl does the parsing: --name=value and --name value, flags, unknown
// options and missing values refused with its messages (and a guess at the
// option meant). The commands then read the values by name (Options), which
// checks ranges and reports options a command does not use.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>

namespace kiln::cli {

namespace cl = llvm::cl;

Options Options::parse(const std::vector<std::string> &args,
                       const std::set<std::string> &flags,
                       const std::set<std::string> &known) {
  // llvm::cl keeps pointers to its options: they live for the process,
  // which runs one command.
  static std::map<std::string, std::unique_ptr<cl::opt<std::string>>> values;
  static std::map<std::string, std::unique_ptr<cl::opt<bool>>> bools;
  static cl::list<std::string> positional(cl::Positional, cl::ZeroOrMore);
  static bool registered = false;
  if (registered)
    throw InternalError("kiln: the command line is parsed once a process");
  registered = true;
  for (const std::string &name : known) {
    if (flags.count(name))
      bools[name] = std::make_unique<cl::opt<bool>>(llvm::StringRef(name));
    else
      values[name] =
          std::make_unique<cl::opt<std::string>>(llvm::StringRef(name));
  }
  // A flag may be given its value as the next word: --causal 0.
  std::vector<std::string> words{"kiln"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    const bool flag = a.rfind("--", 0) == 0 && flags.count(a.substr(2));
    if (flag && i + 1 < args.size() &&
        (args[i + 1] == "0" || args[i + 1] == "1" || args[i + 1] == "false" ||
         args[i + 1] == "true"))
      words.push_back(a + "=" + args[++i]);
    else
      words.push_back(a);
  }
  // A value option last with no value: llvm::cl prints that one to stderr
  // itself, so it is said here, as kiln says its errors.
  if (!args.empty() && args.back().rfind("--", 0) == 0 &&
      values.count(args.back().substr(2)))
    throw UsageError("option " + args.back() + " needs a value");
  std::vector<const char *> argv;
  for (const std::string &w : words)
    argv.push_back(w.c_str());
  std::string errors;
  llvm::raw_string_ostream es(errors);
  if (!cl::ParseCommandLineOptions(int(argv.size()), argv.data(), "", &es,
                                   /*VFS=*/nullptr, /*EnvVar=*/nullptr,
                                   /*LongOptionsUseDoubleDash=*/true)) {
    // "kiln: Unknown command line argument '--x'.  Try: 'kiln --help'\n
    // kiln: Did you mean '--y'?": one line, without the program name.
    llvm::SmallVector<llvm::StringRef> lines;
    llvm::StringRef(errors).trim().split(lines, '\n');
    std::string message;
    for (llvm::StringRef line : lines) {
      line.consume_front("kiln: ");
      message += (message.empty() ? "" : "; ") + line.trim().str();
    }
    throw UsageError(message.empty()
                         ? "the command line is not valid (llvm::cl's "
                           "message above)"
                         : message);
  }
  Options o;
  for (auto &[name, opt] : values)
    if (opt->getNumOccurrences())
      o.values_[name] = *opt;
  for (auto &[name, opt] : bools)
    if (opt->getNumOccurrences())
      o.values_[name] = *opt ? "1" : "0";
  o.positional.assign(positional.begin(), positional.end());
  return o;
}

} // namespace kiln::cli
