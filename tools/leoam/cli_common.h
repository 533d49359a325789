// Shared pieces of the `leoam` command-line tool: the Command interface each subcommand
// implements, exit codes, one-line error reporting, and argument helpers.
//
// Exit status: 0 success; 1 (kExitFailure) a failure while loading or running (corrupt model,
// prompt too long, write error); 2 (kExitUsage) a usage error found before any work starts (bad
// or missing flag, a missing or unreadable input file). Every error is one line on stderr:
//   leoam: error: <what went wrong>
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace leoam::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// One subcommand: registers its flags on the app (binding them to its own members), then runs
// when the parse selected it.
class Command {
 public:
  virtual ~Command() = default;
  // Adds the subcommand to `app` and returns it.
  virtual CLI::App* add_to(CLI::App& app) = 0;
  // Runs after a successful parse that selected this subcommand; returns the exit status.
  virtual int execute() = 0;
};

std::unique_ptr<Command> make_run_command();
std::unique_ptr<Command> make_tokenize_command();
std::unique_ptr<Command> make_gguf_command();
std::unique_ptr<Command> make_bench_command();
std::unique_ptr<Command> make_bench_kv_command();
std::unique_ptr<Command> make_eval_command();

// Prints "leoam: error: <message>" on one line of stderr (newlines in message become spaces).
void print_error(std::string_view message);
// print_error(status.message()) and kExitFailure.
int fail(const Status& status);

// A CLI11 validator: the path names a regular file that can be opened for reading.
// Error text: "cannot read 'PATH': No such file or directory".
CLI::Validator readable_file();

// The whole contents of `path`.
Result<std::string> read_text_file(const std::string& path);

// Adds `-p,--prompt TEXT` and `-f,--file FILE` to `cmd`: mutually exclusive, one required unless
// the option named `unless` (e.g. "--kv-load") is given. `prompt` receives -p's text;
// `prompt_file` -f's path.
void add_prompt_options(CLI::App& cmd, std::string& prompt, std::string& prompt_file, const std::string& unless = "");
// The prompt selected by add_prompt_options: -p's text, or -f's file contents minus one trailing
// newline (as llama.cpp does; a file saved by an editor ends in one).
Result<std::string> resolve_prompt(const std::string& prompt, const std::string& prompt_file);

}  // namespace leoam::cli
