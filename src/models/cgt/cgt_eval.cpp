// cgt_eval.cpp — see cgt_eval.h.
#include "models/cgt/cgt_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "report/analysis.h"
#include "engine/common.h"
#include "engine/npy.h"
#include "report/plot.h"
#include "engine/provenance.h"
#include "engine/run.h"

namespace icl {

namespace {
// n (rows,dy) = y / ‖y‖ row by row (in double; +1e-12 keeps a zero row finite).
std::vector<double> unit_rows(const std::vector<float>& y, size_t rows, int dy) {
    std::vector<double> n(rows * dy);
    for (size_t r = 0; r < rows; r++) {
        double q = 0;
        for (int i = 0; i < dy; i++) q += (double)y[r * dy + i] * y[r * dy + i];
        q = std::sqrt(q) + 1e-12;
        for (int i = 0; i < dy; i++) n[r * dy + i] = y[r * dy + i] / q;
    }
    return n;
}
// The (T,T) heatmap of ⟨n_s·n_t⟩ averaged over the B sequences of n (B,T,dy), colours in [−1, 1].
void save_ndot_heatmap(const std::string& path, const std::string& title, const std::vector<double>& n, int B, int T, int dy) {
    Heatmap h;
    h.title = title;
    h.xlabel = "position t";
    h.ylabel = "position s";
    h.cbar_label = "cosine";
    h.rows = h.cols = T;
    h.values.assign((size_t)T * T, 0.0);
    h.diverging = true;
    h.vmin = -1;
    h.vmax = 1;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T; s++)
            for (int t = 0; t < T; t++) {
                double d = 0;
                for (int i = 0; i < dy; i++) d += n[((size_t)b * T + s) * dy + i] * n[((size_t)b * T + t) * dy + i];
                h.values[(size_t)s * T + t] += d / B;
            }
    save_heatmap(path, h);
}
}  // namespace


// ------------------------------------------------------------------------------------------------------
// batch surgery

Batch batch_window(const Batch& bt, int start, int end) {
    if (start < 0 || end > bt.T || start >= end) fail(strfmt("batch_window: [%d,%d) is not inside [0,%d)", start, end, bt.T));
    Batch w;
    w.B = bt.B;
    w.T = end - start;
    w.D = bt.D;
    w.Dout = bt.Dout;
    for (int b = 0; b < bt.B; b++)
        for (int t = start; t < end; t++) {
            const size_t i = (size_t)b * bt.T + t;
            if (!bt.tokens.empty()) w.tokens.push_back(bt.tokens[i]);
            if (!bt.targets.empty()) w.targets.push_back(bt.targets[i]);
            if (!bt.mask.empty()) w.mask.push_back(bt.mask[i]);
            w.pos.push_back(bt.pos.empty() ? t : bt.pos[i]);  // absolute positions
            for (int d = 0; d < bt.D; d++) w.vectors.push_back(bt.vectors[i * bt.D + d]);
            if (!bt.target_vecs.empty())
                for (int d = 0; d < bt.Dout; d++) w.target_vecs.push_back(bt.target_vecs[i * bt.Dout + d]);
        }
    return w;
}

Batch inputs_only(const Batch& bt) {
    Batch x = bt;
    x.targets.clear();
    x.target_vecs.clear();
    x.mask.clear();
    return x;
}

// ------------------------------------------------------------------------------------------------------
// ICL arithmetic

std::vector<float> arith_task_answer_mask(const ArithSample& s, int task, int first_example, bool digits_only) {
    std::vector<float> m = arith_answer_mask(s, first_example, digits_only);
    if (task >= 0)
        for (size_t t = 0; t < m.size(); t++)
            if (s.task[t + 1] != task) m[t] = 0.0f;
    return m;
}

double representation_variation(const float* y, int dy, const std::vector<int>& E1, const std::vector<int>& E2) {
    std::vector<int> E(E1);
    E.insert(E.end(), E2.begin(), E2.end());
    if (E2.empty() || E.size() < 2) return NAN;
    // δy = y − ⟨y⟩_{E1∪E2} ;  scale² = ⟨‖δy‖²⟩_{E1∪E2}
    std::vector<double> mu(dy, 0.0);
    for (int s : E)
        for (int i = 0; i < dy; i++) mu[i] += y[(size_t)s * dy + i] / (double)E.size();
    double scale = 0;
    for (int s : E)
        for (int i = 0; i < dy; i++) {
            const double d = y[(size_t)s * dy + i] - mu[i];
            scale += d * d / (double)E.size();
        }
    scale = std::sqrt(scale);
    if (!(scale > 0)) return 0.0;
    // Var = (1/|E2|) Σ_{s∈E2} ‖ȳ_s − ȳ_{s−1}‖  (the mean cancels in the difference)
    double v = 0;
    for (int s : E2) {
        if (s < 1) fail("representation_variation: E2 position 0 has no predecessor");
        double q = 0;
        for (int i = 0; i < dy; i++) {
            const double d = (y[(size_t)s * dy + i] - y[(size_t)(s - 1) * dy + i]) / scale;
            q += d * d;
        }
        v += std::sqrt(q);
    }
    return v / (double)E2.size();
}

nlohmann::json ICLEval::to_json() const {
    auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    nlohmann::json j = {{"base_acc", num(base)}, {"base_acc_digits", num(base_digits)}, {"spec_acc", num(spec)},
                        {"spec_acc_digits", num(spec_digits)}, {"ctx_acc", num(ctx)}, {"wrong_y_acc", num(wrong_y)},
                        {"variation", num(variation)}, {"probe_mae", num(probe_mae)}, {"probe_mae_a", num(probe_mae_a)},
                        {"probe_mae_b", num(probe_mae_b)}, {"tv_best_bar", num(tv_best_bar)}, {"tv_best_eq", num(tv_best_eq)},
                        {"sequences", sequences}, {"scored", scored}};
    if (!tv_bar.empty()) {
        j["tv_bar"] = nlohmann::json::array();
        j["tv_eq"] = nlohmann::json::array();
        for (double v : tv_bar) j["tv_bar"].push_back(num(v));
        for (double v : tv_eq) j["tv_eq"].push_back(num(v));
    }
    return j;
}

