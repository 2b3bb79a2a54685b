// attn_mod.cpp — the --attn-* flags and config JSON of the attention modifications. See attn_mod.h.
#include "models/attn_mod.h"

#include <cmath>
#include <initializer_list>

#include "engine/common.h"

namespace icl {

void add_attn_mod_flags(Cli& cli) {
    cli.flag("--attn-mod", "none",
             "attention modification (spec/duallens.md §4): none | regularized (O = PV - alpha V) | augmented (parallel adapters on "
             "values/keys) | negative (values minus beta x the mean of neighbour values)");
    cli.flag("--attn-alpha", "", "regularized: alpha (default 0.1); negative: optional extra -alpha V (default 0)");
    cli.flag("--attn-beta", "0.5", "negative: beta");
    cli.flag("--attn-neighbors", "lowsim", "negative: neighbour rule all | lowsim (k least similar) | random (k random), visible tokens only");
    cli.flag("--attn-k", "3", "negative lowsim/random: neighbours per token");
    cli.flag("--attn-sim", "input", "negative lowsim: similarity input (the block's LN output x_i.x_j) | key (k_i.k_j) | score (q_i.k_j)");
    cli.flag("--attn-adapter", "both", "augmented: g1 (values) | g2 (keys) | both");
    cli.flag("--attn-c", "1", "augmented: adapter scale c (0 = plain attention)");
    cli.flag("--attn-dh", "16", "augmented: adapter hidden width");
}

const std::vector<const char*>& attn_mod_flag_names() {
    static const std::vector<const char*> names = {"--attn-mod", "--attn-alpha", "--attn-beta", "--attn-neighbors", "--attn-k",
                                                   "--attn-sim", "--attn-adapter", "--attn-c", "--attn-dh"};
    return names;
}

static NegRule parse_rule(const std::string& s) {
    if (s == "all") return NegRule::all;
    if (s == "lowsim") return NegRule::lowsim;
    if (s == "random") return NegRule::random;
    fail_usage("--attn-neighbors: expected all, lowsim or random, got '" + s + "'");
}
static NegSim parse_sim(const std::string& s) {
    if (s == "input") return NegSim::input;
    if (s == "key") return NegSim::key;
    if (s == "score") return NegSim::score;
    fail_usage("--attn-sim: expected input, key or score, got '" + s + "'");
}

AttnMods attn_mods_from_cli(const Cli& cli) {
    const std::string kind = cli.get_choice("--attn-mod", {"none", "regularized", "augmented", "negative"});
    // flags that belong to another modification are refused
    auto only = [&](const char* flag, std::initializer_list<const char*> kinds) {
        if (!cli.given(flag)) return;
        for (const char* k : kinds) if (kind == k) return;
        std::string list;
        for (const char* k : kinds) list += (list.empty() ? "" : " or ") + std::string(k);
        fail_usage(std::string(flag) + ": only with --attn-mod " + list + " (got --attn-mod " + kind + ")");
    };
    only("--attn-alpha", {"regularized", "negative"});
    only("--attn-beta", {"negative"});
    only("--attn-neighbors", {"negative"});
    only("--attn-k", {"negative"});
    only("--attn-sim", {"negative"});
    only("--attn-adapter", {"augmented"});
    only("--attn-c", {"augmented"});
    only("--attn-dh", {"augmented"});
    AttnMods m;
    if (kind == "regularized") {
        m.alpha = cli.has_value("--attn-alpha") ? cli.get_double("--attn-alpha", -1e6, 1e6) : 0.1;
    } else if (kind == "negative") {
        m.alpha = cli.has_value("--attn-alpha") ? cli.get_double("--attn-alpha", -1e6, 1e6) : 0.0;
        m.beta = cli.get_double("--attn-beta", -1e6, 1e6);
        m.rule = parse_rule(cli.get("--attn-neighbors"));
        m.k = (int)cli.get_int("--attn-k", 1, 64);
        m.sim = parse_sim(cli.get("--attn-sim"));
    } else if (kind == "augmented") {
        const std::string g = cli.get_choice("--attn-adapter", {"g1", "g2", "both"});
        m.g1 = g != "g2";
        m.g2 = g != "g1";
        m.c = cli.get_double("--attn-c", -1e6, 1e6);
        m.dh = (int)cli.get_int("--attn-dh", 1, 1 << 16);
    }
    attn_mods_validate(m);
    return m;
}

bool attn_mods_configured(const AttnMods& m) { return m.alpha != 0 || m.beta != 0 || m.g1 || m.g2; }

nlohmann::json attn_mods_to_json(const AttnMods& m) {
    nlohmann::json j = {{"alpha", m.alpha}, {"beta", m.beta}};
    if (m.beta != 0) {
        j["neighbors"] = neg_rule_name(m.rule);
        j["k"] = m.k;
        j["sim"] = neg_sim_name(m.sim);
    }
    if (m.g1 || m.g2) {
        j["g1"] = m.g1;
        j["g2"] = m.g2;
        j["c"] = m.c;
        j["dh"] = m.dh;
    }
    return j;
}

AttnMods attn_mods_from_json(const nlohmann::json& j) {
    if (!j.is_object()) fail("config: 'attn_mod' is not an object");
    AttnMods m;
    auto num = [&](const char* k, double& dst) {
        if (!j.contains(k)) return;
        if (!j[k].is_number()) fail(std::string("config: attn_mod.") + k + " is not a number");
        dst = j[k].get<double>();
    };
    auto integer = [&](const char* k, int& dst) {
        if (!j.contains(k)) return;
        if (!j[k].is_number_integer()) fail(std::string("config: attn_mod.") + k + " is not an integer");
        dst = j[k].get<int>();
    };
    auto flag = [&](const char* k, bool& dst) {
        if (!j.contains(k)) return;
        if (!j[k].is_boolean()) fail(std::string("config: attn_mod.") + k + " is not a boolean");
        dst = j[k].get<bool>();
    };
    auto text = [&](const char* k) -> std::string {
        if (!j.contains(k)) return "";
        if (!j[k].is_string()) fail(std::string("config: attn_mod.") + k + " is not a string");
        return j[k].get<std::string>();
    };
    num("alpha", m.alpha);
    num("beta", m.beta);
    integer("k", m.k);
    num("c", m.c);
    integer("dh", m.dh);
    flag("g1", m.g1);
    flag("g2", m.g2);
    const std::string r = text("neighbors"), s = text("sim");
    if (!r.empty()) m.rule = parse_rule(r);
    if (!s.empty()) m.sim = parse_sim(s);
    attn_mods_validate(m);
    return m;
}

void attn_mods_validate(const AttnMods& m) {
    if (!std::isfinite(m.alpha) || !std::isfinite(m.beta) || !std::isfinite(m.c)) fail_usage("--attn-alpha/--attn-beta/--attn-c: must be finite");
    if (m.k < 1 || m.k > 64) fail_usage(strfmt("--attn-k: must be in [1, 64], got %d", m.k));
    if ((m.g1 || m.g2) && m.dh < 1) fail_usage(strfmt("--attn-dh: must be >= 1, got %d", m.dh));
}

std::string attn_mods_describe(const AttnMods& m) {
    std::string s;
    auto add = [&](const std::string& x) { s += (s.empty() ? "" : " + ") + x; };
    if (m.beta != 0) {
        std::string rule = m.rule == NegRule::all ? "all" : strfmt("%s-%d", neg_rule_name(m.rule), m.k);
        if (m.rule == NegRule::lowsim) rule += strfmt("(%s)", neg_sim_name(m.sim));
        add(strfmt("negative %s b=%g", rule.c_str(), m.beta));
    }
    if (m.alpha != 0) add(strfmt("regularized a=%g", m.alpha));
    if (m.g1 || m.g2) add(strfmt("augmented %s c=%g dh=%d", m.g1 && m.g2 ? "g1+g2" : m.g1 ? "g1" : "g2", m.c, m.dh));
    return s.empty() ? "plain" : s;
}

}  // namespace icl
