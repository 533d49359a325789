#include "tokenizer/tokenizer.h"

#include "gguf/gguf_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/vocab.h"

namespace leoam {

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& gguf) {
  LEOAM_ASSIGN_OR_RETURN(Vocab vocab, Vocab::from_gguf(gguf));
  if (vocab.kind() == VocabKind::kSpm) {
    return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(vocab)));
  }

  auto pre = PreTokenizer::for_name(vocab.pre);
  if (!pre.is_ok()) return pre.status().with_context(gguf.path());
  const GgufValue* merges_value = gguf.find("tokenizer.ggml.merges");
  if (merges_value == nullptr) {
    return not_found(gguf.path() + ": missing key 'tokenizer.ggml.merges', which a gpt2 (BPE) tokenizer needs");
  }
  const std::vector<std::string>* merges = merges_value->as_strings();
  if (merges == nullptr) return corrupt(gguf.path() + ": key 'tokenizer.ggml.merges' is not an array of strings");
  auto bpe = BpeTokenizer::create(std::move(vocab), *merges, std::move(pre).value());
  if (!bpe.is_ok()) return bpe.status().with_context(gguf.path());
  return std::unique_ptr<Tokenizer>(std::move(bpe).value());
}

}  // namespace leoam
