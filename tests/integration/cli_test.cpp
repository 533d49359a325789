// Runs the `leoam` binary (LEOAM_BIN) and checks what a user sees: stdout, stderr, exit status.
// Tests that need the stories260K fixture skip with a message when it is absent.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;

using leoam::testing_cli::kFixtures;
using leoam::testing_cli::kStoriesModel;
const std::string kStoriesV1 = kFixtures + "/models/stories260K/tinyllamas-stories-260k-f32.gguf";
// Karpathy's documented greedy sample from BOS.
const std::string kGreedyFromBos =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park";

using leoam::testing_cli::CliResult;
using leoam::testing_cli::read_file;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/leoam_cli_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs leoam with `args`; stdin is /dev/null.
  CliResult run(const std::vector<std::string>& args) { return leoam::testing_cli::run_leoam(dir_, args); }

  std::string write_file(const std::string& name, const std::string& contents) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  // One line on stderr, "leoam: error: ...".
  static void expect_one_line_error(const CliResult& r) {
    const auto lines = r.err_lines();
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("leoam: error: ", 0), 0u) << lines[0];
  }

  std::string dir_;
};

#define REQUIRE_FIXTURE(path)                                               \
  if (!fs::exists(path)) GTEST_SKIP() << "fixture absent: " << (path)

TEST_F(CliTest, HelpListsEveryFlag) {
  CliResult top = run({"--help"});
  EXPECT_EQ(top.status, 0);
  for (const char* s : {"run", "tokenize", "gguf", "--help-all"}) EXPECT_NE(top.out.find(s), std::string::npos) << s;

  CliResult r = run({"run", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.err, "");
  for (const char* flag : {"-m,--model", "-p,--prompt", "-f,--file", "-n,--n-predict", "-c,--ctx-size", "-b,--batch-size",
                           "-t,--threads",
                           "--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n", "--seed",
                           "--no-bos", "--parse-special", "--dump-logits", "--verbose"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << " missing from:\n" << r.out;
  }
  // Defaults are shown.
  for (const char* def : {"=128", "=0.8", "=40", "=0.95", "=0.05", "=64", "-1: a random one"}) {
    EXPECT_NE(r.out.find(def), std::string::npos) << def;
  }

  CliResult t = run({"tokenize", "--help"});
  EXPECT_EQ(t.status, 0);
  for (const char* flag : {"-m,--model", "-p,--prompt", "-f,--file", "--no-bos", "--parse-special"}) {
    EXPECT_NE(t.out.find(flag), std::string::npos) << flag;
  }
  CliResult g = run({"gguf", "info", "--help"});
  EXPECT_EQ(g.status, 0);
  EXPECT_NE(g.out.find("FILE"), std::string::npos);
}

// What a llama.cpp user types: --version, -s, -e, --no-display-prompt, -f - (stdin), -ngl and
// -no-cnv (accepted: no GPU, never a chat); -t beyond the machine refused; --help wrapped.
TEST_F(CliTest, LlamaCppHabitsWork) {
  CliResult v = run({"--version"});
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("leoam ", 0), 0u) << v.out;
  CliResult help = run({"run", "--help"});
  std::istringstream lines(help.out);
  for (std::string line; std::getline(lines, line);) {
    // Descriptions wrap at 100 columns; only an option's own name and type column may run past.
    if (line.size() > 100) {
      EXPECT_EQ(line.find("  ", 2), std::string::npos) << line;
    }
  }
  REQUIRE_FIXTURE(kStoriesModel);
  const std::vector<std::string> greedy = {"run", "-m", kStoriesModel, "-n", "6", "--temp", "0", "-t", "1"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = greedy;
    a.insert(a.end(), more.begin(), more.end());
    return run(a);
  };
  const CliResult plain = with({"-p", "Once\nupon"});
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.out.rfind("Once\nupon", 0), 0u) << plain.out;  // as given
  const CliResult escaped = with({"-p", "Once\\nupon", "-e", "-ngl", "99", "-no-cnv", "-s", "7"});
  ASSERT_EQ(escaped.status, 0) << escaped.err;
  EXPECT_EQ(escaped.out, plain.out);  // \\n read as a newline
  EXPECT_NE(escaped.err.find("no GPU backend"), std::string::npos) << escaped.err;
  const CliResult quiet = with({"-p", "Once\nupon", "--no-display-prompt"});
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(quiet.out, plain.out.substr(std::string("Once\nupon").size()));
  // -f - reads the prompt from stdin.
  std::string cmd = "printf 'Once\\nupon' | " + leoam::testing_cli::shell_quote(LEOAM_BIN);
  for (const std::string& a : greedy) cmd += " " + leoam::testing_cli::shell_quote(a);
  cmd += " -f - 2>/dev/null";
  std::string piped;
  if (std::FILE* p = ::popen(cmd.c_str(), "r"); p != nullptr) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) piped.append(buf, n);
    EXPECT_EQ(::pclose(p), 0);
  }
  EXPECT_EQ(piped, plain.out);
  const CliResult many = with({"-p", "x", "-t", "100000"});
  EXPECT_EQ(many.status, 2);
  EXPECT_NE(many.err.find("threads at once"), std::string::npos) << many.err;
}

