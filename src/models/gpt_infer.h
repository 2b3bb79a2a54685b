// gpt_infer.h — train_gpt's pretrained-model modes: a model from --load (an engine checkpoint) or --load-hf (a
// Hugging Face GPT-2 / OPT folder or an llm.c .bin, models/pretrained.h), text through GPT-2's tokenizer
// (--tokenizer DIR, data/gpt2_tokenizer.h; bytes without it), and what is done with it instead of training:
//
//   --eval-text FILE   perplexity: the mean next-token loss over non-overlapping windows of the model's context
//                      length maxT (each window of w tokens scores its w−1 next-token predictions; the last, partial
//                      window counts when it has ≥ 2 tokens), printed as one line
//                      "eval: N tokens, W windows, loss L nats/token, perplexity P" (+ time and tokens/s)
//   --prompt TEXT      continue TEXT by --sample N tokens at --temperature (0 = argmax); prints the continuation
//   --export-hf DIR    write the model as a Hugging Face GPT-2 folder (config.json + model.safetensors)
//
// Any of the three makes the run an inference run: nothing is trained (training flags are refused).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/gpt2_tokenizer.h"
#include "engine/cli.h"
#include "models/gpt.h"

namespace icl {

void add_pretrained_flags(Cli& cli);  // --load-hf --eval-text --prompt --export-hf
bool inference_run(const Cli& cli);   // --eval-text, --prompt or --export-hf given
int run_inference(const Cli& cli, const RunEnv& env);

// --load-hf's model config (architecture flags refused beside it); "" path = no --load-hf.
GPTConfig load_hf_config(const Cli& cli);

// Text <-> token ids: GPT-2's BPE when a tokenizer is given, else bytes.
struct TextCodec {
    std::shared_ptr<GPT2Tokenizer> bpe;
    int size() const { return bpe ? bpe->size() : 256; }
    std::vector<int> encode(const std::string& text) const;
    std::string decode(const std::vector<int>& ids) const;
};
// The tokenizer of a model of vocabulary V: the folder `tokenizer` when given, else the model folder's own files
// (vocab.json + merges.txt, or encoder.json + vocab.bpe) when it has them — required = they must be there — else
// bytes. Refused (one line) when it has more tokens than the model's vocabulary. Used by train_gpt, iclca e4, tint lm.
TextCodec model_codec(const std::string& tokenizer, const std::string& model_dir, int V, bool required);

struct TextEval {
    int64_t tokens = 0, windows = 0, predicted = 0;  // tokens of the text, windows, next-token predictions scored
    double loss = 0;                                 // mean nats per predicted token
    double seconds = 0;
};
// The perplexity protocol above on token ids (every id < the model's V).
TextEval eval_text(GPT<float>& m, const std::vector<int>& ids);

}  // namespace icl
