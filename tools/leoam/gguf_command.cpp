// `leoam gguf info FILE`: describe a GGUF file (header, metadata, tensors).
// `leoam gguf synth --preset NAME[:TYPE] [--n-layer N] -o FILE`: write a random-weight model of a
// named shape.
// `leoam gguf from-llama2c MODEL.bin TOKENIZER.bin -o FILE`: convert a llama2.c checkpoint.
// `leoam gguf pack MANIFEST.json -o FILE`: convert a tensor bundle (see gguf/tensor_bundle.h).
// `leoam gguf set IN KEY=TYPE:VALUE... -o FILE`: copy a GGUF file with metadata keys set.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"
#include "core/ggml_type.h"
#include "gguf/gguf_edit.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_info.h"
#include "gguf/gguf_writer.h"
#include "gguf/llama2c_import.h"
#include "gguf/tensor_bundle.h"
#include "hf/hf_folder.h"
#include "model/synthetic_model.h"

namespace leoam::cli {
namespace {

class GgufCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand("gguf", "inspect, make and convert GGUF files");
    cmd->require_subcommand(1);

    info_ = cmd->add_subcommand("info", "print a GGUF file's header, metadata and tensor table");
    info_->add_option("FILE", path_, "the GGUF file")->required()->check(readable_file())->type_name("");

    synth_ = cmd->add_subcommand("synth", "write a random-weight model of a named shape (for tests and benchmarks)");
    synth_->add_option("--preset", preset_,
                       std::string("shape and weight type, NAME[:TYPE]; names: ") + synthetic_model_preset_names() +
                           "; types: " + supported_type_names())
        ->capture_default_str();
    synth_->add_option("--seed", seed_, "random seed of the weights")->capture_default_str();
    synth_->add_option("--n-layer", n_layer_, "layers, in place of the preset's (0: the preset's)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
    synth_->add_option("-o,--output", output_, "the GGUF file to write")->required();

    import_ = cmd->add_subcommand("from-llama2c", "convert a llama2.c checkpoint and tokenizer to GGUF");
    import_->add_option("MODEL", checkpoint_, "llama2.c checkpoint (legacy layout, e.g. stories260K.bin)")
        ->required()->check(readable_file())->type_name("");
    import_->add_option("TOKENIZER", tokenizer_, "llama2.c tokenizer (e.g. tok512.bin)")
        ->required()->check(readable_file())->type_name("");
    import_->add_option("-o,--output", output_, "the GGUF file to write")->required();

    convert_ = cmd->add_subcommand("convert", "convert a Hugging Face checkpoint folder to GGUF (the model `-m DIR` loads)");
    convert_->add_option("DIR", folder_, "the folder: config.json, *.safetensors, tokenizer.json")
        ->required()->check(CLI::ExistingDirectory)->type_name("");
    convert_->add_option("--type", type_, "the matrices' type (default: as stored); one of: " + supported_type_names())
        ->check(weight_type())
        ->type_name("TYPE");
    convert_->add_option("-o,--output", output_, "the GGUF file to write")->required();

    pack_ = cmd->add_subcommand(
        "pack", "convert a tensor bundle (JSON manifest + raw float32 data, as tools/train writes) to GGUF");
    pack_->add_option("MANIFEST", manifest_, "the bundle's JSON manifest (its \"data\" path is relative to the manifest's directory)")
        ->required()->check(readable_file())->type_name("");
    pack_->add_option("-o,--output", output_, "the GGUF file to write")->required();

    set_ = cmd->add_subcommand("set", "copy a GGUF file with metadata keys set (added, or replaced in place)");
    set_->add_option("FILE", path_, "the GGUF file to copy")->required()->check(readable_file())->type_name("");
    set_->add_option("KEY=TYPE:VALUE", assignments_,
                     "keys to set, e.g. leoam.attention.logn_length=u32:1536 or general.name=str:my-model; TYPE is "
                     "u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str, or arr_ and one of those with a JSON array "
                     "as VALUE")
        ->required()->type_name("");
    set_->add_option("-o,--output", output_, "the GGUF file to write (may be FILE itself)")->required();
    return cmd;
  }

  int execute() override {
    if (info_->parsed()) return run_info();
    if (synth_->parsed()) return run_synth();
    if (pack_->parsed()) return run_pack();
    if (set_->parsed()) return run_set();
    if (convert_->parsed()) return run_convert();
    return run_import();
  }

 private:
  int run_info() {
    Result<GgufFile> gguf = GgufFile::open(path_);
    if (!gguf.is_ok()) {
      const Status& st = gguf.status();
      return fail(st.message().find(path_) == std::string::npos ? st.with_context(path_) : st);
    }
    print_gguf_info(*gguf, std::cout);
    std::cout.flush();
    return std::cout ? kExitOk : fail(io_error("error writing to stdout"));
  }

  int run_synth() {
    Result<SyntheticModelSpec> spec = synthetic_model_preset(preset_);
    if (!spec.is_ok()) {
      print_error(spec.status().message());
      return kExitUsage;
    }
    spec->seed = seed_;
    if (n_layer_ > 0) spec->n_layer = n_layer_;
    std::cerr << "leoam: writing " << preset_ << " (seed " << seed_ << ", " << spec->n_layer << " layers) to " << output_
              << "\n";
    const Status st = write_synthetic_model(*spec, output_);
    return st.is_ok() ? kExitOk : fail(st);
  }

  int run_import() {
    GgufWriter writer;
    Status st = import_llama2c(checkpoint_, tokenizer_, writer);
    if (st.is_ok()) st = writer.write(output_);
    return st.is_ok() ? kExitOk : fail(st);
  }

  int run_convert() {
    GgufWriter writer;
    Status st = import_hf_folder(folder_, ModelSource{folder_, type_}.import_options(), writer);
    if (st.is_ok()) st = writer.write(output_);
    return st.is_ok() ? kExitOk : fail(st);
  }

  int run_pack() {
    GgufWriter writer;
    Status st = import_tensor_bundle(manifest_, writer);
    if (st.is_ok()) st = writer.write(output_);
    return st.is_ok() ? kExitOk : fail(st);
  }

  int run_set() {
    std::vector<GgufKeyValue> set;
    for (const std::string& a : assignments_) {
      Result<GgufKeyValue> kv = parse_key_assignment(a);
      if (!kv.is_ok()) {
        print_error(kv.status().message());
        return kExitUsage;
      }
      set.push_back(std::move(*kv));
    }
    GgufWriter writer;
    Status st;
    {  // the input's mapping is closed before the output replaces it (when it is the same file)
      Result<GgufFile> gguf = GgufFile::open(path_);
      if (!gguf.is_ok()) return fail(gguf.status());
      st = copy_with_metadata(*gguf, set, writer);
    }
    if (st.is_ok()) st = writer.write(output_);
    return st.is_ok() ? kExitOk : fail(st);
  }

  CLI::App* info_ = nullptr;
  CLI::App* synth_ = nullptr;
  CLI::App* import_ = nullptr;
  CLI::App* pack_ = nullptr;
  CLI::App* convert_ = nullptr;
  CLI::App* set_ = nullptr;
  std::string path_;
  std::string preset_ = "tiny";
  uint64_t seed_ = 42;
  int n_layer_ = 0;
  std::string output_;
  std::string checkpoint_;
  std::string tokenizer_;
  std::string manifest_;
  std::string folder_;
  std::string type_;
  std::vector<std::string> assignments_;
};

}  // namespace

std::unique_ptr<Command> make_gguf_command() { return std::make_unique<GgufCommand>(); }

}  // namespace leoam::cli
