// fuzz_targets.h — one entry point per file reader (and the command-line parser), for libFuzzer (`make fuzz`,
// tests/fuzz/fuzz_main.cpp) and for the corpus regression test of `make test` (tests/test_fuzz_corpus.cpp).
//
// Each takes arbitrary bytes, hands them to the reader the way a user's file would arrive (written to a file, or
// split into arguments), and returns 0. A refusal (icl::Error) is the expected outcome for garbage and is caught;
// anything else (a crash, a sanitizer report, another exception escaping, a hang) is a bug the fuzzer reports.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace icl_fuzz {

using Target = int (*)(const uint8_t* data, size_t size);

int checkpoint(const uint8_t* data, size_t size);  // .safetensors: open, read every tensor, the icl.cpp metadata and config
int npy(const uint8_t* data, size_t size);         // .npy: npy_load, every element as double
int csv(const uint8_t* data, size_t size);         // log.csv / results CSVs: read_csv
int index_json(const uint8_t* data, size_t size);  // a dump's index.json: npydiff of two dumps holding it
int bpe(const uint8_t* data, size_t size);         // a BPE merges file: BPE::load, then encode/decode a text
int cli(const uint8_t* data, size_t size);         // a command line (arguments split at newlines): parse, read every flag
int gpt2_tokenizer(const uint8_t* data, size_t size);  // vocab.json NUL merges.txt: GPT2Tokenizer::load, encode/decode a text
int gpt2_encode(const uint8_t* data, size_t size);     // any bytes through a small GPT-2 tokenizer: decode(encode(s)) == s
int llmc(const uint8_t* data, size_t size);            // an llm.c .bin: pretrained_config, and the weights when small
int hf_config(const uint8_t* data, size_t size);       // a Hugging Face config.json: pretrained_config

struct Named {
    const char* name;  // also the corpus folder: tests/fuzz/corpus/<name>/
    Target run;
};
const std::vector<Named>& targets();

}  // namespace icl_fuzz
