// cgt_eval.h — the CGT experiments' evaluations (spec/cgt.md §4–6), written once and used by train_cgt's
// single runs and its --compare experiments:
//
//   ICL arithmetic (§4.1, Table 1)   icl_evaluate: base accuracy (dynamic y), specialized accuracy (y frozen
//                                    after example 2, examples 1–2 and everything before removed, absolute
//                                    positions), the with-context variant, a wrong-y control, representation
//                                    variation (eq. 4), the linear-probe error of (a, b) from y, and the
//                                    task-vector baseline (activation patching) on the x-only model.
//   linear regression (§4.2)         lr_evaluate: error against the noise-free target vs number of in-context
//                                    samples, dynamic and frozen after k samples; the ridge (Bayes) curve.
//   y analyses (§6)                  write_y_analysis: y^ℓ as .npy, the ⟨n_s·n_t⟩ heatmap, y traces, the DFT
//                                    spectrum, as PNGs in a run folder.
//
// Conventions: a batch's input position t holds token t and predicts token t+1 (T = n − 1 inputs). "Frozen
// after example 2 of task i" means ỹ = y^ℓ at the '|' closing example 2 (input position s−1, s = the first
// character of example 3), i.e. exactly the aux pass of training with p = s (spec §4.1 "Specialized accuracy").
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/arith.h"
#include "data/batch.h"
#include "data/linreg.h"
#include "data/mixture.h"
#include "models/cgt/cgt.h"