namespace {
// The readers of the to_json files: a number or null (NaN); an array of them. A required key that is absent, or a
// value of the wrong type, is an error naming the key.
double json_num(const nlohmann::json& j, const char* key, bool required) {
    if (!j.contains(key)) {
        if (required) fail(std::string("evaluation record: no '") + key + "'");
        return NAN;
    }
    const nlohmann::json& v = j[key];
    if (v.is_null()) return NAN;
    if (!v.is_number()) fail(std::string("evaluation record: '") + key + "' is not a number");
    return v.get<double>();
}
std::vector<double> json_nums(const nlohmann::json& v, const std::string& key) {
    if (!v.is_array()) fail("evaluation record: '" + key + "' is not an array");
    std::vector<double> o;
    for (const nlohmann::json& x : v) {
        if (!x.is_null() && !x.is_number()) fail("evaluation record: '" + key + "' holds a non-number");
        o.push_back(x.is_null() ? NAN : x.get<double>());
    }
    return o;
}
std::vector<double> json_nums(const nlohmann::json& j, const char* key, bool required) {
    if (!j.contains(key)) {
        if (required) fail(std::string("evaluation record: no '") + key + "'");
        return {};
    }
    return json_nums(j[key], key);
}
int json_int(const nlohmann::json& j, const char* key) {
    return j.contains(key) && j[key].is_number_integer() ? j[key].get<int>() : 0;
}
}  // namespace

ICLEval ICLEval::from_json(const nlohmann::json& j) {
    if (!j.is_object()) fail("evaluation record: not a JSON object");
    ICLEval e;
    e.base = json_num(j, "base_acc", true);
    e.base_digits = json_num(j, "base_acc_digits", false);
    e.spec = json_num(j, "spec_acc", false);
    e.spec_digits = json_num(j, "spec_acc_digits", false);
    e.ctx = json_num(j, "ctx_acc", false);
    e.wrong_y = json_num(j, "wrong_y_acc", false);
    e.variation = json_num(j, "variation", false);
    e.probe_mae = json_num(j, "probe_mae", false);
    e.probe_mae_a = json_num(j, "probe_mae_a", false);
    e.probe_mae_b = json_num(j, "probe_mae_b", false);
    e.tv_best_bar = json_num(j, "tv_best_bar", false);
    e.tv_best_eq = json_num(j, "tv_best_eq", false);
    e.tv_bar = json_nums(j, "tv_bar", false);
    e.tv_eq = json_nums(j, "tv_eq", false);
    e.sequences = json_int(j, "sequences");
    e.scored = json_int(j, "scored");
    return e;
}

namespace {

// hits / count of argmax(logits row) == target
struct Acc {
    long hit = 0, tot = 0;
    double value() const { return tot ? (double)hit / tot : NAN; }
};

// Score rows of `logits` (B,Tw,V) that belong to input positions off..off+Tw−1 of the full sequence, where
// mask_b (T) is 1; the targets come from the full batch.
void score(Acc& a, const std::vector<float>& logits, int Tw, int V, int off, const Batch& full, int b, const std::vector<float>& mask_b) {
    for (int t = 0; t < Tw; t++) {
        const int p = off + t;
        if (p >= full.T || mask_b[p] == 0) continue;
        const float* row = &logits[((size_t)b * Tw + t) * V];
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        a.hit += best == full.targets[(size_t)b * full.T + p];
        a.tot++;
    }
}

}  // namespace

