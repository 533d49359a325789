// JsonConstraint (json_constraint.h): which texts continue a JSON value of a schema, the fewest
// characters that finish one, and a random "model" that samples among the allowed pieces always
// writing, within its budget, a value that parses and matches the schema.
#include "engine/json_constraint.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace leoam {
namespace {

using Json = nlohmann::json;

bool accepts_whole(JsonConstraint c, const std::string& text) { return c.feed(text) && c.complete(); }

TEST(JsonConstraint, AnyObjectTakesCompactJsonObjects) {
  const JsonConstraint c = JsonConstraint::any_object();
  EXPECT_EQ(c.min_chars_to_finish(), 2);
  EXPECT_TRUE(accepts_whole(c, "{}"));
  EXPECT_TRUE(accepts_whole(c, R"({"a":1,"b":[true,null,"x",[]],"c":{"d":-0.5},"e":false})"));
  EXPECT_TRUE(accepts_whole(c, "{\"caf\xc3\xa9\":\"\xe2\x82\xac\"}"));  // UTF-8 in strings
  for (const char* bad : {"{\"\xc3\":1}", "{\"\xa9\":1}", "{\"\xe2\x82\":1}", "[1]", "{a:1}", R"({"a":})", R"({"a":1,})", " {}", R"({"a" :1})", R"({"a":01})",
                          R"({"a":"x\"y"})", R"({"a":tru})", "{}}"}) {
    EXPECT_FALSE(accepts_whole(c, bad)) << bad;
  }
  JsonConstraint partial = c;
  ASSERT_TRUE(partial.feed(R"({"a":[1,{"b":"x)"));
  EXPECT_FALSE(partial.complete());
  EXPECT_EQ(partial.min_chars_to_finish(), 4);  // "}]}
  EXPECT_TRUE(accepts_whole(partial, R"("}]})"));
}

Json person_schema() {
  return Json::parse(R"({
    "type": "object", "title": "person",
    "properties": {
      "name": {"type": "string", "maxLength": 5},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 2},
      "ok": {"type": "boolean"},
      "score": {"type": "number"},
      "nothing": {"type": "null"}
    },
    "required": ["name", "age"], "additionalProperties": false
  })");
}

TEST(JsonConstraint, ASchemasObjectWritesEveryPropertyInNameOrder) {
  auto c = JsonConstraint::from_schema(person_schema());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  const std::string good = R"({"age":31,"name":"Ann","nothing":null,"ok":true,"score":2.5,"tags":["x","y"]})";
  EXPECT_TRUE(accepts_whole(*c, good));
  EXPECT_EQ(c->min_chars_to_finish(),
            static_cast<int64_t>(std::string(R"({"age":0,"name":"","nothing":null,"ok":true,"score":0,"tags":["x"]})").size()));
  for (const char* bad : {
           R"({"name":"Ann","age":31,"nothing":null,"ok":true,"score":2.5,"tags":["x"]})",  // order
           R"({"age":31,"name":"Annabel","nothing":null,"ok":true,"score":2.5,"tags":["x"]})",  // maxLength
           R"({"age":3.5,"name":"Ann","nothing":null,"ok":true,"score":2.5,"tags":["x"]})",  // integer
           R"({"age":31,"name":"Ann","nothing":null,"ok":true,"score":2.5,"tags":[]})",  // minItems
           R"({"age":31,"name":"Ann","nothing":null,"ok":true,"score":2.5,"tags":["x","y","x"]})",  // maxItems
           R"({"age":31,"name":"Ann","nothing":null,"ok":true,"score":2.5,"tags":["z"]})",  // enum
           R"({"age":31})"}) {
    EXPECT_FALSE(accepts_whole(*c, bad)) << bad;
  }
}

