// pretrained.h — real pretrained models in and out of the engine's GPT (models/gpt.h).
//
// Import (the config comes from the files; anything the engine's pre-LN GPT cannot run is refused in one line):
//
//   Hugging Face GPT-2   DIR/config.json ("model_type": "gpt2") + DIR/model.safetensors. Keys with or without the
//                        "transformer." prefix; Conv1D weights stored (in, out), so transposed into the engine's
//                        (out, in); the attn.bias / attn.masked_bias mask buffers ignored; lm_head.weight, when
//                        present, must equal wte (the head is tied). GELU is GPT-2's tanh form ("gelu_new").
//   llm.c                gpt2_124M.bin: 256 int32 header (magic 20240326, version 3 = fp32 or 5 = bf16, maxT, V, L,
//                        NH, C, padded V), then wte (Vp,C), wpe, and each per-layer tensor stacked over the L layers
//                        in llm.c's order; rows V..Vp−1 of wte (the padding) are dropped.
//   Hugging Face OPT     DIR/config.json ("model_type": "opt") + model.safetensors, pre-LN only (125m, 1.3b, 2.7b …):
//                        q/k/v/out projections stored (out, in) with biases, concatenated into the engine's qkv;
//                        learned positions with OPT's offset of 2 (rows 2.. of embed_positions); ReLU; the final
//                        layer norm; tied head. Keys with "model.decoder.", "decoder." or no prefix. OPT-350m
//                        (post-LN, 512-wide projected embeddings) is refused.
//   F32, F16 and BF16 tensors are read (converted exactly to the model's precision).
//
// Export: an engine GPT (GELU, token input, tied head, no attention modifications) to the Hugging Face GPT-2 layout,
// DIR/config.json + DIR/model.safetensors (unprefixed keys, Conv1D (in, out) weights, metadata {"format": "pt"}), which
// transformers' GPT2LMHeadModel.from_pretrained(DIR) loads. Import → export → import is bit-exact.
//
//   GPTConfig c = pretrained_config("gpt2/");      // reads config.json (or the .bin header) only
//   GPT<float> m(c, Device::cpu, 1);  pretrained_load(m, "gpt2/");
//   export_hf_gpt2(m, "out/hf");
#pragma once
#include <string>

#include "models/gpt.h"

namespace icl {

// What is at `path`: "hf-gpt2" | "hf-opt" (a directory with config.json) | "llmc" (a file); refuses anything else.
std::string pretrained_format(const std::string& path);
// The engine's GPTConfig of the model at `path` (V the model's real vocabulary, maxT its positions, act gelu|relu).
// max_T > 0: only the first max_T positions (a shorter context; refused if the model has fewer).
GPTConfig pretrained_config(const std::string& path, int max_T = 0);
// Fill m's parameters from `path` (m built from pretrained_config(path[, max_T])); every tensor checked before any
// is used.
template <typename real>
void pretrained_load(GPT<real>& m, const std::string& path);
// Write m as a Hugging Face GPT-2 directory (created if missing): config.json, model.safetensors.
void export_hf_gpt2(GPT<float>& m, const std::string& dir);

}  // namespace icl
