// Pieces of hand-written tokenizer.json files in Llama 2's SentencePiece-style BPE (byte
// fallback), and a whole one in Phi-3's layout whose added chat tokens carry lstrip/rstrip, for
// the import test and its transformers.js reference.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

namespace leoam::test {

// model.vocab's first 259 entries, as Llama 2 has them: 0 <unk>, 1 <s>, 2 </s>, then the byte
// tokens <0x00>..<0xFF> (id 3 + byte).
inline nlohmann::json sentencepiece_vocab_base() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  return vocab;
}

// Prepend("▁") then Replace(" ", "▁"): SentencePiece's space handling.
inline nlohmann::json sentencepiece_normalizer() {
  return {{"type", "Sequence"},
          {"normalizers",
           {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
            {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
}

// ids: 0..258 as above (</s> rstrip, as in Phi-3), 259 "▁", 260 H, 261 e, 262 l, 263 o, 264 i,
// then what the merges make: 265 "▁H", 266 "ll", 267 "▁He", 268 "llo", 269 "▁Hello", 270 "▁Hi".
// Added: 271 <|endoftext|> (no flags), 272 <|assistant|>, 273 <|end|>, 274 <|user|> (rstrip),
// 275 <tool> (not special, lstrip), 276 <|both|> (lstrip and rstrip).
inline nlohmann::json phi3_style_tokenizer() {
  using json = nlohmann::json;
  json vocab = sentencepiece_vocab_base();
  const char* pieces[] = {"\xE2\x96\x81", "H", "e", "l", "o", "i", "\xE2\x96\x81H", "ll",
                          "\xE2\x96\x81He", "llo", "\xE2\x96\x81Hello", "\xE2\x96\x81Hi"};
  for (int i = 0; i < 12; ++i) vocab[pieces[i]] = 259 + i;
  auto added = [](int id, const char* text, bool special, bool lstrip, bool rstrip) {
    return json{{"id", id},         {"content", text}, {"single_word", false}, {"lstrip", lstrip},
                {"rstrip", rstrip}, {"normalized", false}, {"special", special}};
  };
  return {
      {"version", "1.0"},
      {"added_tokens",
       {added(0, "<unk>", true, false, false), added(1, "<s>", true, false, false), added(2, "</s>", true, false, true),
        added(271, "<|endoftext|>", true, false, false), added(272, "<|assistant|>", true, false, true),
        added(273, "<|end|>", true, false, true), added(274, "<|user|>", true, false, true),
        added(275, "<tool>", false, true, false), added(276, "<|both|>", true, true, true)}},
      {"normalizer", sentencepiece_normalizer()},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",  // transformers.js needs one; the import does not read it
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges",
         {"\xE2\x96\x81 H", "l l", "\xE2\x96\x81H e", "ll o", "\xE2\x96\x81He llo", "\xE2\x96\x81H i"}}}},
  };
}

}  // namespace leoam::test