TEST(JsonConstraint, UnsupportedKeywordsAreRefusedByName) {
  for (const auto& [schema, names] : std::vector<std::pair<const char*, const char*>>{
           {R"({"type": "string", "pattern": "a+"})", "'pattern'"},
           {R"({"anyOf": [{"type": "string"}]})", "'anyOf'"},
           {R"({"type": ["string", "null"]})", "a list of types"},
           {R"({"type": "object", "properties": {"a": {"$ref": "#/x"}}})", "'$ref'"},
           {R"({"type": "date"})", "unknown type"},
           {R"({"type": "array", "minItems": 3, "maxItems": 2})", "'minItems' exceeds"}}) {
    auto c = JsonConstraint::from_schema(Json::parse(schema));
    ASSERT_FALSE(c.is_ok()) << schema;
    EXPECT_NE(c.status().message().find(names), std::string::npos) << c.status().message();
  }
}

// A tool call: the name first, then the arguments of that function's parameters.
TEST(JsonConstraint, AToolCallsArgumentsAreThoseOfItsName) {
  auto c = JsonConstraint::tool_call(
      {{"weather", Json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}})")},
       {"time", Json::parse(R"({"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}})")}});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_TRUE(accepts_whole(*c, R"({"name":"weather","arguments":{"city":"Paris"}})"));
  EXPECT_TRUE(accepts_whole(*c, R"({"name":"time","arguments":{"zone":"cet"}})"));
  EXPECT_FALSE(accepts_whole(*c, R"({"name":"time","arguments":{"city":"Paris"}})"));
  EXPECT_FALSE(accepts_whole(*c, R"({"name":"news","arguments":{}})"));
  JsonConstraint named = *c;
  ASSERT_TRUE(named.feed(R"({"name":"time",)"));
  EXPECT_EQ(named.min_chars_to_finish(), static_cast<int64_t>(std::string(R"("arguments":{"zone":"utc"}})").size()));
}

// A random model: at each step a piece drawn uniformly from a vocabulary of printable characters
// and some longer pieces, among those allowed with the steps left. It always finishes in budget,
// and what it writes parses and matches the schema.
TEST(JsonConstraint, ARandomModelWritesValidJsonWithinItsBudget) {
  std::vector<std::string> vocab;
  for (int c = 32; c < 127; ++c) vocab.emplace_back(1, static_cast<char>(c));
  for (const char* piece : {"\xc3", "\xa9", "\xe2\x82\xac", "\xe2", "\"age\":", "true", "false", "null", "{\"", "\"}", "12", "Ann", "\",\"", "\":", "],", "[\""}) {
    vocab.emplace_back(piece);
  }
  auto schema = JsonConstraint::from_schema(person_schema());
  ASSERT_TRUE(schema.is_ok());
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const bool free = trial % 2 == 0;
    JsonConstraint c = free ? JsonConstraint::any_object() : *schema;
    const int budget = static_cast<int>(c.min_chars_to_finish()) + static_cast<int>(rng() % 60);
    std::string text;
    int used = 0;
    while (!c.complete()) {
      ASSERT_LT(used, budget) << text;
      std::vector<const std::string*> allowed;
      for (const std::string& p : vocab) {
        if (c.allows(p, budget - used - 1)) allowed.push_back(&p);
      }
      ASSERT_FALSE(allowed.empty()) << text;
      const std::string& p = *allowed[rng() % allowed.size()];
      ASSERT_TRUE(c.feed(p));
      text += p;
      ++used;
    }
    const Json j = Json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    ASSERT_TRUE(j.is_object()) << text;
    if (!free) {
      EXPECT_TRUE(j["name"].is_string() && j["name"].get<std::string>().size() <= 5) << text;
      EXPECT_TRUE(j["age"].is_number_integer()) << text;
      EXPECT_TRUE(j["ok"].is_boolean()) << text;
      EXPECT_TRUE(j["score"].is_number()) << text;
      EXPECT_TRUE(j["nothing"].is_null()) << text;
      EXPECT_TRUE(j["tags"].is_array() && !j["tags"].empty() && j["tags"].size() <= 2) << text;
      EXPECT_EQ(j.size(), 6u) << text;
    }
  }
}

}  // namespace
}  // namespace leoam