ICLEval icl_evaluate(CGT<float>& m, const ArithConfig& ac, const std::vector<Batch>& val,
                     const std::vector<std::vector<ArithSample>>& samples, const ICLEvalOptions& o) {
    const CGTConfig& c = m.cfg;
    if (c.d_in > 0) fail("icl_evaluate: the model takes vectors, not arithmetic tokens");
    if (o.freeze_after < 1 || o.freeze_after >= ac.n_ex)
        fail_usage(strfmt("ICL evaluation: freezing after %d examples needs at least %d examples per task (--n-ex %d)", o.freeze_after,
                          o.freeze_after + 1, ac.n_ex));
    const bool has_y = c.has_y(), gen = has_y && c.L > c.ell;
    const int V = c.V, dy = c.dy, dx = c.dx, ex = ac.example_len(), tl = ac.task_len(), K = o.freeze_after;
    const bool tv = o.task_vectors && c.L > 1;
    const bool tm = m.train_mode;
    m.train_mode = false;
    Acc base, base_d, spec, spec_d, ctx, wrong;
    std::vector<Acc> tvb(tv ? c.L - 1 : 0), tve(tv ? c.L - 1 : 0);
    double var_sum = 0;
    long var_n = 0;
    std::vector<double> feats, targets;  // linear probe: ⟨y⟩_{E2} → (a_norm, b_norm)
    ICLEval r;
    for (size_t vb = 0; vb < val.size(); vb++) {
        const Batch& bt = val[vb];
        const std::vector<ArithSample>& sm = samples[vb];
        const int B = bt.B, T = bt.T;
        if ((int)sm.size() != B || T != ac.seq_len() - 1) fail("icl_evaluate: batch and samples do not match the task");
        r.sequences += B;
        // the dynamic pass: logits, y^ℓ, and (task vectors) the residual after every block but the last
        m.forward(inputs_only(bt));
        const std::vector<float> logits = m.outputs();
        const std::vector<float> y = has_y ? m.s.fetch_act(c.vae ? "y_used" : "yl") : std::vector<float>();
        std::vector<std::vector<float>> res;
        for (int j = 0; tv && j < c.L - 1; j++) res.push_back(m.s.fetch_act("h." + std::to_string(j) + ".res3"));
        std::vector<std::vector<float>> mask(B), mask_d(B);
        for (int b = 0; b < B; b++) {
            mask[b] = arith_task_answer_mask(sm[b], -1, K, false);
            mask_d[b] = arith_task_answer_mask(sm[b], -1, K, true);
            score(base, logits, T, V, 0, bt, b, mask[b]);
            score(base_d, logits, T, V, 0, bt, b, mask_d[b]);
        }
        for (int ti = 0; ti < ac.n_tasks; ti++) {
            const int s = ti * tl + K * ex;          // first input of example K+1: the specialized model starts here
            const int e = std::min(T, (ti + 1) * tl);  // the task's end (its '#'; the last task ends at T)
            std::vector<std::vector<float>> tm_(B), tmd(B);
            for (int b = 0; b < B; b++) {
                tm_[b] = arith_task_answer_mask(sm[b], ti, K, false);
                tmd[b] = arith_task_answer_mask(sm[b], ti, K, true);
            }
            const Batch W = batch_window(bt, s, e);
            const int Tw = e - s;
            // ỹ_b = y^ℓ[b, s−1] (the '|' closing example K)
            auto rows = [&](int Tn, auto src) {
                std::vector<float> yp;
                if (!gen) return yp;
                yp.resize((size_t)B * Tn * dy);
                for (int b = 0; b < B; b++)
                    for (int t = 0; t < Tn; t++) {
                        const auto [sb, st] = src(b, t);
                        std::copy_n(&y[((size_t)sb * T + st) * dy], dy, &yp[((size_t)b * Tn + t) * dy]);
                    }
                return yp;
            };
            // specialized: examples 1..K (and every earlier task) removed, ỹ frozen, absolute positions
            if (has_y) {
                const std::vector<float> lw = m.forward_with_y(W, rows(Tw, [&](int b, int) { return std::pair<int, int>(b, s - 1); }));
                for (int b = 0; b < B; b++) {
                    score(spec, lw, Tw, V, s, bt, b, tm_[b]);
                    score(spec_d, lw, Tw, V, s, bt, b, tmd[b]);
                }
                // with context: positions < s keep their own y, positions ≥ s use ỹ
                const Batch P = batch_window(bt, 0, e);
                const std::vector<float> lc =
                    m.forward_with_y(P, rows(e, [&](int b, int t) { return std::pair<int, int>(b, t < s ? t : s - 1); }));
                for (int b = 0; b < B; b++) score(ctx, lc, e, V, 0, bt, b, tm_[b]);
            }
            // control: examples removed and ỹ from another sequence (same task slot); x-only model: no y at all
            {
                const std::vector<float> lw =
                    m.forward_with_y(W, rows(Tw, [&](int b, int) { return std::pair<int, int>((b + 1) % B, s - 1); }));
                for (int b = 0; b < B; b++) score(wrong, lw, Tw, V, s, bt, b, tm_[b]);
            }
            // task vectors (Hendel et al. 2023, spec §4.1): the residual after block j of the dynamic pass at the
            // '|' closing example K (or example K's '='), patched into the run without examples 1..K
            for (int j = 0; tv && j < c.L - 1; j++) {
                // '|': the no-example run starts at that '|' token (position s−1), whose residual is replaced
                const Batch Wb = batch_window(bt, s - 1, e);
                m.patches.clear();
                for (int b = 0; b < B; b++) {
                    typename CGT<float>::Patch p;
                    p.block = j;
                    p.row = (int64_t)b * (Tw + 1);
                    const auto from = res[j].begin() + ((size_t)b * T + s - 1) * dx;
                    p.value = std::vector<float>(from, from + dx);
                    m.patches.push_back(p);
                }
                const std::vector<float> lb = m.forward_with_y(Wb, rows(Tw + 1, [&](int b, int) { return std::pair<int, int>((b + 1) % B, s - 1); }));
                for (int b = 0; b < B; b++) score(tvb[j], lb, Tw + 1, V, s - 1, bt, b, tm_[b]);
                // '=': every '=' of the remaining examples gets the residual of example K's '='
                const int eqK = ti * tl + (K - 1) * ex + 2 * ac.digits + 1;
                m.patches.clear();
                for (int b = 0; b < B; b++)
                    for (int t = s; t < e; t++)
                        if (sm[b].role[t] == ArithRole::equals) {
                            typename CGT<float>::Patch p;
                            p.block = j;
                            p.row = (int64_t)b * Tw + (t - s);
                            const auto from = res[j].begin() + ((size_t)b * T + eqK) * dx;
                            p.value = std::vector<float>(from, from + dx);
                            m.patches.push_back(p);
                        }
                const std::vector<float> le = m.forward_with_y(W, rows(Tw, [&](int b, int) { return std::pair<int, int>((b + 1) % B, s - 1); }));
                m.patches.clear();
                for (int b = 0; b < B; b++) score(tve[j], le, Tw, V, s, bt, b, tm_[b]);
            }
            // representation variation and probe features, per task instance
            if (has_y)
                for (int b = 0; b < B; b++) {
                    std::vector<int> E1, E2;
                    for (int t = ti * tl; t < e; t++) {
                        if (sm[b].example[t] < 0) continue;  // '#'
                        (sm[b].example[t] < K ? E1 : E2).push_back(t);
                    }
                    const double v = representation_variation(&y[(size_t)b * T * dy], dy, E1, E2);
                    if (std::isfinite(v)) { var_sum += v; var_n++; }
                    for (int i = 0; i < dy; i++) {
                        double a = 0;
                        for (int t : E2) a += y[((size_t)b * T + t) * dy + i];
                        feats.push_back(a / (double)E2.size());
                    }
                    targets.push_back((sm[b].a[ti] - 5.0) / (10.0 / std::sqrt(12.0)));  // z-scores of U[0,10) and U(−10,10)
                    targets.push_back(sm[b].b[ti] / (20.0 / std::sqrt(12.0)));
                }
        }
    }
    m.train_mode = tm;
    r.base = base.value();
    r.base_digits = base_d.value();
    r.scored = (int)base.tot;
    if (has_y) {
        r.spec = spec.value();
        r.spec_digits = spec_d.value();
        r.ctx = ctx.value();
    }
    r.wrong_y = wrong.value();
    for (int j = 0; j < (int)tvb.size(); j++) {
        r.tv_bar.push_back(tvb[j].value());
        r.tv_eq.push_back(tve[j].value());
        r.tv_best_bar = std::isfinite(r.tv_best_bar) ? std::max(r.tv_best_bar, r.tv_bar.back()) : r.tv_bar.back();
        r.tv_best_eq = std::isfinite(r.tv_best_eq) ? std::max(r.tv_best_eq, r.tv_eq.back()) : r.tv_eq.back();
    }
    if (var_n) r.variation = var_sum / var_n;
    // linear probe: ridge on the first half of the task instances, mean absolute error on the second half
    const int N = (int)targets.size() / 2, Ntr = N / 2;
    if (has_y && N - Ntr >= 1 && Ntr >= 2) {
        double fvar = 0;
        for (int i = 0; i < Ntr * dy; i++) fvar += feats[i] * feats[i] / (Ntr * dy);
        Ridge rd = ridge_fit(feats.data(), targets.data(), Ntr, dy, 2, o.probe_lambda * Ntr * std::max(fvar, 1e-12));
        std::vector<double> pr = rd.predict(&feats[(size_t)Ntr * dy], N - Ntr);
        double ea = 0, eb = 0;
        for (int n = 0; n < N - Ntr; n++) {
            ea += std::fabs(pr[2 * n] - targets[2 * (Ntr + n)]);
            eb += std::fabs(pr[2 * n + 1] - targets[2 * (Ntr + n) + 1]);
        }
        r.probe_mae_a = ea / (N - Ntr);
        r.probe_mae_b = eb / (N - Ntr);
        r.probe_mae = (r.probe_mae_a + r.probe_mae_b) / 2;
    }
    return r;
}

