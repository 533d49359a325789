#!/usr/bin/env node
// The reference ids for the Hugging Face tokenizer import test: transformers.js's tokenizer
// (@lenml/tokenizers, installed by tests/chat/fetch_chat_templates.py) on each input text.
//
// Usage: hf_tokenize.cjs NPM_DIR TOKENIZER_DIR IN.json OUT.json
//   IN.json:  [{"text": str, "special": bool}, ...]
//   OUT.json: [{"plain": [ids], "special": [ids]}, ...]  plain: add_special_tokens false;
//             special (only where asked): true, so BOS/EOS as the post-processor adds them.
// Special-token text in the input is always recognized (transformers.js has no switch for it).
"use strict";
const fs = require("fs");
const path = require("path");

const [npmDir, tokenizerDir, inPath, outPath] = process.argv.slice(2);
const { TokenizerLoader } = require(path.join(npmDir, "node_modules", "@lenml", "tokenizers"));
const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const configPath = path.join(tokenizerDir, "tokenizer_config.json");
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJson(path.join(tokenizerDir, "tokenizer.json")),
  tokenizerConfig: fs.existsSync(configPath) ? readJson(configPath) : {},
});
const results = readJson(inPath).map(({ text, special }) => ({
  plain: tokenizer.encode(text, { add_special_tokens: false }),
  special: special ? tokenizer.encode(text, { add_special_tokens: true }) : null,
}));
fs.writeFileSync(outPath, JSON.stringify(results));
