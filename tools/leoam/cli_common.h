// Shared pieces of the `leoam` command-line tool: the Command interface each subcommand
// implements, exit codes, one-line error reporting, and argument helpers.
//
// Exit status: 0 success; 1 (kExitFailure) a failure while loading or running (corrupt model,
// prompt too long, write error); 2 (kExitUsage) a usage error found before any work starts (bad
// or missing flag, a missing or unreadable input file); 130 (kExitInterrupted, 128 + SIGINT, as
// shells report it) a run stopped by Ctrl-C. Every error is one line on stderr:
//   leoam: error: <what went wrong>
#pragma once

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>
#include <string_view>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "hf/hf_folder.h"

namespace leoam::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;

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
// `leoam bench kv`, a subcommand of `leoam bench` (bench_kv_command.cpp).
std::unique_ptr<Command> make_bench_kv_command();
std::unique_ptr<Command> make_bench_gather_command();
std::unique_ptr<Command> make_eval_command();
std::unique_ptr<Command> make_serve_command();

// Prints "leoam: error: <message>" on one line of stderr (newlines in message become spaces).
void print_error(std::string_view message);
// The flag that sets `setting` ("-c", "--kv-device-mb"); "" for none.
std::string flag_for(Setting setting);
// The status's message, with the flag of the setting it is about (Status::about) in brackets.
std::string error_text(const Status& status);
// print_error(error_text(status)) and kExitFailure.
int fail(const Status& status);

// A CLI11 validator: the path names a regular file that can be opened for reading.
// Error text: "cannot read 'PATH': No such file or directory".
// `st` with "PATH: " in front, unless its message names the path already (a model's own errors do).
Status named(const Status& st, const std::string& path);

CLI::Validator readable_file();
// readable_file(), or a folder (a Hugging Face checkpoint, whose files the loader checks).
CLI::Validator readable_model();

// A CLI11 validator: DIR is a directory where files can be made, or can be created as one
// (checked by making and removing a file in it, or in the nearest existing parent, which is
// left unchanged). Error text, after CLI11's "--kv-dir: ": "cannot create files in '/ro':
// Permission denied; give a directory you can write to".
CLI::Validator writable_dir();

// A CLI11 validator for an output FILE written at the end of a long run, so that a path that
// cannot be written fails at the start: an existing file opens for writing (and is left as it
// was), a new one can be made in its directory (and is removed again). Error text, after CLI11's
// "--json: ": "cannot write '/ro/out.json': Permission denied; give a file you can write".
CLI::Validator writable_file();

// CLI11 validators for numeric options, whose errors read "--budget: must be > 0, got 0" and
// "--threads: 'x' is not a whole number" (CLI11's PositiveNumber and Range print DBL_MAX as a
// bound, and "Could not convert" for a bad number). T is the option's type: an integral T takes
// whole numbers only, a floating T finite ones. number<T>() checks only that.
template <typename T>
CLI::Validator number();
template <typename T>
CLI::Validator positive();
template <typename T>
CLI::Validator non_negative();
template <typename T>
CLI::Validator in_range(T lo, T hi);
template <typename T>
CLI::Validator at_least(T lo);

// Adds `-t,--threads N` (0: the physical cores) bound to `n_threads`.
void add_threads_option(CLI::App& cmd, int& n_threads);

// The model a command loads: `-m PATH`, a GGUF file or a Hugging Face checkpoint folder, and
// `--type`, what a folder's matrices are loaded as.
struct ModelSource {
  std::string path;
  std::string type;  // empty: the folder's own types
  HfImportOptions import_options() const;  // the type checked at parse time
};
// Adds -m,--model and --type to `cmd`, bound to `model`.
CLI::Option* add_model_options(CLI::App& cmd, ModelSource& model);
// A CLI11 validator: a type a folder's matrices can be loaded as (supported_type_names()).
CLI::Validator weight_type();

// The model's checksum: what saved sessions and the prompt cache are tied to. A GGUF file's is
// checksum64 of its bytes; a folder's covers each file's name and bytes, and the --type.
Result<uint64_t> hash_model_file(const ModelSource& model);

// The whole contents of `path`.
Result<std::string> read_text_file(const std::string& path);

// Adds `-p,--prompt TEXT` and `-f,--file FILE` to `cmd`: mutually exclusive, one required unless
// one of the options named in `unless` (e.g. "--kv-load") is given. `prompt` receives -p's text;
// `prompt_file` -f's path.
void add_prompt_options(CLI::App& cmd, std::string& prompt, std::string& prompt_file,
                        std::vector<std::string> unless = {});
// The prompt selected by add_prompt_options: -p's text, or -f's file contents minus one trailing
// newline (as llama.cpp does; a file saved by an editor ends in one).
Result<std::string> resolve_prompt(const std::string& prompt, const std::string& prompt_file);

namespace detail {

template <typename T>
std::string number_text(T x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// `text` as a T in `x`, or why it is not one.
template <typename T>
std::string parse_number(const std::string& text, T& x) {
  if constexpr (std::is_integral_v<T>) {
    if (!CLI::detail::lexical_cast(text, x)) return "'" + text + "' is not a whole number";
  } else {
    if (!CLI::detail::lexical_cast(text, x)) return "'" + text + "' is not a number";
    if (!std::isfinite(x)) return "must be a finite number, got " + text;
  }
  return {};
}

// A validator that accepts a T for which ok(x), else says "must be <rule>, got <text>".
template <typename T, typename Ok>
CLI::Validator number_check(Ok ok, const std::string& rule, const std::string& description) {
  return CLI::Validator(
      [ok, rule](std::string& text) -> std::string {
        T x{};
        if (std::string why = parse_number(text, x); !why.empty()) return why;
        return ok(x) ? std::string() : "must be " + rule + ", got " + text;
      },
      description);
}

}  // namespace detail

template <typename T>
CLI::Validator number() {
  return detail::number_check<T>([](T) { return true; }, "", "");
}

template <typename T>
CLI::Validator positive() {
  return detail::number_check<T>([](T x) { return x > T{0}; }, "> 0", "POSITIVE");
}

template <typename T>
CLI::Validator non_negative() {
  return detail::number_check<T>([](T x) { return x >= T{0}; }, ">= 0", "NONNEGATIVE");
}

// No description in --help ("INT:>= -1=-1" reads badly next to the default): say the rule in
// the option's help text; errors give it.
template <typename T>
CLI::Validator at_least(T lo) {
  return detail::number_check<T>([lo](T x) { return lo <= x; }, ">= " + detail::number_text(lo), "");
}

template <typename T>
CLI::Validator in_range(T lo, T hi) {
  const std::string a = detail::number_text(lo), b = detail::number_text(hi);
  return detail::number_check<T>([lo, hi](T x) { return lo <= x && x <= hi; }, "from " + a + " to " + b,
                                 "in [" + a + ", " + b + "]");
}

}  // namespace leoam::cli