// ------------------------------------------------------------------------------------------------------
// linear regression

nlohmann::json LREval::to_json() const {
    auto arr = [](const std::vector<double>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (double x : v) a.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
        return a;
    };
    nlohmann::json j = {{"dynamic", arr(dynamic)}, {"bayes", arr(bayes)}, {"sequences", sequences}, {"frozen", nlohmann::json::object()}};
    for (size_t i = 0; i < freeze_k.size(); i++) j["frozen"][std::to_string(freeze_k[i])] = arr(frozen[i]);
    return j;
}

LREval LREval::from_json(const nlohmann::json& j) {
    if (!j.is_object()) fail("evaluation record: not a JSON object");
    LREval e;
    e.dynamic = json_nums(j, "dynamic", true);
    e.bayes = json_nums(j, "bayes", true);
    e.sequences = json_int(j, "sequences");
    if (j.contains("frozen")) {
        if (!j["frozen"].is_object()) fail("evaluation record: 'frozen' is not an object");
        std::vector<std::pair<int, std::vector<double>>> f;  // keys are k0 as text: sorted numerically, not as text
        for (auto it = j["frozen"].begin(); it != j["frozen"].end(); ++it) {
            char* end = nullptr;
            const long k0 = std::strtol(it.key().c_str(), &end, 10);
            if (it.key().empty() || *end || k0 < 0 || k0 > (1 << 20)) fail("evaluation record: 'frozen' key " + quote_text(it.key()) + " is not a position");
            f.push_back({(int)k0, json_nums(it.value(), "frozen/" + it.key())});
        }
        std::sort(f.begin(), f.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (auto& kv : f) { e.freeze_k.push_back(kv.first); e.frozen.push_back(kv.second); }
    }
    return e;
}

LREval lr_evaluate(CGT<float>& m, const LinRegConfig& lc, const std::vector<Batch>& val, const std::vector<std::vector<float>>& clean,
                   const std::vector<int>& freeze_k) {
    const CGTConfig& c = m.cfg;
    if (c.d_in == 0 || c.d_out != lc.d_out) fail("lr_evaluate: the model is not a linear-regression model");
    const int N = lc.pairs, Do = lc.d_out, dy = c.dy;
    const bool has_y = c.has_y(), gen = has_y && c.L > c.ell;
    for (int k0 : freeze_k)
        if (k0 < 1 || k0 >= N) fail_usage(strfmt("--freeze-k: %d must be in [1, %d)", k0, N));
    const bool tm = m.train_mode;
    m.train_mode = false;
    LREval r;
    r.freeze_k = freeze_k;
    std::vector<double> dyn(N, 0.0), bay(N, 0.0);
    std::vector<std::vector<double>> fr(freeze_k.size(), std::vector<double>(N, 0.0));
    long nseq = 0;
    for (size_t vb = 0; vb < val.size(); vb++) {
        const Batch& bt = val[vb];
        const int B = bt.B, T = bt.T;
        const std::vector<float>& cl = clean[vb];
        // squared error of the prediction at pair k's u token (input position 2k) against U u_k + b
        auto err = [&](const std::vector<float>& pred, int Tw, int off, int b, int k) {
            double e = 0;
            for (int o = 0; o < Do; o++) {
                const double d = pred[((size_t)b * Tw + 2 * k - off) * Do + o] - cl[((size_t)b * T + 2 * k) * Do + o];
                e += d * d;
            }
            return e;
        };
        m.forward(inputs_only(bt));
        const std::vector<float> pred = m.outputs();
        const std::vector<float> y = has_y ? m.s.fetch_act(c.vae ? "y_used" : "yl") : std::vector<float>();
        for (int b = 0; b < B; b++)
            for (int k = 0; k < N; k++) dyn[k] += err(pred, T, 0, b, k);
        // the Bayes-optimal predictor on these very sequences (pairs: u at 2k, v at 2k+1, rows of width bt.D)
        std::vector<double> bp((size_t)N * Do);
        std::vector<float> bpf((size_t)T * Do, 0.0f);
        for (int b = 0; b < B; b++) {
            const float* X = &bt.vectors[(size_t)b * T * bt.D];
            ridge_bayes_predictions(bp.data(), X, 2 * bt.D, X + bt.D, 2 * bt.D, N, lc.d_in, Do, lc.noise);
            for (int k = 0; k < N; k++) {
                double e = 0;
                for (int o = 0; o < Do; o++) {
                    const double d = bp[(size_t)k * Do + o] - cl[((size_t)b * T + 2 * k) * Do + o];
                    e += d * d;
                }
                bay[k] += e;
            }
        }
        for (size_t f = 0; f < freeze_k.size(); f++) {
            // ỹ = y^ℓ at v_{k0} (input position 2k0−1); the model then sees pairs k0.. alone (0-indexed), positions absolute
            const int k0 = freeze_k[f], s = 2 * k0, Tw = T - s;
            std::vector<float> yp;
            if (gen) {
                yp.resize((size_t)B * Tw * dy);
                for (int b = 0; b < B; b++)
                    for (int t = 0; t < Tw; t++) std::copy_n(&y[((size_t)b * T + s - 1) * dy], dy, &yp[((size_t)b * Tw + t) * dy]);
            }
            const std::vector<float> pw = m.forward_with_y(batch_window(bt, s, T), yp);
            for (int b = 0; b < B; b++)
                for (int k = k0; k < N; k++) fr[f][k] += err(pw, Tw, s, b, k);
        }
        nseq += B;
    }
    m.train_mode = tm;
    r.sequences = (int)nseq;
    for (int k = 0; k < N; k++) r.dynamic.push_back(dyn[k] / nseq);
    for (size_t f = 0; f < freeze_k.size(); f++) {
        r.frozen.emplace_back(N, NAN);
        for (int k = freeze_k[f]; k < N; k++) r.frozen[f][k] = fr[f][k] / nseq;
    }
    for (int k = 0; k < N; k++) r.bayes.push_back(bay[k] / nseq);
    return r;
}

// ------------------------------------------------------------------------------------------------------
// text mixtures

std::vector<double> token_ce(const std::vector<float>& logits, const std::vector<int>& targets, int V) {
    std::vector<double> ce(targets.size());
    for (size_t i = 0; i < targets.size(); i++) {
        const float* row = &logits[i * V];
        double mx = row[0];
        for (int v = 1; v < V; v++) mx = std::max(mx, (double)row[v]);
        double z = 0;
        for (int v = 0; v < V; v++) z += std::exp(row[v] - mx);
        ce[i] = mx + std::log(z) - row[targets[i]];  // −log softmax(row)[target]
    }
    return ce;
}

nlohmann::json TextEval::to_json() const {
    auto arr = [](const std::vector<double>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (double x : v) a.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
        return a;
    };
    auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    return {{"split", split}, {"full", arr(full)}, {"spec", arr(spec)}, {"uninformed", arr(uninformed)}, {"ema", arr(ema)},
            {"knn_y", num(knn_y)}, {"knn_tsne", num(knn_tsne)}, {"transplant", transplant}, {"files", files}};
}

TextEval TextEval::from_json(const nlohmann::json& j) {
    if (!j.is_object()) fail("evaluation record: not a JSON object");
    TextEval e;
    e.split = json_int(j, "split");
    e.full = json_nums(j, "full", true);
    e.spec = json_nums(j, "spec", false);
    e.uninformed = json_nums(j, "uninformed", false);
    e.ema = json_nums(j, "ema", false);
    e.knn_y = json_num(j, "knn_y", false);
    e.knn_tsne = json_num(j, "knn_tsne", false);
    return e;
}

namespace {

// Centered moving average of width w (NaN-aware), for plots.
std::vector<double> smooth(const std::vector<double>& v, int w) {
    std::vector<double> o(v.size(), NAN);
    for (int i = 0; i < (int)v.size(); i++) {
        double s = 0;
        int n = 0;
        for (int j = std::max(0, i - w / 2); j <= std::min((int)v.size() - 1, i + w / 2); j++)
            if (std::isfinite(v[j])) { s += v[j]; n++; }
        if (n) o[i] = s / n;
    }
    return o;
}

// Rows [b0, b0+n) of a batch.
Batch batch_rows(const Batch& bt, int b0, int n) {
    Batch o;
    o.B = n;
    o.T = bt.T;
    o.D = bt.D;
    o.Dout = bt.Dout;
    auto cut = [&](const auto& src, auto& dst, size_t per) {
        if (!src.empty()) dst.assign(src.begin() + (size_t)b0 * bt.T * per, src.begin() + (size_t)(b0 + n) * bt.T * per);
    };
    cut(bt.tokens, o.tokens, 1); cut(bt.vectors, o.vectors, bt.D); cut(bt.targets, o.targets, 1);
    cut(bt.target_vecs, o.target_vecs, bt.Dout); cut(bt.mask, o.mask, 1); cut(bt.pos, o.pos, 1);
    return o;
}

bool valid_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = s[i];
        const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (int k = 1; k < n; k++)
            if (((unsigned char)s[i + k] >> 6) != 2) return false;
        i += n;
    }
    return true;
}

