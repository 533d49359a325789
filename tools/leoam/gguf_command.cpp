// `leoam gguf info FILE`: describe a GGUF file (header, metadata, tensors).
#include <iostream>
#include <memory>
#include <string>

#include "cli_common.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_info.h"

namespace leoam::cli {
namespace {

class GgufCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand("gguf", "inspect GGUF files");
    cmd->require_subcommand(1);
    CLI::App* info = cmd->add_subcommand("info", "print a GGUF file's header, metadata and tensor table");
    info->add_option("FILE", path_, "the GGUF file")->required()->check(readable_file())->type_name("");
    return cmd;
  }

  int execute() override {
    Result<GgufFile> gguf = GgufFile::open(path_);
    if (!gguf.is_ok()) {
      const Status& st = gguf.status();
      return fail(st.message().find(path_) == std::string::npos ? st.with_context(path_) : st);
    }
    print_gguf_info(*gguf, std::cout);
    std::cout.flush();
    return std::cout ? kExitOk : fail(io_error("error writing to stdout"));
  }

 private:
  std::string path_;
};

}  // namespace

std::unique_ptr<Command> make_gguf_command() { return std::make_unique<GgufCommand>(); }

}  // namespace leoam::cli
