// JsonConstraint: constrained sampling for JSON output (OpenAI's response_format json_object and
// json_schema). A character-level matcher of the JSON text so far against a schema: a token may
// be sampled only if its text keeps the text a prefix of a value that can still be finished in
// the tokens left (allows()), so even a model that knows no JSON writes one that parses and
// matches within max_tokens. The text is compact, strings whole UTF-8 with no escapes or control
// characters, numbers at most kMaxDigits digits a part; an object writes every property of
// `properties`, in the schema's order. The subset: type object (properties), array (items,
// minItems, maxItems), string (maxLength, enum), integer, number, boolean, null; enum and const of
// scalars; title, description, $schema, additionalProperties, required, default accepted, not
// checked; anything else (anyOf, $ref, pattern, format, a list of types) refused by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace leoam {

class JsonConstraint {
 public:
  static constexpr int kMaxDigits = 15;
  static constexpr int kMaxDepth = 8;

  // Any JSON object (response_format json_object), nested at most kMaxDepth deep.
  static JsonConstraint any_object();
  // A value of `schema`; fails on a keyword or shape outside the subset above, naming it.
  static Result<JsonConstraint> from_schema(const nlohmann::json& schema);
  // A call of one of `functions` (name, parameters' schema): {"name":"NAME","arguments":ARGS},
  // ARGS a value of that function's parameters (a tool call that tool_choice requires).
  static Result<JsonConstraint> tool_call(const std::vector<std::pair<std::string, nlohmann::json>>& functions);

  // Feeds text; false (and the state undefined: feed a copy) when it cannot continue a value.
  bool feed(std::string_view text);
  // The text so far is a whole value (nothing may follow it).
  bool complete() const;
  // The fewest characters that finish the value from here (0 when complete()).
  int64_t min_chars_to_finish() const;
  // feed(text) on a copy would succeed and leave min_chars_to_finish() <= chars_left: the value
  // can still be finished, counting one character a token (every vocabulary this engine reads has
  // a token for each printable ASCII character: byte-level BPE and SentencePiece with byte
  // fallback). Where no token is allowed so (max_tokens below the value's shortest text), the
  // caller lets any token that continues the value through (BatchScheduler::mask_for_json).
  bool allows(std::string_view text, int64_t chars_left) const;

 private:
  struct Node;
  struct Frame {
    int node = 0;
    int phase = 0;
    int count = 0;     // properties, items, characters or digits so far
    int pos = 0;       // position in the key or literal being matched
    uint64_t alive = 0;  // literal nodes: the candidates still matching
  };
  enum class Step : uint8_t { kConsumed, kReject, kPopAndRefeed };

  explicit JsonConstraint(std::shared_ptr<const std::vector<Node>> nodes, int root);
  static Result<int> add_schema(std::vector<Node>& nodes, const nlohmann::json& schema, const std::string& at);
  bool feed_char(unsigned char c);
  Step step(Frame& f, unsigned char c);
  void push(int node);
  // The parent's phase after its child, now popped, completed.
  void child_done(const Frame& child);
  // `node`, or for a kSwitch the child that `choice` (a literal's candidates left) picks.
  int chosen(int node, uint64_t choice) const;
  int64_t fresh_min(int node) const;
  int64_t frame_min(const Frame& f) const;

  std::shared_ptr<const std::vector<Node>> nodes_;
  std::vector<Frame> stack_;
};

}  // namespace leoam