// A token's bytes for a table cell: newline as \n, '|' escaped, control bytes and bytes of incomplete UTF-8 as \xNN.
std::string printable(const std::string& s) {
    const bool utf8 = valid_utf8(s);
    std::string o;
    for (unsigned char c : s) {
        if (c == '\n') o += "\\n";
        else if (c == '|') o += "\\|";
        else if (c < 32 || c == 127 || (c >= 128 && !utf8)) o += strfmt("\\x%02X", c);
        else o += (char)c;
    }
    return o;
}

}  // namespace

TextEval text_evaluate(CGT<float>& m, const Corpus& cp, const MixConfig& mc, const TextEvalOptions& o, const std::string& dir,
                       const std::string& title) {
    const CGTConfig& c = m.cfg;
    const int T = mc.T, C = cp.categories(), D = o.docs_per_category, V = c.V, dy = c.dy;
    const bool has_y = c.has_y(), gen = has_y && c.L > c.ell;
    TextEval r;
    r.split = o.split > 0 ? o.split : (mc.l_start + mc.l_finish) / 2;
    const int P = r.split, T2 = T - P;
    if (P < 1 || P >= T) fail_usage(strfmt("text evaluation: the split %d must be inside (0, %d)", P, T));
    const bool tm = m.train_mode;
    m.train_mode = false;
    Rng rng(0x7E57);
    std::vector<int> cats;
    for (int k = 0; k < C; k++)
        for (int d = 0; d < D; d++) cats.push_back(k);
    const Batch docs = document_batch(cp, true, cats, T, rng);
    const int N = docs.B, chunk = 32;
    std::vector<double> full(T2, 0.0), spec(T2, 0.0), unin(T2, 0.0), ema(T2, 0.0);
    std::vector<double> emb;                          // (N,d_y) mean of the last 16 y
    std::vector<float> ylast((size_t)N * std::max(dy, 0));  // y^ℓ at the last position of each document
    std::vector<std::vector<double>> dyn_lp(N);       // transplant: per document, mean dynamic log-prob per token over t ≥ 16
    auto add_ce = [&](std::vector<double>& acc, const std::vector<float>& logits, const Batch& w, int off) {
        std::vector<double> ce = token_ce(logits, w.targets, V);
        for (int b = 0; b < w.B; b++)
            for (int t = 0; t < w.T; t++)
                if (off + t >= P) acc[off + t - P] += ce[(size_t)b * w.T + t] / N;
    };
    auto mean_logprob = [&](const std::vector<float>& logits, int b, int Tn) {
        std::vector<double> lp(V, 0.0);
        for (int t = 16; t < Tn; t++) {
            const float* row = &logits[((size_t)b * Tn + t) * V];
            double mx = row[0], z = 0;
            for (int v = 1; v < V; v++) mx = std::max(mx, (double)row[v]);
            for (int v = 0; v < V; v++) z += std::exp(row[v] - mx);
            for (int v = 0; v < V; v++) lp[v] += (row[v] - mx - std::log(z)) / (Tn - 16);
        }
        return lp;
    };
    for (int b0 = 0; b0 < N; b0 += chunk) {
        const int n = std::min(chunk, N - b0);
        const Batch bt = batch_rows(docs, b0, n);
        m.forward(inputs_only(bt));
        const std::vector<float> lg = m.outputs();
        add_ce(full, lg, bt, 0);
        for (int b = 0; b < n && T > 16; b++) dyn_lp[b0 + b] = mean_logprob(lg, b, T);
        const Batch W = batch_window(bt, P, T);
        std::vector<float> y;
        if (has_y) {
            y = m.s.fetch_act(c.vae ? "y_used" : "yl");
            for (int b = 0; b < n; b++) {
                for (int i = 0; i < dy; i++) {
                    double a = 0;
                    const int from = std::max(0, T - 16);
                    for (int t = from; t < T; t++) a += y[((size_t)b * T + t) * dy + i] / (T - from);
                    emb.push_back(a);
                }
                std::copy_n(&y[((size_t)b * T + T - 1) * dy], dy, &ylast[(size_t)(b0 + b) * dy]);
            }
        }
        m.forward(inputs_only(W));  // part 2 alone, its own dynamic y ("uninformed"), absolute positions
        add_ce(unin, m.outputs(), W, P);
        if (gen) {
            std::vector<float> yt((size_t)n * dy), yp((size_t)n * T2 * dy);
            for (int b = 0; b < n; b++) {
                std::copy_n(&y[((size_t)b * T + P - 1) * dy], dy, &yt[(size_t)b * dy]);
                for (int t = 0; t < T2; t++) std::copy_n(&yt[(size_t)b * dy], dy, &yp[((size_t)b * T2 + t) * dy]);
            }
            add_ce(spec, m.forward_with_y(W, yp), W, P);
            add_ce(ema, m.ema_outputs(W, yt, o.gamma), W, P);
        }
    }
    r.full = full;
    r.uninformed = unin;
    if (gen) { r.spec = spec; r.ema = ema; }
    // CE curves
    {
        std::vector<double> x;
        for (int t = 0; t < T2; t++) x.push_back(P + t);
        LinePlot p = make_line_plot(title + ": CE in part 2 (split at " + std::to_string(P) + ")", "position", "cross-entropy (nats/token)");
        p.series.push_back({"full (part 1 in context)", x, smooth(r.full, 9)});
        p.series.push_back({"uninformed (part 2 alone)", x, smooth(r.uninformed, 9)});
        if (gen) {
            p.series.push_back({"specialized (frozen y from part 1)", x, smooth(r.spec, 9)});
            p.series.push_back({"EMA y, gamma=1/" + strfmt("%.0f", 1 / o.gamma), x, smooth(r.ema, 9)});
        }
        save_line_plot(dir + "/text_loss.png", p);
        r.files.push_back(dir + "/text_loss.png");
        // the numbers behind the plot (unsmoothed): position, full, uninformed, specialized, EMA (nats/token)
        std::string csv = "position,full,uninformed,specialized,ema\n";
        for (int t = 0; t < T2; t++)
            csv += strfmt("%d,%.6g,%.6g,", P + t, r.full[t], r.uninformed[t]) + (gen ? strfmt("%.6g,%.6g", r.spec[t], r.ema[t]) : ",") + "\n";
        write_file_atomic(dir + "/text_loss.csv", csv_provenance_comment() + csv);
        r.files.push_back(dir + "/text_loss.csv");
        if (gen) {
            LinePlot d = make_line_plot(title + ": CE differences in part 2 (< 0: better than uninformed)", "position", "CE difference (nats/token)");
            std::vector<double> a(T2), b(T2), f(T2);
            for (int t = 0; t < T2; t++) { a[t] = r.spec[t] - r.uninformed[t]; b[t] = r.ema[t] - r.uninformed[t]; f[t] = r.full[t] - r.uninformed[t]; }
            d.series.push_back({"specialized - uninformed", x, smooth(a, 9)});
            d.series.push_back({"EMA - uninformed", x, smooth(b, 9)});
            d.series.push_back({"full context - uninformed", x, smooth(f, 9)});
            d.series.back().dashed = true;
            d.hlines.push_back({"0", 0.0});
            save_line_plot(dir + "/text_loss_diff.png", d);
            r.files.push_back(dir + "/text_loss_diff.png");
        }
    }
    if (has_y) {
        // document embeddings → t-SNE
        TsneOptions to;
        to.perplexity = std::min(30.0, std::max(2.0, N / 4.0));
        to.iters = o.tsne_iters;
        to.exaggeration_iters = std::min(250, o.tsne_iters / 4);
        std::vector<double> Y2 = tsne(emb.data(), N, dy, to);
        r.knn_y = knn_accuracy(emb.data(), N, dy, cats, 5);
        r.knn_tsne = knn_accuracy(Y2.data(), N, 2, cats, 5);
        Scatter sc;
        sc.title = title + strfmt(": t-SNE of document embeddings (5-NN acc %.2f)", r.knn_tsne);
        sc.xlabel = "t-SNE 1";
        sc.ylabel = "t-SNE 2";
        for (int i = 0; i < N; i++) { sc.x.push_back(Y2[2 * i]); sc.y.push_back(Y2[2 * i + 1]); }
        sc.category = cats;
        sc.category_names = cp.names;
        save_scatter(dir + "/text_tsne.png", sc);
        r.files.push_back(dir + "/text_tsne.png");
    }
    if (gen && C >= 2 && T > 16) {
        // y transplant: y of category a's documents (at their last position) on category b's documents
        std::string md = "| y from | on text of | tokens whose log-prob rises most (mean over positions ≥ 16; candidates: top " +
                         std::to_string(std::min(500, V)) + " by transplanted probability) |\n|---|---|---|\n";
        for (int a = 0; a < C; a++) {
            const int b = (a + 1) % C;
            const Batch bt = batch_rows(docs, b * D, D);
            std::vector<float> yf(ylast.begin() + (size_t)a * D * dy, ylast.begin() + (size_t)(a + 1) * D * dy);
            const std::vector<float> lt = m.transplant_outputs(inputs_only(bt), yf);
            std::vector<double> dlp(V, 0.0), ptr(V, 0.0);
            for (int d = 0; d < D; d++) {
                std::vector<double> lp = mean_logprob(lt, d, T);
                for (int v = 0; v < V; v++) {
                    dlp[v] += (lp[v] - dyn_lp[b * D + d][v]) / D;
                    ptr[v] += std::exp(lp[v]) / D;
                }
            }
            std::vector<int> cand(V);
            for (int v = 0; v < V; v++) cand[v] = v;
            std::sort(cand.begin(), cand.end(), [&](int p, int q) { return ptr[p] > ptr[q]; });
            cand.resize(std::min(500, V));
            std::sort(cand.begin(), cand.end(), [&](int p, int q) { return dlp[p] > dlp[q]; });
            std::string toks;
            for (int k = 0; k < std::min(o.top_tokens, (int)cand.size()); k++)
                toks += strfmt("%s`%s` (%+.2f)", k ? ", " : "", printable(cp.decode(&cand[k], 1)).c_str(), dlp[cand[k]]);
            r.transplant.push_back(cp.names[a] + " -> " + cp.names[b] + ": " + toks);
            md += "| " + cp.names[a] + " | " + cp.names[b] + " | " + toks + " |\n";
        }
        write_file_atomic(dir + "/text_transplant.md", md + "\n_" + provenance_line() + "_\n");
        r.files.push_back(dir + "/text_transplant.md");
    }
    if (has_y && C >= 2) {
        // 3-text mixtures (two joins at T/3 and 2T/3, consecutive parts of different categories): y transitions
        const int B3 = 16;
        const std::vector<int> cuts = {T / 3, 2 * T / 3};
        Batch mx;
        mx.B = B3;
        mx.T = T;
        for (int b = 0; b < B3; b++) {
            std::vector<int> cs = {(int)rng.below(C)};
            for (int k = 1; k < 3; k++) {
                int q;
                do { q = (int)rng.below(C); } while (q == cs.back() || (C >= 3 && k == 2 && q == cs[0]));
                cs.push_back(q);
            }
            std::vector<int> seq = mixture_sequence(cp, true, cs, cuts, T, rng);
            mx.tokens.insert(mx.tokens.end(), seq.begin(), seq.begin() + T);
        }
        m.forward(mx);
        const std::vector<float> y = m.s.fetch_act(c.vae ? "y_used" : "yl");
        const std::vector<double> n = unit_rows(y, (size_t)B3 * T, dy);  // (B3,T,dy)
        const int bounds[4] = {0, cuts[0], cuts[1], T};
        LinePlot p = make_line_plot(title + ": y across two joins (3-text mixtures, mean of 16)", "position", "cos(n_t, mean n of part k)");
        std::vector<double> x;
        for (int t = 0; t < T; t++) x.push_back(t);
        for (int k = 0; k < 3; k++) {
            std::vector<double> cur(T, 0.0);
            for (int b = 0; b < B3; b++) {
                std::vector<double> mk(dy, 0.0);
                for (int t = bounds[k] + (bounds[k + 1] - bounds[k]) / 2; t < bounds[k + 1]; t++)  // the settled second half of part k
                    for (int i = 0; i < dy; i++) mk[i] += n[((size_t)b * T + t) * dy + i];
                double q = 0;
                for (double v : mk) q += v * v;
                q = std::sqrt(q) + 1e-12;
                for (int t = 0; t < T; t++) {
                    double d = 0;
                    for (int i = 0; i < dy; i++) d += n[((size_t)b * T + t) * dy + i] * mk[i] / q;
                    cur[t] += d / B3;
                }
            }
            p.series.push_back({"part " + std::to_string(k + 1), x, cur});
        }
        for (int k = 0; k < 2; k++) p.series.push_back({"", {(double)cuts[k], (double)cuts[k]}, {-1.0, 1.0}, false, true});
        save_line_plot(dir + "/text_transition.png", p);
        r.files.push_back(dir + "/text_transition.png");
        save_ndot_heatmap(dir + "/text_ndot.png",
                          title + ": <n_s . n_t>, 3-text mixtures (joins at " + std::to_string(cuts[0]) + ", " + std::to_string(cuts[1]) + ")", n, B3, T, dy);
        r.files.push_back(dir + "/text_ndot.png");
    }
    m.train_mode = tm;
    return r;
}

