// task.cpp — see task.h.
#include "data/task.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/fileio.h"

namespace icl {

void add_task_flags(Cli& cli) {
    cli.flag("--task", "arith", "arith | linreg | text | mix (text mixtures of a categorized corpus)");
    cli.flag("--data", "", "--task text: a text file (any bytes); --task mix: a directory of <category>.txt files or a comma list of files "
                           "(documents separated by '%' lines, e.g. tools/prep_fortunes' output)");
}

void add_task_shape_flags(Cli& cli) {
    cli.flag("--max-T", "0", "position-table size (0 = the task's sequence length)");
    cli.flag("--seq", "128", "text: tokens per training window");
    cli.flag("--n-tasks", "4", "arith: tasks per sequence");
    cli.flag("--n-ex", "4", "arith: examples per task (val_answer_acc scores examples 3.. of each task; with 1 or 2, the last)");
    cli.flag("--digits", "3", "arith: operand digits d");
    cli.flag("--d-in", "16", "linreg: input dimension");
    cli.flag("--pairs", "64", "linreg: (u,v) pairs per sequence");
    cli.flag("--noise", "0.1", "linreg: noise level epsilon");
    cli.flag("--l-start", "48", "mix: the first text is cut at a uniform position in [--l-start, --l-finish]");
    cli.flag("--l-finish", "80", "mix: see --l-start");
    cli.flag("--two-texts", "0.5", "mix: probability that a training sequence joins two texts (else one)");
    cli.flag("--tokenizer", "", "text: a GPT-2 tokenizer folder (vocab.json + merges.txt, or encoder.json + vocab.bpe); mix: a BPE file "
                                "from tools/bpe (default: bytes)");
}

Task::Task(const Cli& cli, int B_, uint64_t seed)
    : kind(cli.get_choice("--task", {"arith", "linreg", "text", "mix"})), B(B_), train_rng_(Rng(seed).split(101)),
      val_rng_(Rng(seed).split(202)) {
    // a task flag given for another task is refused, not ignored
    refuse_unused_flags(cli, kind,
                        {{"--n-tasks", {"arith"}}, {"--n-ex", {"arith"}}, {"--digits", {"arith"}}, {"--d-in", {"linreg"}},
                         {"--pairs", {"linreg"}}, {"--noise", {"linreg"}}, {"--seq", {"text", "mix"}}, {"--data", {"text", "mix"}},
                         {"--tokenizer", {"text", "mix"}}, {"--l-start", {"mix"}}, {"--l-finish", {"mix"}}, {"--two-texts", {"mix"}},
                         {"--sample", {"text"}}, {"--temperature", {"text"}}},
                        "--task " + kind);
    arith = {(int)cli.get_int("--n-tasks", 1, 64), (int)cli.get_int("--n-ex", 1, 64), (int)cli.get_int("--digits", 1, 6)};
    linreg = {(int)cli.get_int("--d-in", 1, 4096), 1, (int)cli.get_int("--pairs", 1, 1 << 16), cli.get_double("--noise", 0, 1e6)};
    if (kind == "arith") { T = arith.seq_len() - 1; V = ARITH_VOCAB; }
    if (kind == "linreg") { T = linreg.seq_len(); d_in = linreg.width(); d_out = linreg.d_out; V = 0; }
    if (kind == "text") {
        T = (int)cli.get_int("--seq", 1, 1 << 20);
        if (!cli.has_value("--data")) fail_usage("--task text needs --data FILE");
        if (cli.has_value("--tokenizer")) {
            gpt2 = std::make_shared<GPT2Tokenizer>(GPT2Tokenizer::load(cli.get("--tokenizer")));
            const std::string path = cli.get("--data");
            text = text_split(path, gpt2->encode(read_file(path, kMaxTextFileBytes, "--data text file")), 0.1, T, "tokens");
            V = gpt2->size();
        } else {
            text = text_load(cli.get("--data"), 0.1, T);
            V = BYTE_VOCAB;
        }
    }
    if (kind == "mix") {
        T = (int)cli.get_int("--seq", 1, 1 << 20);
        if (!cli.has_value("--data")) fail_usage("--task mix needs --data DIR (or FILE,FILE,...)");
        if (cli.has_value("--tokenizer")) bpe = std::make_shared<BPE>(BPE::load(cli.get("--tokenizer")));
        corpus = corpus_load(cli.get("--data"), bpe.get(), 0.1, T + 1);
        mix = {T, (int)cli.get_int("--l-start", 1, 1 << 20), (int)cli.get_int("--l-finish", 1, 1 << 20), cli.get_double("--two-texts", 0, 1)};
        if (mix.l_finish < mix.l_start || mix.l_finish >= T)
            fail_usage(strfmt("--l-finish: need --l-start <= --l-finish < --seq (%d), got %d and %d", T, mix.l_start, mix.l_finish));
        V = corpus.V;
    }
    int maxT = (int)cli.get_int("--max-T", 0, 1 << 20);
    max_T = maxT > 0 ? maxT : T;
    if (max_T < T) fail_usage(strfmt("--max-T: %d is shorter than the task's sequence length %d", max_T, T));

    // the fixed validation set (estimated first: inputs, targets, mask and positions per position; arith keeps its
    // sequences too)
    eval_batches = (int)cli.get_int("--eval-batches", 1, 10000);
    const double per_pos = 4.0 * (d_in > 0 ? d_in : 1) + 4.0 * (d_out > 0 ? d_out : 1) + 8 + (kind == "arith" ? 8 : 0);
    check_host_memory((eval_batches + 1.0) * B * T * per_pos, strfmt("the validation set and a training batch (%d + 1 batches of %d x %d)", eval_batches, B, T));
    val_samples.resize(eval_batches);
    for (int i = 0; i < eval_batches; i++) {
        if (kind == "arith") val.push_back(arith_batch(arith, B, val_rng_, &val_samples[i]));
        if (kind == "linreg") val.push_back(linreg_batch(linreg, B, val_rng_));
        if (kind == "text") val.push_back(text_batch(text.val, B, T, val_rng_));
        if (kind == "mix") {
            val_mix.emplace_back();
            val.push_back(mixture_batch(corpus, true, mix, B, val_rng_, &val_mix.back()));
        }
    }
}

Batch Task::next_batch() {
    if (kind == "arith") return arith_batch(arith, B, train_rng_);
    if (kind == "linreg") return linreg_batch(linreg, B, train_rng_);
    if (kind == "mix") return mixture_batch(corpus, false, mix, B, train_rng_);
    return text_batch(text.train, B, T, train_rng_);
}

double Task::answer_accuracy(const std::vector<float>& logits, int i) const {
    const std::vector<ArithSample>& samples = val_samples[i];
    long hit = 0, tot = 0;
    for (size_t b = 0; b < samples.size(); b++) {
        // examples >= 3 of every task (spec §4.1); with --n-ex 1 or 2, the last example
        std::vector<float> m = arith_answer_mask(samples[b], std::min(2, arith.n_ex - 1), false);
        for (int t = 0; t < T; t++) {
            if (m[t] == 0) continue;
            const float* row = &logits[((size_t)b * T + t) * V];
            int best = 0;
            for (int v = 1; v < V; v++) if (row[v] > row[best]) best = v;
            hit += best == samples[b].tokens[t + 1];
            tot++;
        }
    }
    return tot ? (double)hit / tot : NAN;
}

void Task::check_fits(int model_V, int model_d_in, int model_d_out, int model_maxT) const {
    // a tokenized text fits a model with a larger (padded) vocabulary too: GPT-2's 50257 tokens in OPT's 50272 rows
    const bool vocab_fits = gpt2 ? model_V >= V : model_V == V;
    if (!vocab_fits || model_d_in != d_in || model_d_out != d_out)
        fail(strfmt("the model (V=%d, d_in=%d, d_out=%d) does not fit --task %s (V=%d, d_in=%d, d_out=%d)", model_V, model_d_in, model_d_out,
                    kind.c_str(), V, d_in, d_out));
    if (model_maxT < T) fail(strfmt("--load: the checkpoint's max-T %d is shorter than the task's %d", model_maxT, T));
}

}  // namespace icl
