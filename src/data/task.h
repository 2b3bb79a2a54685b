// task.h — what every training binary shares around its model: the task flags, the data (a training
// stream and a fixed validation set, each from its own seed-derived Rng), the arithmetic answer accuracy,
// the training options, and the common part of summary.json.
//
//   add_common_flags(cli, {...});
//   add_task_flags(cli);                 // --task --data
//   ...the model's own flags...
//   add_task_shape_flags(cli);           // --max-T --seq --n-tasks --n-ex --digits --d-in --pairs --noise
//   add_train_flags(cli);                // (models/trainer.h) --warmup --min-lr-frac --weight-decay --grad-clip --eval-* --save-every
//   if (!cli.parse(argc, argv)) return 0;
//   Task task(cli, B, seed);             // T, vocabulary / vector widths, task.val, task.next_batch()
//   task.configure(cfg);                 // V, d_in, d_out, maxT of a model config
//   TrainOptions o = train_options_from_cli(cli, "train_x", task, steps);   // models/trainer.h; creates the run dir
//   TrainResult r = train(model, o, [&](int) { return task.next_batch(); }, evaluate);
//   nlohmann::json summary = run_summary("train_x", cli, task, cfg.to_json(), cfg.num_params(), threads, dev, o, r);
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/arith.h"
#include "data/batch.h"
#include "data/linreg.h"
#include "data/mixture.h"
#include "data/gpt2_tokenizer.h"
#include "data/text.h"
#include "engine/cli.h"
#include "engine/common.h"
#include "engine/device.h"
#include "engine/rng.h"

namespace icl {

void add_task_flags(Cli& cli);        // --task --data
void add_task_shape_flags(Cli& cli);  // --max-T --seq, the arith, linreg and mix sizes, --tokenizer

struct Task {
    std::string kind;             // arith | linreg | text | mix
    int B = 0;                    // sequences per batch
    ArithConfig arith;
    LinRegConfig linreg;
    TextData text;
    Corpus corpus;                // mix: categorized text (data/mixture.h)
    MixConfig mix;
    std::shared_ptr<BPE> bpe;     // mix: --tokenizer (null: bytes)
    std::shared_ptr<GPT2Tokenizer> gpt2;  // text: --tokenizer DIR, GPT-2's BPE (null: bytes)
    int T = 0;                    // input positions per sequence
    int V = 0;                    // token vocabulary (0 = vector input)
    int d_in = 0, d_out = 0;      // linreg: input / target vector widths (0 otherwise)
    int max_T = 0;                // position-table size: --max-T, or T
    int eval_batches = 0;
    std::vector<Batch> val;                              // (eval_batches) the fixed validation set
    std::vector<std::vector<ArithSample>> val_samples;  // arith: the sequences behind each val batch
    std::vector<std::vector<MixSample>> val_mix;        // mix: the parts of each val sequence

    // Reads the task flags (bad values -> usage errors) and, for text, loads --data. The training stream
    // and the validation set come from Rng(seed).split(101) and .split(202).
    Task(const Cli& cli, int B, uint64_t seed);

    Batch next_batch();  // the next training batch
    Rng& train_stream() { return train_rng_; }  // the training stream's generator (resumable checkpoints save it)

    // The answer accuracy of spec/cgt.md §4.1 on val[i]: teacher-forced argmax on the answer characters
    // (sign + digits) of examples ≥ 3 of every task (of the last example when a task has fewer). logits (B,T,V).
    double answer_accuracy(const std::vector<float>& logits, int i) const;

    // Fit a model config to the task: vocabulary, vector widths, position table.
    template <typename Config>
    void configure(Config& cfg) const {
        cfg.V = V;
        cfg.d_in = d_in;
        cfg.d_out = d_out;
        cfg.maxT = max_T;
    }
    // Refuse a model (from --load) whose input/output shape or position table does not fit this task.
    void check_fits(int model_V, int model_d_in, int model_d_out, int model_maxT) const;

private:
    Rng train_rng_, val_rng_;
};

}  // namespace icl
