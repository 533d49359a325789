// Helpers of the chat-template tests: python-jinja2 as the reference renderer
// (tests/chat/jinja_reference.py, one python run for a batch of cases) and the real templates
// that npm packages ship (tests/chat/fetch_chat_templates.py).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "../temp_dir.h"

namespace leoam::chat::testing_util {

struct ReferenceCase {
  std::string source;
  nlohmann::json context = nlohmann::json::object();
  TemplateOptions options;
  std::optional<std::tm> now;  // what strftime_now() sees in both engines
};

// What a renderer made of a case: output text, or an error message.
struct Outcome {
  bool ok = false;
  std::string text;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `script args...` with LEOAM_PYTHON; the exit status (77: skip), or -1 if it did not run.
inline int run_python(const std::string& script, const std::string& args) {
  const std::string command =
      std::string(LEOAM_PYTHON) + " " + LEOAM_SOURCE_DIR + "/tests/chat/" + script + " " + args;
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// python-jinja2's outcome for each case, or nullopt (with *why) when the reference cannot run.
inline std::optional<std::vector<Outcome>> render_with_jinja2(const std::vector<ReferenceCase>& cases,
                                                              std::string* why) {
  leoam::testing_util::TempDir dir;
  nlohmann::json input = nlohmann::json::array();
  for (const ReferenceCase& c : cases) {
    input.push_back({{"template", c.source},
                     {"context", c.context},
                     {"trim_blocks", c.options.trim_blocks},
                     {"lstrip_blocks", c.options.lstrip_blocks},
                     {"keep_trailing_newline", c.options.keep_trailing_newline}});
    if (c.now) {
      input.back()["now"] = {c.now->tm_year + 1900, c.now->tm_mon + 1, c.now->tm_mday,
                             c.now->tm_hour,        c.now->tm_min,     c.now->tm_sec};
    }
  }
  std::ofstream(dir.file("cases.json"), std::ios::binary) << input.dump();
  const int rc = run_python("jinja_reference.py", dir.file("cases.json") + " " + dir.file("results.json"));
  if (rc != 0) {
    *why = rc == 77 ? "python3-jinja2 is not installed (scripts/install-deps.sh --with-tests)"
                    : "tests/chat/jinja_reference.py failed (exit " + std::to_string(rc) + ")";
    return std::nullopt;
  }
  const nlohmann::json results = nlohmann::json::parse(read_file(dir.file("results.json")));
  std::vector<Outcome> outcomes;
  for (const auto& r : results) {
    outcomes.push_back(r.contains("output") ? Outcome{true, r["output"].get<std::string>()}
                                            : Outcome{false, r["error"].get<std::string>()});
  }
  return outcomes;
}

inline Outcome render_with_leoam(const ReferenceCase& c) {
  auto t = ChatTemplate::parse(c.source, c.options);
  if (!t.is_ok()) return {false, t.status().message()};
  RenderOptions options;
  options.now = c.now;
  auto out = t->render(c.context, options);
  if (!out.is_ok()) return {false, out.status().message()};
  return {true, *out};
}

// Both engines must agree: the same bytes, or both fail (a template's raise_exception message
// must appear in ours). Returns how many cases rendered text (the rest failed in both).
inline int expect_same_as_jinja2(const std::vector<ReferenceCase>& cases, const std::vector<Outcome>& expected,
                                 const std::vector<std::string>& labels) {
  int n_text = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Outcome ours = render_with_leoam(cases[i]);
    const std::string label = i < labels.size() ? labels[i] : "case " + std::to_string(i);
    if (expected[i].ok) {
      EXPECT_TRUE(ours.ok) << label << ": leoam failed: " << ours.text << "\ntemplate:\n" << cases[i].source;
      EXPECT_EQ(ours.text, expected[i].text) << label << "\ntemplate:\n" << cases[i].source;
      n_text += ours.ok && ours.text == expected[i].text;
    } else {
      EXPECT_FALSE(ours.ok) << label << ": python-jinja2 failed (" << expected[i].text
                            << ") but leoam rendered:\n" << ours.text << "\ntemplate:\n" << cases[i].source;
      const std::string raised = "TemplateError: ";
      if (expected[i].text.starts_with(raised)) {
        EXPECT_NE(ours.text.find(expected[i].text.substr(raised.size())), std::string::npos)
            << label << ": expected raise_exception's message " << expected[i].text << ", got " << ours.text;
      }
    }
  }
  return n_text;
}

// The real templates: {"llama3": {"templates": {"default": ...}, "bos_token", "eos_token"}, ...},
// or nullopt (with *why) when npm or the network is unavailable.
inline std::optional<nlohmann::json> fetch_real_templates(std::string* why) {
  leoam::testing_util::TempDir dir;
  const int rc = run_python("fetch_chat_templates.py", dir.file("templates.json"));
  if (rc != 0) {
    *why = rc == 77 ? "npm or the network is unavailable, so the real templates could not be installed "
                      "(see tests/chat/fetch_chat_templates.py)"
                    : "tests/chat/fetch_chat_templates.py failed (exit " + std::to_string(rc) + ")";
    return std::nullopt;
  }
  return nlohmann::json::parse(read_file(dir.file("templates.json")));
}

}  // namespace leoam::chat::testing_util
