// attn_mod.h — the attention modifications of spec/duallens.md §4 (src/layers/attention_mods.h) as a model
// option: the --attn-* flags every binary that builds blocks shares, and their config JSON (checkpoints).
//
//   --attn-mod none | regularized | augmented | negative
//   --attn-alpha A        regularized (and optionally negative): O = P V − α V
//   --attn-beta B         negative: ṽ_i = v_i − β·mean_{j∈N(i)} v_j
//   --attn-neighbors R    negative: all | lowsim | random          --attn-k K   (lowsim, random)
//   --attn-sim S          negative lowsim: input | key | score
//   --attn-adapter G      augmented: g1 (values) | g2 (keys) | both   --attn-c C   --attn-dh DH
//
// A flag that belongs to another modification than --attn-mod is refused (exit 2), so a typo never silently
// trains the plain model. The JSON is written into a model's config only when a modification is configured,
// so plain checkpoints keep their exact config.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/cli.h"
#include "layers/attention_mods.h"

namespace icl {

void add_attn_mod_flags(Cli& cli);
AttnMods attn_mods_from_cli(const Cli& cli);
// The --attn-* flags (for the "architecture comes from --load" check).
const std::vector<const char*>& attn_mod_flag_names();

// Adapter parameters exist (g1 or g2 set, whatever c is) or the attention differs from plain.
bool attn_mods_configured(const AttnMods& m);
nlohmann::json attn_mods_to_json(const AttnMods& m);
AttnMods attn_mods_from_json(const nlohmann::json& j);  // refuses bad fields with one line
void attn_mods_validate(const AttnMods& m);              // usage errors for impossible values
std::string attn_mods_describe(const AttnMods& m);       // "regularized a=0.1", "negative lowsim-3(input) b=0.5", ...

}  // namespace icl
