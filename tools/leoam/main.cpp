// leoam: the command-line tool. Its subcommands, a *_command.cpp file each: run, tokenize, gguf,
// bench (with bench kv in bench_kv_command.cpp), bench-gather, eval and serve. This file parses
// the command line (llama.cpp's single-dash spellings rewritten first) and maps every parse error
// to one line on stderr and exit status 2 (see cli_common.h).
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_common.h"
#include "help_formatter.h"
#include "llama_cpp_spellings.h"

namespace {

// Arguments no option took, in `app` and the subcommands it selected. CLI11 checks required
// options before it complains about unknown ones; reporting an unknown flag is more useful
// than "--model is required" when the user mistyped a flag.
std::vector<std::string> unexpected_arguments(const CLI::App& app) {
  std::vector<std::string> out = app.remaining();
  for (const CLI::App* sub : app.get_subcommands()) {
    for (std::string& a : unexpected_arguments(*sub)) out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace leoam::cli;
  CLI::App app("leoam: LLM inference engine", "leoam");
  app.formatter(std::make_shared<HelpFormatter>());  // before the subcommands, which take it
  app.set_version_flag("--version", std::string("leoam ") + LEOAM_VERSION);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "print help for every subcommand and exit");

  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(make_run_command());
  commands.push_back(make_tokenize_command());
  commands.push_back(make_gguf_command());
  commands.push_back(make_bench_command());
  commands.push_back(make_bench_gather_command());
  commands.push_back(make_eval_command());
  commands.push_back(make_serve_command());
  std::vector<CLI::App*> subcommands;
  for (auto& command : commands) subcommands.push_back(command->add_to(app));

  try {
    // CLI11 parses a vector of arguments last first.
    std::vector<std::string> args = rewrite_llama_cpp_spellings(argc, argv);
    std::reverse(args.begin(), args.end());
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // --help, --help-all: help on stdout, status 0.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::string message = e.what();
    if (message.empty()) message = e.get_name();
    if (const std::vector<std::string> extra = unexpected_arguments(app); !extra.empty()) {
      message = "unexpected argument '" + extra.front() + "'";
    }
    print_error(message + " (run with --help for usage)");
    return kExitUsage;
  }

  for (size_t i = 0; i < commands.size(); ++i) {
    if (subcommands[i]->parsed()) return commands[i]->execute();
  }
  print_error("no command given (run with --help for usage)");  // require_subcommand prevents this
  return kExitUsage;
}
