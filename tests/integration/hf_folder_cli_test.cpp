// `-m DIR` with a Hugging Face checkpoint folder, as a user runs it: `gguf convert` writes the
// model, and run (dense, and sparse on the tiered store from disk) and tokenize give the same
// output from the folder as from the converted file, for each family (Gemma's sliding layers
// included, and what they drop); a bad --type is a usage error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../unit/hf/hf_folder_writer.h"
#include "../unit/temp_dir.h"
#include "cli_runner.h"
#include "serve_client.h"
#include "server_process.h"

namespace leoam::testing_cli {
namespace {

class HfFolderCliTest : public ::testing::Test {
 protected:
  void SetUp() override { folder_ = write_folder("tiny-llama", "LlamaForCausalLM"); }
  std::string write_folder(const std::string& name, const std::string& architecture) {
    const std::string folder = dir_.path() + "/" + name;
    std::filesystem::create_directory(folder);
    testing_util::HfFolderSpec spec;
    spec.architecture = architecture;
    spec.n_ctx = 512;
    spec.dtype = "BF16";
    spec.shards = 2;
    if (architecture == "Qwen3ForCausalLM") spec.head_dim = 32;
    if (architecture == "OPTForCausalLM") spec.n_head_kv = spec.n_head;
    if (spec.gemma()) {  // windows shorter than the prompt, and caps that bite
      spec.n_layer = architecture == "Gemma3ForCausalLM" ? 7 : 2;
      spec.tied = true;
      spec.query_pre_attn_scalar = 16;
      spec.sliding_window = 24;
      if (architecture == "Gemma2ForCausalLM") {
        spec.attn_softcap = 5.0;
        spec.final_softcap = 10.0;
      } else {
        spec.rope_local_theta = 10000.0;
        spec.rope_theta = 1000000.0;
      }
    }
    testing_util::write_hf_folder(spec, folder);
    return folder;
  }
  CliResult run(const std::vector<std::string>& args) { return run_leoam(dir_.path(), args); }
  // run (dense, then leoam on the tiered store) and tokenize give the same output from both.
  void expect_same_runs(const std::string& folder, const std::string& gguf);

  testing_util::TempDir dir_;
  std::string folder_;
};

TEST_F(HfFolderCliTest, TheFolderRunsAsItsConvertedGguf) {
  for (const char* architecture :
       {"LlamaForCausalLM", "Qwen3ForCausalLM", "Phi3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
        "OPTForCausalLM"}) {
    SCOPED_TRACE(architecture);
    const std::string name = std::string("tiny-") + architecture;
    const std::string folder = write_folder(name, architecture);
    const std::string gguf = dir_.path() + "/" + name + ".gguf";
    const CliResult convert = run({"gguf", "convert", folder, "-o", gguf});
    ASSERT_EQ(convert.status, 0) << convert.err;
    const CliResult info = run({"gguf", "info", gguf});
    ASSERT_EQ(info.status, 0) << info.err;
    EXPECT_NE(info.out.find(name), std::string::npos) << info.out;
    expect_same_runs(folder, gguf);
  }
}

void HfFolderCliTest::expect_same_runs(const std::string& folder, const std::string& gguf) {
  // 160 tokens: far enough past the recent window that leoam picks among the far chunks.
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "the then and ";
  const std::vector<std::string> dense = {"-p", prompt, "-n", "12", "--temp", "0", "-t", "1"};
  const std::vector<std::string> sparse = {"--policy", "leoam", "--budget", "0.5", "--kv-device-mb", "0.03",
                                           "--kv-host-mb", "0.02", "--kv-chunk", "8", "--kv-recent", "8"};
  for (const bool tiered : {false, true}) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), dense.begin(), dense.end());
    if (tiered) args.insert(args.end(), sparse.begin(), sparse.end());
    std::vector<std::string> from_folder = args, from_file = args;
    from_folder.insert(from_folder.end(), {"-m", folder});
    from_file.insert(from_file.end(), {"-m", gguf});
    if (tiered) {
      from_folder.insert(from_folder.end(), {"--kv-dir", folder + "-kv"});
      from_file.insert(from_file.end(), {"--kv-dir", gguf + "-kv"});
    }
    const CliResult a = run(from_folder);
    const CliResult b = run(from_file);
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_FALSE(a.out.empty());
    EXPECT_EQ(a.out, b.out) << (tiered ? "leoam on the tiered store" : "dense");
    if (tiered) {
      EXPECT_NE(a.err.find("disk tier"), std::string::npos) << a.err;
    }
  }

  const CliResult ids_folder = run({"tokenize", "-m", folder, "-p", "the the then"});
  const CliResult ids_file = run({"tokenize", "-m", gguf, "-p", "the the then"});
  ASSERT_EQ(ids_folder.status, 0) << ids_folder.err;
  EXPECT_EQ(ids_folder.out, ids_file.out);
  EXPECT_NE(ids_folder.out.find("259\n"), std::string::npos) << "'the' is one merged token: " << ids_folder.out;
}