namespace icl {

// ---- batch surgery ---------------------------------------------------------------------------------------

// Inputs [start,end) of every sequence of bt as a batch of their own, with ABSOLUTE positions (bt.pos, or
// start..end−1): what the specialized model sees when everything before `start` is removed (spec §1.9 mode 2).
// Tokens/vectors, targets, target vectors and mask are cut the same way.
Batch batch_window(const Batch& bt, int start, int end);

// The batch without targets (inference only: the model's forward then computes no loss and no aux pass).
Batch inputs_only(const Batch& bt);

// ---- ICL arithmetic (spec §4.1, §5.1 Table 1, §6.1–6.2) -----------------------------------------------------

struct ICLEvalOptions {
    int freeze_after = 2;     // examples of each task that produce ỹ (and are removed); scored: the later ones
    bool task_vectors = false;  // also run the task-vector baseline (every layer j = 1..L−1, '|' and '=' tokens)
    double probe_lambda = 1e-3;  // ridge of the linear probe, relative to the mean feature variance
};

struct ICLEval {
    // teacher-forced argmax accuracy on the answer characters (sign + digits; *_digits: digits only) of the
    // examples after `freeze_after` of every task
    double base = NAN, base_digits = NAN;  // dynamic y, whole sequence in context
    double spec = NAN, spec_digits = NAN;  // ỹ frozen after example 2; examples 1–2 and earlier tasks removed
    double ctx = NAN;                      // ỹ frozen after example 2 from there on; everything kept in context
    double wrong_y = NAN;                  // examples 1–2 removed, ỹ of ANOTHER sequence's same task (x-only model: no y)
    double variation = NAN;                // eq. 4 (spec §6.1), mean over task instances
    double probe_mae = NAN, probe_mae_a = NAN, probe_mae_b = NAN;  // linear probe of (a,b) z-scores from y (held out)
    std::vector<double> tv_bar, tv_eq;     // task-vector accuracy per layer j = 1..L−1 ('|' / '=' token)
    double tv_best_bar = NAN, tv_best_eq = NAN;
    int sequences = 0, scored = 0;         // sequences evaluated, answer characters scored per mode
    nlohmann::json to_json() const;
    static ICLEval from_json(const nlohmann::json& j);  // to_json's inverse (null or absent → NaN); base_acc required
};

// The answer characters of the examples ≥ first_example of task `task` (−1: every task): mask over input
// positions t (1 where token t+1 is scored).
std::vector<float> arith_task_answer_mask(const ArithSample& s, int task, int first_example, bool digits_only);

// Evaluate on `val` (arith batches) with their samples. The model runs in eval mode (VAE: y = μ).
ICLEval icl_evaluate(CGT<float>& m, const ArithConfig& ac, const std::vector<Batch>& val,
                     const std::vector<std::vector<ArithSample>>& samples, const ICLEvalOptions& o);

// The representation variation of eq. 4 for one task instance: y (T,d_y) of one sequence, E1 / E2 the input
// positions of examples 1–2 / 3–4. δy = y − ⟨y⟩_{E1∪E2}, ȳ = δy / sqrt(⟨‖δy‖²⟩_{E1∪E2}),
// Var = (1/|E2|) Σ_{s∈E2} ‖ȳ_s − ȳ_{s−1}‖.
double representation_variation(const float* y, int dy, const std::vector<int>& E1, const std::vector<int>& E2);

// ---- linear regression (spec §4.2, §5.2, §6.9) --------------------------------------------------------------

struct LREval {
    std::vector<double> dynamic;                // (pairs) mean squared error vs U u + b at query k (k samples seen)
    std::vector<int> freeze_k;                  // k0 of each frozen curve
    std::vector<std::vector<double>> frozen;    // per k0: (pairs), NaN for k < k0: ỹ after sample k0, pairs < k0 removed
    std::vector<double> bayes;                  // (pairs) the Bayes-optimal (ridge) predictor's error on the same sequences
    int sequences = 0;
    nlohmann::json to_json() const;
    static LREval from_json(const nlohmann::json& j);  // to_json's inverse (null → NaN); dynamic, bayes required
};

// val: linreg batches, clean: their noise-free targets (B,T,d_out) per batch (linreg_batch's `clean`).
LREval lr_evaluate(CGT<float>& m, const LinRegConfig& lc, const std::vector<Batch>& val, const std::vector<std::vector<float>>& clean,
                   const std::vector<int>& freeze_k);

// ---- text mixtures (spec §4.3, §5.3, §6.6–6.8) ------------------------------------------------------------

struct TextEvalOptions {
    int docs_per_category = 16;  // validation documents per category (split evaluation, embeddings, transplant)
    int split = 0;               // part 1 = inputs [0, split); 0: the middle of [l_start, l_finish]
    double gamma = 1.0 / 300;    // EMA mode (App D.3)
    int tsne_iters = 1000;
    int top_tokens = 8;          // transplant: tokens listed per pair
};

struct TextEval {
    int split = 0;
    // mean CE (nats/token) per position of part 2 (index i = position split + i), over every document
    std::vector<double> full;        // dynamic, part 1 in context
    std::vector<double> spec;        // part 2 alone, y frozen to ỹ = y^ℓ at the end of part 1 (CGT only)
    std::vector<double> uninformed;  // part 2 alone, dynamic y ("non-specialized")
    std::vector<double> ema;         // part 2 alone, y_used = EMA(γ) of its own y from ỹ (CGT only)
    double knn_y = NAN, knn_tsne = NAN;  // 5-NN category accuracy of the document embeddings (y space / t-SNE plane)
    std::vector<std::string> transplant;  // one line per category pair: tokens whose log-prob rises most
    std::vector<std::string> files;
    nlohmann::json to_json() const;
    static TextEval from_json(const nlohmann::json& j);  // to_json's inverse (null or absent → NaN / empty); full required
};

// Evaluates a text-mixture model on the corpus' validation documents and writes into `dir`:
//   text_loss.png        CE vs position in part 2: full, specialized, uninformed, EMA
//   text_loss_diff.png   specialized − uninformed and EMA − uninformed (moving average of 9)
//   text_transition.png  3-text mixtures: cos(n_t, mean n of part k) for k = 1..3, joins dashed
//   text_ndot.png        ⟨n_s·n_t⟩ of those 3-text mixtures (batch mean)
//   text_tsne.png        t-SNE of document embeddings (mean of the last 16 y) coloured by category
//   text_transplant.md   y transplant: mean log-prob change per token, top tokens (spec §6.7)
// Models without y get only the full and uninformed curves.
TextEval text_evaluate(CGT<float>& m, const Corpus& cp, const MixConfig& mc, const TextEvalOptions& o, const std::string& dir,
                       const std::string& title);

// Per-row next-token cross-entropy (nats) of logits (N,V) against targets (N).
std::vector<double> token_ce(const std::vector<float>& logits, const std::vector<int>& targets, int V);

// ---- y analyses (spec §6.3–6.5) ---------------------------------------------------------------------------

struct YAnalysis {
    std::vector<double> spectrum;  // k = 1..T/2 of the averaged |DFT|² (per-component mean removed), sum = 1
    int peak_k = 0;                // argmax of the spectrum
    std::vector<std::string> files;
};

// The averaged normalized power spectrum of y (B,T,d_y) over positions: per sequence and component, the
// mean over positions is removed, |DFT_k|² for k = 1..T/2 is averaged over components and sequences and
// normalized to sum 1 (spec §6.5).
std::vector<double> y_spectrum(const std::vector<float>& y, int B, int T, int dy);

// For a batch of one task: runs the model (dynamic, eval mode) and writes into `dir`:
//   yl.npy (B,T,d_y)  y^ℓ (VAE: μ)        ndot.png  ⟨n_s·n_t⟩ averaged over the batch (n = y/‖y‖)
//   ytrace.png        8 components of y for sequence 0 against the position (dashed lines: `marks`)
//   spectrum.png      y_spectrum
// `marks` are positions to draw (task boundaries, text joins).
YAnalysis write_y_analysis(CGT<float>& m, const Batch& bt, const std::string& dir, const std::string& title, const std::vector<int>& marks);

}  // namespace icl
