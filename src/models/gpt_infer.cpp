// gpt_infer.cpp — see gpt_infer.h.
#include "models/gpt_infer.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "engine/checkpoint.h"
#include "engine/common.h"
#include "engine/fileio.h"
#include "engine/run.h"
#include "models/pretrained.h"

namespace icl {

void add_pretrained_flags(Cli& cli) {
    cli.flag("--load-hf", "", "a pretrained model: a Hugging Face GPT-2 or OPT folder (config.json + model.safetensors) or llm.c's "
                              "gpt2_124M.bin; its config is used (use it wherever --load works)");
    cli.flag("--eval-text", "", "no training: print the model's perplexity on this text file (non-overlapping windows of its context "
                                "length; tokenized by --tokenizer, or the --load-hf folder's own tokenizer, else bytes)");
    cli.flag("--prompt", "", "no training: continue this text by --sample tokens at --temperature (tokenized as for --eval-text)");
    cli.flag("--export-hf", "", "no training: write the model (--load or --load-hf) as a Hugging Face GPT-2 folder "
                                "(config.json + model.safetensors)");
}

bool inference_run(const Cli& cli) {
    return cli.has_value("--eval-text") || cli.given("--prompt") || cli.has_value("--export-hf");
}

GPTConfig load_hf_config(const Cli& cli) {
    if (cli.given("--load")) fail_usage("--load-hf: not with --load (one source of weights)");
    if (cli.has_flag("--resume") && cli.has_value("--resume")) fail_usage("--load-hf: not with --resume (the weights come from the checkpoint)");
    for (const std::string& f : given_arch_flags(cli, {"--layers", "--width", "--heads", "--max-T"}))
        fail_usage(f + ": the architecture comes from --load-hf; drop the flag");
    return pretrained_config(cli.get("--load-hf"));
}

std::vector<int> TextCodec::encode(const std::string& text) const {
    if (bpe) return bpe->encode(text);
    std::vector<int> ids(text.begin(), text.end());
    for (int& b : ids) b &= 0xff;
    return ids;
}

std::string TextCodec::decode(const std::vector<int>& ids) const {
    if (bpe) return bpe->decode(ids);
    return std::string(ids.begin(), ids.end());
}

TextEval eval_text(GPT<float>& m, const std::vector<int>& ids) {
    const int W = m.cfg.maxT;
    const int64_t n = (int64_t)ids.size();
    TextEval r;
    r.tokens = n;
    const int64_t windows = (n / W) + (n % W >= 2 ? 1 : 0);
    if (windows == 0) fail(strfmt("--eval-text: %lld tokens; need at least 2", (long long)n));
    Progress progress((int)windows, (int)std::max<int64_t>(1, windows / 20));  // "step i/W": window i
    const double t0 = now_seconds();
    double sum = 0;
    for (int64_t at = 0; at + 2 <= n; at += W) {
        const int w = (int)std::min<int64_t>(W, n - at);
        // one window of w tokens: inputs ids[at .. at+w−1], targets the next token inside the window (the last
        // position has none: ignored)
        Batch bt;
        bt.B = 1;
        bt.T = w;
        bt.tokens.assign(ids.begin() + at, ids.begin() + at + w);
        bt.targets.assign(ids.begin() + at + 1, ids.begin() + at + w);
        bt.targets.push_back(-1);
        bt.mask.assign((size_t)w, 1.0f);
        bt.mask[(size_t)w - 1] = 0;
        sum += m.forward(bt) * (w - 1);  // forward gives the masked mean
        r.predicted += w - 1;
        r.windows++;
        progress.update((int)r.windows - 1, sum / r.predicted, (double)(at + w) / (now_seconds() - t0));
    }
    progress.finish();
    r.seconds = now_seconds() - t0;
    r.loss = sum / r.predicted;
    return r;
}

static bool has_file(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}

TextCodec model_codec(const std::string& tokenizer, const std::string& model_dir, int V, bool required) {
    TextCodec c;
    std::string dir = tokenizer;
    if (dir.empty() && !model_dir.empty() && (required || has_file(model_dir + "/vocab.json") || has_file(model_dir + "/encoder.json")))
        dir = model_dir;
    if (!dir.empty()) c.bpe = std::make_shared<GPT2Tokenizer>(GPT2Tokenizer::load(dir));
    if (c.size() > V) fail(strfmt("--tokenizer: %d tokens, more than the model's vocabulary of %d", c.size(), V));
    return c;
}

int run_inference(const Cli& cli, const RunEnv& env) {
    // nothing is trained: a training or task flag is refused, not ignored
    const std::set<std::string> used = {"--load", "--load-hf", "--tokenizer", "--eval-text", "--prompt", "--sample", "--temperature",
                                        "--export-hf", "--device", "--threads", "--seed", "--tf32", "--preset"};
    for (const auto& kv : cli.values())
        if (cli.given(kv.first) && !used.count(kv.first))
            fail_usage(kv.first + ": --eval-text, --prompt and --export-hf train nothing; drop the flag");
    if ((cli.given("--sample") || cli.given("--temperature")) && !cli.given("--prompt"))
        fail_usage(std::string(cli.given("--sample") ? "--sample" : "--temperature") + ": only with --prompt in an inference run");
    const int n_sample = (int)cli.get_int("--sample", 0, 1 << 20);
    const double temperature = cli.get_double("--temperature", 0, 100);

    // the model
    GPTConfig cfg;
    std::string source;
    if (cli.has_value("--load-hf")) {
        cfg = load_hf_config(cli);
        source = cli.get("--load-hf");
    } else if (cli.has_value("--load")) {
        source = cli.get("--load");
        CheckpointInfo ci = read_checkpoint_metadata(source);
        if (ci.model != "gpt") fail("--load: '" + source + "' holds a '" + ci.model + "' model, not 'gpt'");
        for (const std::string& f : given_arch_flags(cli, {"--layers", "--width", "--heads", "--max-T"}))
            fail_usage(f + ": the architecture comes from --load; drop the flag");
        cfg = GPTConfig::from_json(checkpoint_config_json(ci));
    } else {
        fail_usage("--eval-text, --prompt and --export-hf need a model: --load CKPT or --load-hf DIR");
    }
    const bool text_io = cli.has_value("--eval-text") || cli.given("--prompt");
    TextCodec codec;
    if (text_io) {
        if (cfg.d_in > 0 || cfg.d_out > 0) fail_usage("--eval-text / --prompt: the model at " + source + " is not a language model");
        codec = model_codec(cli.get("--tokenizer"), cli.has_value("--load-hf") ? source : "", cfg.V, false);
        if (!codec.bpe && cfg.V != 256)
            fail_usage(strfmt("--tokenizer: the model has %d tokens, not 256 bytes; give its tokenizer folder (vocab.json + merges.txt)", cfg.V));
    }
    GPT<float> m(cfg, env.dev, cli.get_seed());
    if (cli.has_value("--load-hf")) pretrained_load(m, source);
    else m.s.load(source);
    std::fprintf(stderr, "train_gpt: %s, %lld parameters (L=%d C=%d NH=%d V=%d maxT=%d %s), %s, %d threads\n", source.c_str(),
                 (long long)cfg.num_params(), cfg.L, cfg.C, cfg.NH, cfg.V, cfg.maxT, cfg.act.c_str(), device_name(env.dev), env.threads);

    if (cli.has_value("--eval-text")) {
        const std::string path = cli.get("--eval-text");
        const std::vector<int> ids = codec.encode(read_file(path, kMaxTextFileBytes, "--eval-text file"));
        TextEval e = eval_text(m, ids);
        std::printf("eval: %lld tokens, %lld windows, loss %.6f nats/token, perplexity %.4f  (%s; %.1f s, %.0f tokens/s)\n", (long long)e.tokens,
                    (long long)e.windows, e.loss, std::exp(e.loss), codec.bpe ? "GPT-2 BPE" : "bytes", e.seconds, e.tokens / e.seconds);
    }
    if (cli.given("--prompt")) {
        const std::vector<int> prompt = codec.encode(cli.get("--prompt"));
        if (prompt.empty()) fail_usage("--prompt: empty");
        Rng rng = Rng(cli.get_seed()).split(303);
        const std::vector<int> out = m.sample(prompt, n_sample, temperature, rng, codec.size());
        std::printf("%s%s\n", codec.decode(prompt).c_str(), codec.decode(out).c_str());
    }
    if (cli.has_value("--export-hf")) {
        export_hf_gpt2(m, cli.get("--export-hf"));
        std::printf("wrote %s/{config.json, model.safetensors} (Hugging Face GPT-2 layout)\n", cli.get("--export-hf").c_str());
    }
    return 0;
}

}  // namespace icl
