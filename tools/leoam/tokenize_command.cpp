// `leoam tokenize`: print the token ids of a prompt, one per line. Reads only the tokenizer
// metadata, so it also works on vocab-only GGUF files.
#include <cstdio>
#include <memory>
#include <string>

#include "cli_common.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace leoam::cli {
namespace {

class TokenizeCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a prompt, one per line");
    cmd->add_option("-m,--model", model_path_, "model or vocab file (GGUF), or a Hugging Face checkpoint folder")
        ->required()
        ->check(readable_model())
        ->type_name("PATH");
    add_prompt_options(*cmd, prompt_, prompt_file_);
    cmd->add_flag("--no-bos", no_bos_, "do not prepend the BOS token");
    cmd->add_flag("--parse-special", parse_special_, "recognize special tokens such as </s> written in the text");
    return cmd;
  }

  int execute() override {
    Result<std::string> text = resolve_prompt(prompt_, prompt_file_);
    if (!text.is_ok()) return fail(text.status());
    Result<GgufFile> gguf = open_tokenizer_source(model_path_);
    if (!gguf.is_ok()) return fail(named(gguf.status(), model_path_));
    Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf(*gguf);
    if (!tokenizer.is_ok()) return fail(named(tokenizer.status(), model_path_));
    std::string out;
    for (int32_t id : (*tokenizer)->tokenize(*text, !no_bos_, parse_special_)) {
      out += std::to_string(id);
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return std::fflush(stdout) == 0 ? kExitOk : fail(io_error("error writing to stdout"));
  }

 private:

  std::string model_path_;
  std::string prompt_;
  std::string prompt_file_;
  bool no_bos_ = false;
  bool parse_special_ = false;
};

}  // namespace

std::unique_ptr<Command> make_tokenize_command() { return std::make_unique<TokenizeCommand>(); }

}  // namespace leoam::cli