// ------------------------------------------------------------------------------------------------------
// y analyses

std::vector<double> y_spectrum(const std::vector<float>& y, int B, int T, int dy) {
    std::vector<double> acc(T / 2 + 1, 0.0), x(T);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < dy; i++) {
            double mu = 0;
            for (int t = 0; t < T; t++) mu += y[((size_t)b * T + t) * dy + i] / T;
            for (int t = 0; t < T; t++) x[t] = y[((size_t)b * T + t) * dy + i] - mu;
            std::vector<double> p = power_spectrum(x.data(), T);
            for (int k = 0; k <= T / 2; k++) acc[k] += p[k];
        }
    std::vector<double> s(acc.begin() + 1, acc.end());  // k = 1..T/2 (k = 0 is the removed mean)
    double sum = 0;
    for (double v : s) sum += v;
    if (sum > 0)
        for (double& v : s) v /= sum;
    return s;
}

YAnalysis write_y_analysis(CGT<float>& m, const Batch& bt, const std::string& dir, const std::string& title, const std::vector<int>& marks) {
    YAnalysis a;
    if (!m.cfg.has_y()) return a;
    const int B = bt.B, T = bt.T, dy = m.cfg.dy;
    const bool tm = m.train_mode;
    m.train_mode = false;
    m.forward(inputs_only(bt));
    m.train_mode = tm;
    const std::vector<float> y = m.s.fetch_act(m.cfg.vae ? "y_used" : "yl");
    // y^ℓ as .npy
    npy_save(dir + "/yl.npy", y.data(), {B, T, dy});
    a.files.push_back(dir + "/yl.npy");
    // ⟨n_s·n_t⟩ over the batch, n = y/‖y‖
    const std::vector<double> n = unit_rows(y, (size_t)B * T, dy);  // (B,T,dy)
    save_ndot_heatmap(dir + "/ndot.png", title + ": <n_s . n_t> (n = y/|y|, batch mean)", n, B, T, dy);
    a.files.push_back(dir + "/ndot.png");
    // traces of the first components of sequence 0
    LinePlot p = make_line_plot(title + ": y components (sequence 0)", "position", "y_i");
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < std::min(dy, 8); i++) {
        Series sr;
        sr.label = "y_" + std::to_string(i);
        for (int t = 0; t < T; t++) {
            const double v = y[(size_t)t * dy + i];
            sr.x.push_back(t);
            sr.y.push_back(v);
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
        p.series.push_back(sr);
    }
    for (int mk : marks) {
        Series sr;
        sr.x = {(double)mk, (double)mk};
        sr.y = {lo, hi};
        sr.dashed = true;
        p.series.push_back(sr);
    }
    save_line_plot(dir + "/ytrace.png", p);
    a.files.push_back(dir + "/ytrace.png");
    // DFT spectrum
    a.spectrum = y_spectrum(y, B, T, dy);
    LinePlot sp = make_line_plot(title + ": DFT spectrum of y (mean over components, sequences)", "frequency k (periods per sequence)", "normalized power", false, true);
    Series ss;
    ss.label = "|f_k|^2";
    ss.markers = true;
    for (size_t k = 0; k < a.spectrum.size(); k++) {
        ss.x.push_back((double)(k + 1));
        ss.y.push_back(a.spectrum[k]);
        if (a.peak_k == 0 || a.spectrum[k] > a.spectrum[a.peak_k - 1]) a.peak_k = (int)k + 1;
    }
    sp.series.push_back(ss);
    save_line_plot(dir + "/spectrum.png", sp);
    a.files.push_back(dir + "/spectrum.png");
    return a;
}

}  // namespace icl