// Gemma 3's sliding layers on the tiered store drop what falls behind their window (--kv-stats
// counts it) and answer as when kept (--kv-swa-full); --kv-save keeps it without asking, and the
// saved session continues.
TEST_F(HfFolderCliTest, GemmaDropsItsSlidingLayersPastUnlessKept) {
  const std::string folder = write_folder("tiny-gemma3", "Gemma3ForCausalLM");
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "the then and ";
  const std::vector<std::string> args = {"run", "-m", folder, "-p", prompt, "-n", "12", "--temp", "0", "-t", "1",
                                         "--policy", "leoam", "--kv-chunk", "8", "--kv-recent", "8",
                                         "--kv-device-mb", "0.2", "--kv-host-mb", "0.05", "--kv-stats"};
  std::vector<std::string> dropped = args, kept = args, saved = args;
  dropped.insert(dropped.end(), {"--kv-dir", dir_.path() + "/kv-dropped"});
  kept.insert(kept.end(), {"--kv-dir", dir_.path() + "/kv-kept", "--kv-swa-full"});
  const std::string session = dir_.path() + "/gemma-session";
  saved.insert(saved.end(), {"--kv-dir", dir_.path() + "/kv-saved", "--kv-save", session});
  const CliResult a = run(dropped);
  const CliResult b = run(kept);
  const CliResult c = run(saved);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(a.err.find("chunks dropped behind their layer's window"), std::string::npos) << a.err;
  EXPECT_EQ(b.err.find("chunks dropped"), std::string::npos) << b.err;
  EXPECT_EQ(c.err.find("chunks dropped"), std::string::npos) << c.err;
  EXPECT_FALSE(a.out.empty());
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out, c.out);
  const CliResult load = run({"run", "-m", folder, "-n", "4", "--temp", "0", "-t", "1", "--kv-load", session});
  EXPECT_EQ(load.status, 0) << load.err;
}