// A model's own errors name its path once; a directory no file can be made in says why.
TEST_F(CliTest, ErrorsSayThePathOnceAndWhyADirectoryWillNotDo) {
  const std::string trunc = write_file("trunc.gguf", "GGUF");
  for (const std::string cmd : {"run", "serve"}) {
    std::vector<std::string> a = {cmd, "-m", trunc};
    if (cmd == "run") a.insert(a.end(), {"-p", "x"});
    const CliResult r = run(a);
    EXPECT_EQ(r.status, 1) << r.err;
    const size_t first = r.err.find(trunc);
    ASSERT_NE(first, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(trunc, first + trunc.size()), std::string::npos) << r.err;
  }
  if (fs::exists("/proc/self")) {
    const CliResult r = run({"run", "-m", trunc, "-p", "x", "--kv-dir", "/proc"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("takes no new files"), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, BadFlagIsAOneLineUsageError) {
  CliResult r = run({"run", "--bogus-flag"});
  EXPECT_EQ(r.status, 2);
  expect_one_line_error(r);
  EXPECT_NE(r.err.find("--bogus-flag"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, MissingSubcommandOrRequiredOptionIsAUsageError) {
  CliResult none = run({});
  EXPECT_EQ(none.status, 2);
  expect_one_line_error(none);

  const std::string prompt = write_file("p.txt", "x");
  CliResult no_model = run({"run", "-p", "x"});
  EXPECT_EQ(no_model.status, 2);
  expect_one_line_error(no_model);
  EXPECT_NE(no_model.err.find("--model"), std::string::npos) << no_model.err;

  CliResult no_prompt = run({"run", "-m", prompt});
  EXPECT_EQ(no_prompt.status, 2);
  expect_one_line_error(no_prompt);
  EXPECT_NE(no_prompt.err.find("-p"), std::string::npos) << no_prompt.err;

  CliResult bad_value = run({"run", "-m", prompt, "-p", "x", "--top-p", "2"});
  EXPECT_EQ(bad_value.status, 2);
  expect_one_line_error(bad_value);
}

TEST_F(CliTest, MissingModelFileIsAUsageErrorNamingThePath) {
  const std::string missing = dir_ + "/no_such_model.gguf";
  for (const char* cmd : {"run", "tokenize"}) {
    CliResult r = run({cmd, "-m", missing, "-p", "hello"});
    EXPECT_EQ(r.status, 2) << cmd;
    expect_one_line_error(r);
    EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  }
  CliResult g = run({"gguf", "info", missing});
  EXPECT_EQ(g.status, 2);
  expect_one_line_error(g);
  EXPECT_NE(g.err.find(missing), std::string::npos) << g.err;

  CliResult f = run({"run", "-m", missing, "-f", dir_ + "/no_such_prompt.txt"});
  EXPECT_EQ(f.status, 2);
  expect_one_line_error(f);
}

TEST_F(CliTest, PromptAndFileTogetherIsAUsageError) {
  const std::string prompt = write_file("p.txt", "hello");
  CliResult r = run({"run", "-m", prompt, "-p", "x", "-f", prompt});
  EXPECT_EQ(r.status, 2);
  expect_one_line_error(r);
  CliResult t = run({"tokenize", "-m", prompt, "-f", prompt, "-p", "x"});
  EXPECT_EQ(t.status, 2);
  expect_one_line_error(t);
}

class StoriesCliTest : public CliTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(StoriesCliTest, GreedyFromBosMatchesKnownSample) {
  const std::string model = kFixtures + "/models/stories260K/" + GetParam();
  REQUIRE_FIXTURE(model);
  CliResult r = run({"run", "-m", model, "-p", "", "--temp", "0", "-n", "40"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind(kGreedyFromBos, 0), 0u) << r.out;  // the output starts with it
  // Summary on stderr: prompt and generated token counts with speeds.
  EXPECT_NE(r.err.find("prompt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("40 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

TEST_P(StoriesCliTest, PromptIsEchoedThenContinued) {
  const std::string model = kFixtures + "/models/stories260K/" + GetParam();
  REQUIRE_FIXTURE(model);
  CliResult r = run({"run", "-m", model, "-p", "Once upon a time", "--temp", "0", "-n", "10"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl", 0), 0u) << r.out;
  EXPECT_EQ(r.out.back(), '\n');

  const std::string prompt = write_file("prompt.txt", "Once upon a time\n");  // the trailing newline is dropped
  CliResult f = run({"run", "-m", model, "-f", prompt, "--temp", "0", "-n", "10"});
  ASSERT_EQ(f.status, 0) << f.err;
  EXPECT_EQ(f.out, r.out);
}

TEST_P(StoriesCliTest, SameSeedSameTextDifferentSeedDifferentText) {
  const std::string model = kFixtures + "/models/stories260K/" + GetParam();
  REQUIRE_FIXTURE(model);
  auto gen = [&](const char* seed) {
    CliResult r = run({"run", "-m", model, "-p", "", "--temp", "1.0", "-n", "60", "--seed", seed});
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
  };
  EXPECT_EQ(gen("1234"), gen("1234"));
  EXPECT_NE(gen("1234"), gen("98765"));
  // -1 asks for a random seed, as in llama.cpp: not 2^64 - 1, and not the same twice.
  const auto seed_of = [&](const char* seed) {
    CliResult r = run({"run", "-m", model, "-p", "", "-n", "1", "--seed", seed, "--verbose"});
    EXPECT_EQ(r.status, 0) << r.err;
    const size_t at = r.err.find("sampling: seed ");
    return at == std::string::npos ? std::string() : r.err.substr(at + 15, r.err.find(',', at) - at - 15);
  };
  const std::string random = seed_of("-1");
  EXPECT_FALSE(random.empty());
  EXPECT_NE(random, "18446744073709551615");
  EXPECT_NE(random, seed_of("-1"));
  EXPECT_EQ(seed_of("42"), "42");
  EXPECT_EQ(run({"run", "-m", model, "-p", "", "--seed", "-2"}).status, 2);
}

TEST_P(StoriesCliTest, TokenizePrintsOneIdPerLineBosFirst) {
  const std::string model = kFixtures + "/models/stories260K/" + GetParam();
  REQUIRE_FIXTURE(model);
  CliResult r = run({"tokenize", "-m", model, "-p", "Once upon a time"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = CliResult::lines(r.out);
  ASSERT_GE(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0], "1");  // BOS
  for (const auto& line : lines) {
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.find_first_not_of("0123456789"), std::string::npos) << line;
    EXPECT_LT(std::stoi(line), 512);
  }
  CliResult no_bos = run({"tokenize", "-m", model, "-p", "Once upon a time", "--no-bos"});
  ASSERT_EQ(no_bos.status, 0) << no_bos.err;
  EXPECT_EQ(CliResult::lines(no_bos.out), std::vector<std::string>(lines.begin() + 1, lines.end()));
}

TEST_P(StoriesCliTest, DumpLogitsWritesEveryPosition) {
  const std::string model = kFixtures + "/models/stories260K/" + GetParam();
  REQUIRE_FIXTURE(model);
  CliResult tok = run({"tokenize", "-m", model, "-p", "Once upon a time"});
  ASSERT_EQ(tok.status, 0) << tok.err;
  const size_t n_prompt = CliResult::lines(tok.out).size();

  const std::string dump = dir_ + "/logits.txt";
  constexpr int kGenerate = 8;  // greedy from this prompt does not end within 8 tokens
  CliResult r = run({"run", "-m", model, "-p", "Once upon a time", "--temp", "0", "-n", std::to_string(kGenerate),
                     "--dump-logits", dump});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = CliResult::lines(read_file(dump));
  ASSERT_EQ(lines.size(), n_prompt + kGenerate);
  for (const auto& line : lines) {
    std::istringstream in(line);
    size_t n = 0;
    for (std::string field; in >> field; ++n) {
      char* end = nullptr;
      std::strtof(field.c_str(), &end);
      ASSERT_EQ(*end, '\0') << "not a float: " << field;
    }
    EXPECT_EQ(n, 512u);
  }
}

// -b 1 decodes the prompt one token at a time: the same logits as one batch, up to rounding and
// to the 8-bit activations of the AVX2/AVX-512 decode matvecs, which a batch may not use (a
// batch's F32 SGEMM matched the numpy reference to 2e-6 where one token at a time differed by
// 1.35e-3 on a logit of -0.21): 4e-3 * (1 + |x|) leaves room for that quantization and none for
// a real error.
TEST_P(StoriesCliTest, PromptDecodedOneTokenAtATimeGivesTheSameLogits) {
  const std::string model = kFixtures + "/models/stories260K/" + GetParam();
  REQUIRE_FIXTURE(model);
  std::vector<std::vector<std::string>> dumps;
  for (const char* batch : {"512", "1", "3"}) {
    const std::string dump = dir_ + "/logits-b" + batch + ".txt";
    CliResult r = run({"run", "-m", model, "-p", "Once upon a time there was a dog", "--temp", "0", "-n", "4", "-b",
                       batch, "-t", "1", "--dump-logits", dump});
    ASSERT_EQ(r.status, 0) << r.err;
    dumps.push_back(CliResult::lines(read_file(dump)));
  }
  for (size_t d = 1; d < dumps.size(); ++d) {
    ASSERT_EQ(dumps[d].size(), dumps[0].size());
    for (size_t row = 0; row < dumps[0].size(); ++row) {
      std::istringstream a(dumps[0][row]), b(dumps[d][row]);
      double x = 0, y = 0;
      while (a >> x && b >> y) ASSERT_NEAR(x, y, 4e-3 * (1.0 + std::fabs(x))) << "batch " << d << " row " << row;
    }
  }
  CliResult bad = run({"run", "-m", model, "-p", "x", "-b", "0"});
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("--batch-size"), std::string::npos) << bad.err;
}

TEST_P(StoriesCliTest, TruncatedModelIsAOneLineFailureNamingTheFile) {
  const std::string model = kFixtures + "/models/stories260K/" + GetParam();
  REQUIRE_FIXTURE(model);
  std::string bytes = read_file(model);
  bytes.resize(1000);
  const std::string truncated = write_file("truncated.gguf", bytes);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "-m", truncated, "-p", "x"}, {"tokenize", "-m", truncated, "-p", "x"},
        {"gguf", "info", truncated}}) {
    CliResult r = run(args);
    EXPECT_EQ(r.status, 1) << args[0];
    expect_one_line_error(r);
    EXPECT_NE(r.err.find(truncated), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << args[0];
  }
}

TEST_P(StoriesCliTest, PromptLongerThanContextIsAOneLineFailure) {
  const std::string model = kFixtures + "/models/stories260K/" + GetParam();
  REQUIRE_FIXTURE(model);
  CliResult r = run({"run", "-m", model, "-p", "Once upon a time there was a girl", "-c", "4"});
  EXPECT_EQ(r.status, 1);
  expect_one_line_error(r);
  EXPECT_NE(r.err.find("more than the context size of 4; raise the context size or shorten the prompt (-c)"),
            std::string::npos)
      << r.err;
}

INSTANTIATE_TEST_SUITE_P(Stories260K, StoriesCliTest,
                         ::testing::Values("stories260K.gguf", "tinyllamas-stories-260k-f32.gguf"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "stories260K.gguf" ? std::string("gguf_v3") : std::string("gguf_v1");
                         });

TEST_F(CliTest, GgufInfoDescribesStories260K) {
  REQUIRE_FIXTURE(kStoriesModel);
  CliResult r = run({"gguf", "info", kStoriesModel});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("llama.block_count"), std::string::npos);
  EXPECT_NE(r.out.find("blk.0.attn_q.weight"), std::string::npos);
}

TEST_F(CliTest, SynthWritesARunnableModelSameSeedSameBytes) {
  const std::string a = dir_ + "/a.gguf", b = dir_ + "/b.gguf";
  ASSERT_EQ(run({"gguf", "synth", "--preset", "tiny:q4_0", "--seed", "7", "-o", a}).status, 0);
  ASSERT_EQ(run({"gguf", "synth", "--preset", "tiny:q4_0", "--seed", "7", "-o", b}).status, 0);
  EXPECT_EQ(read_file(a), read_file(b));
  CliResult r = run({"run", "-m", a, "-p", "The quick brown fox", "-n", "8", "--seed", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("The quick brown fox", 0), 0u) << r.out;
  EXPECT_NE(r.err.find("generated      8 tokens"), std::string::npos) << r.err;

  CliResult bad = run({"gguf", "synth", "--preset", "llama-3b", "-o", dir_ + "/c.gguf"});
  EXPECT_EQ(bad.status, 2);
  expect_one_line_error(bad);
  EXPECT_NE(bad.err.find("tiny"), std::string::npos) << "lists the presets: " << bad.err;
}

TEST_F(CliTest, FromLlama2cConvertsTheCheckpoint) {
  const std::string dir = kFixtures + "/models/stories260K/";
  REQUIRE_FIXTURE(dir + "stories260K.bin");
  const std::string out = dir_ + "/s.gguf";
  CliResult c = run({"gguf", "from-llama2c", dir + "stories260K.bin", dir + "tok512.bin", "-o", out});
  ASSERT_EQ(c.status, 0) << c.err;
  CliResult r = run({"run", "-m", out, "-p", "", "--temp", "0", "-n", "30"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(kGreedyFromBos), std::string::npos) << r.out;
}

TEST_F(CliTest, SetCopiesAModelWithMetadataKeys) {
  const std::string a = dir_ + "/a.gguf", b = dir_ + "/b.gguf";
  ASSERT_EQ(run({"gguf", "synth", "--preset", "tiny:q8_0", "-o", a}).status, 0);
  CliResult c = run({"gguf", "set", a, "leoam.attention.logn_length=u32:16", "general.name=str:tiny v2", "-o", b});
  ASSERT_EQ(c.status, 0) << c.err;
  CliResult info = run({"gguf", "info", b});
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_NE(info.out.find("leoam.attention.logn_length             u32             16"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("\"tiny v2\""), std::string::npos) << info.out;
  // The weights are the same bytes: without the key, the copy generates what the original does.
  ASSERT_EQ(run({"gguf", "set", a, "general.name=str:copy", "-o", b}).status, 0);
  CliResult ra = run({"run", "-m", a, "-p", "Hello", "-n", "12", "--temp", "0"});
  CliResult rb = run({"run", "-m", b, "-p", "Hello", "-n", "12", "--temp", "0"});
  ASSERT_EQ(ra.status, 0) << ra.err;
  EXPECT_EQ(ra.out, rb.out);

  for (const char* bad : {"logn_length", "k=u32:-1", "k=u33:1", "k=f32:x"}) {
    CliResult r = run({"gguf", "set", a, bad, "-o", dir_ + "/c.gguf"});
    EXPECT_EQ(r.status, 2) << bad;
    expect_one_line_error(r);
    EXPECT_FALSE(fs::exists(dir_ + "/c.gguf")) << bad;
  }
}

TEST_F(CliTest, PackConvertsATensorBundle) {
  std::vector<float> values(2 * 32);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i) - 4.0f;
  write_file("w.f32", std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  const std::string manifest = write_file("bundle.json", R"({
    "format": "leoam-tensor-bundle", "version": 1, "data": "w.f32",
    "metadata": [{"key": "general.architecture", "type": "str", "value": "llama"},
                 {"key": "llama.block_count", "type": "u32", "value": 4}],
    "tensors": [{"name": "token_embd.weight", "shape": [2, 32], "offset": 0, "type": "f16"},
                {"name": "output_norm.weight", "shape": [32], "offset": 128}]
  })");
  const std::string out = dir_ + "/packed.gguf";
  CliResult c = run({"gguf", "pack", manifest, "-o", out});
  ASSERT_EQ(c.status, 0) << c.err;
  CliResult info = run({"gguf", "info", out});
  ASSERT_EQ(info.status, 0) << info.err;
  for (const char* s : {"llama.block_count", "token_embd.weight", "F16", "output_norm.weight"}) {
    EXPECT_NE(info.out.find(s), std::string::npos) << s << " missing from:\n" << info.out;
  }

  const std::string bad = write_file("bad.json", R"({"format": "leoam-tensor-bundle", "version": )");
  const std::string bad_out = dir_ + "/bad.gguf";
  CliResult b = run({"gguf", "pack", bad, "-o", bad_out});
  EXPECT_EQ(b.status, 1);
  expect_one_line_error(b);
  EXPECT_NE(b.err.find(bad + ": invalid JSON"), std::string::npos) << b.err;
  EXPECT_FALSE(fs::exists(bad_out));

  CliResult missing = run({"gguf", "pack", dir_ + "/none.json", "-o", bad_out});
  EXPECT_EQ(missing.status, 2);
  expect_one_line_error(missing);
  EXPECT_NE(missing.err.find("none.json"), std::string::npos) << missing.err;
}

}  // namespace