// The server runs Gemma 3 on the tiered store with its prompt cache off, so that its sliding
// layers drop their past, and answers as `run` does.
TEST_F(HfFolderCliTest, ServeGemmaDroppingItsSlidingLayersPastAsRunDoes) {
  const std::string folder = write_folder("tiny-gemma3-serve", "Gemma3ForCausalLM");
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "the then and ";
  const std::vector<std::string> store = {"-c", "512", "-t", "1", "--policy", "leoam", "--kv-chunk", "8",
                                          "--kv-recent", "8", "--kv-device-mb", "0.2", "--kv-host-mb", "0.05"};
  std::vector<std::string> alone = {"run", "-m", folder, "-p", prompt, "-n", "8", "--temp", "0", "--kv-stats",
                                    "--kv-dir", dir_.path() + "/kv-run"};
  alone.insert(alone.end(), store.begin(), store.end());
  const CliResult r = run(alone);
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_NE(r.err.find("chunks dropped behind their layer's window"), std::string::npos) << r.err;
  std::vector<std::string> serve = {"-m", folder, "--kv-dir", dir_.path() + "/kv-serve", "--prompt-cache-gb", "0"};
  serve.insert(serve.end(), store.begin(), store.end());
  ServerProcess server(dir_.path(), serve);
  ASSERT_TRUE(server.started()) << server.stderr_text();
  auto c = server.client();
  int status = 0;
  const nlohmann::json done = post_json(*c, "/v1/completions",
                                        {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << done.dump();
  const std::string text = done["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_NE(r.out.find(prompt + text), std::string::npos) << "run: " << r.out << "\nserver: " << text;
  EXPECT_EQ(server.stop(), 0);
}

// A saved session is tied to the folder's files and the type it was loaded as.
TEST_F(HfFolderCliTest, ASavedSessionLoadsWithTheSameFolderAndTypeOnly) {
  const std::string session = dir_.path() + "/session";
  const CliResult save = run({"run", "-m", folder_, "-p", "the the then", "-n", "4", "--temp", "0", "--kv-save", session});
  ASSERT_EQ(save.status, 0) << save.err;
  const CliResult load = run({"run", "-m", folder_, "-n", "4", "--temp", "0", "--kv-load", session});
  EXPECT_EQ(load.status, 0) << load.err;
  const CliResult other_type =
      run({"run", "-m", folder_, "--type", "f32", "-n", "4", "--temp", "0", "--kv-load", session});
  EXPECT_EQ(other_type.status, 1);
  EXPECT_NE(other_type.err.find("saved with another model"), std::string::npos) << other_type.err;
}

// `serve -m DIR`: the model is named after the folder, and chat completions use the template of
// its tokenizer_config.json.
TEST_F(HfFolderCliTest, ServeAFolderWithItsChatTemplate) {
  testing_util::write_file(folder_ + "/tokenizer_config.json",
                           nlohmann::json{{"chat_template",
                                           "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                                           "{% if add_generation_prompt %}assistant:{% endif %}"}}
                               .dump());
  ServerProcess server(dir_.path(), {"-m", folder_, "-c", "256"});
  ASSERT_TRUE(server.started()) << server.stderr_text();
  auto c = server.client();
  auto models = c->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(nlohmann::json::parse(models->body)["data"][0]["id"], "tiny-llama");
  int status = 0;
  const nlohmann::json chat = post_json(
      *c, "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", "the then"}}}}, {"max_tokens", 4}, {"temperature", 0}}, &status);
  EXPECT_EQ(status, 200) << chat.dump();
  EXPECT_EQ(chat["usage"]["completion_tokens"], 4) << chat.dump();
  // The prompt is the template's text, token for token.
  const CliResult ids = run({"tokenize", "-m", folder_, "-p", "user: the then\nassistant:"});
  ASSERT_EQ(ids.status, 0) << ids.err;
  EXPECT_EQ(chat["usage"]["prompt_tokens"], CliResult::lines(ids.out).size()) << chat.dump();
  EXPECT_EQ(server.stop(), 0);
}

TEST_F(HfFolderCliTest, TypeQuantizesOrIsAUsageError) {
  const CliResult q8 = run({"run", "-m", folder_, "--type", "q8_0", "-p", "the", "-n", "2", "--temp", "0"});
  EXPECT_EQ(q8.status, 0) << q8.err;
  const CliResult bad = run({"run", "-m", folder_, "--type", "q5_k", "-p", "the", "-n", "2"});
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("f32 f16 bf16 q8_0 q4_0 q4_k q6_k"), std::string::npos) << bad.err;
  const CliResult no_config = run({"run", "-m", dir_.path(), "-p", "the", "-n", "2"});
  EXPECT_EQ(no_config.status, 1);
  EXPECT_NE(no_config.err.find("config.json"), std::string::npos) << no_config.err;
}

}  // namespace
}  // namespace leoam::testing_cli
