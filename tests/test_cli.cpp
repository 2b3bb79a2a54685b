// Tests of the shared command-line parser (src/engine/cli.h).
#include <doctest/doctest.h>

#include "engine/cli.h"
#include "engine/common.h"
#include "engine/device.h"

using namespace icl;

namespace {
Cli make_cli() {
    Cli c("prog", "test program");
    add_common_flags(c, {});
    c.flag("--layers", "4", "blocks");
    c.flag("--ratio", "0.5", "a ratio");
    c.flag("--list", "", "ints");
    c.flag_switch("--fold", "a switch");
    c.preset("small", "small model", {{"--layers", "2"}, {"--steps", "10"}});
    return c;
}
// The exit code and message of a usage error.
std::pair<int, std::string> usage_error(Cli& c, std::vector<std::string> args, const char* flag_to_read = nullptr) {
    try {
        c.parse(args);
        if (flag_to_read) (void)c.get_int(flag_to_read, 1, 100);
    } catch (const Error& e) {
        return {e.exit_code, e.what()};
    }
    return {0, ""};
}
}  // namespace

TEST_SUITE("cli") {
TEST_CASE("defaults, explicit values, presets, switches") {
    Cli c = make_cli();
    REQUIRE(c.parse(std::vector<std::string>{}));
    CHECK(c.get_int("--layers") == 4);
    CHECK(c.get_double("--ratio") == 0.5);  // parsed from "0.5": exact
    CHECK_FALSE(c.get_bool("--fold"));
    CHECK_FALSE(c.given("--layers"));

    Cli d = make_cli();
    REQUIRE(d.parse(std::vector<std::string>{"--preset", "small", "--steps=99", "--fold", "--ratio", "0.25", "--list", "1,2,3"}));
    CHECK(d.get_int("--layers") == 2);   // from the preset
    CHECK(d.get_int("--steps") == 99);   // the command line wins over the preset
    CHECK(d.get_bool("--fold"));
    CHECK(d.get_double("--ratio") == 0.25);
    CHECK(d.get_int_list("--list") == std::vector<int64_t>{1, 2, 3});
    CHECK(d.preset_name() == "small");
    CHECK(d.values().at("--layers") == "2");
}

TEST_CASE("per_seed_args: --seed, --seeds and --out replaced in both spellings, the rest kept in order") {
    const std::vector<std::string> args = {"--preset", "small", "--seed=3", "--seeds", "2", "--out", "o", "--steps", "5", "--out=p"};
    const auto a = per_seed_args(args, 3, 2, "top");
    REQUIRE(a.size() == 2);
    CHECK(a[0] == std::vector<std::string>{"--preset", "small", "--steps", "5", "--seed", "3", "--out", "top/seed1"});
    CHECK(a[1] == std::vector<std::string>{"--preset", "small", "--steps", "5", "--seed", "4", "--out", "top/seed2"});
    // each parses back: the seed and folder given, everything else as before
    Cli c = make_cli();
    c.flag("--seeds", "1", "runs");
    REQUIRE(c.parse(a[1]));
    CHECK(c.get_seed() == 4);
    CHECK(c.get("--out") == "top/seed2");
    CHECK(c.get_int("--steps") == 5);
    CHECK(c.get_int("--layers") == 2);  // the preset's
}

TEST_CASE("bad input is one line naming the flag, exit code 2") {
    struct Case { std::vector<std::string> args; const char* read; const char* needle; };
    std::vector<Case> cases = {
        {{"--nope"}, nullptr, "unknown flag '--nope'"},
        {{"--layers"}, nullptr, "--layers needs a value"},
        {{"--layers", "abc"}, "--layers", "--layers: expected an integer, got 'abc'"},
        {{"--layers", "2.5"}, "--layers", "--layers: expected an integer"},
        {{"--layers", "0"}, "--layers", "--layers: must be in [1, 100], got 0"},
        {{"--layers", "1000"}, "--layers", "--layers: must be in [1, 100]"},
        {{"--preset", "huge"}, nullptr, "--preset: unknown preset 'huge' (choose from: small)"},
        {{"--layers", "3", "--layers", "4"}, nullptr, "--layers given twice"},
        {{"stray"}, nullptr, "unexpected argument 'stray'"},
        {{"--fold=maybe"}, nullptr, "--fold: expected no value"},
        {{"-x"}, nullptr, "unknown option '-x'"},
        // user text is quoted on one line: control bytes escaped, long values cut
        {{"--layers", "1\nerror: forged"}, "--layers", "--layers: expected an integer, got '1\\x0aerror: forged'"},
        {{"--layers", std::string(100, 'a')}, "--layers", "got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'"},
    };
    for (auto& k : cases) {
        Cli c = make_cli();
        auto [code, msg] = usage_error(c, k.args, k.read);
        CAPTURE(msg);
        CHECK(code == 2);
        CHECK(msg.find(k.needle) != std::string::npos);
        CHECK(msg.find('\n') == std::string::npos);
    }
    Cli c = make_cli();
    c.parse(std::vector<std::string>{"--ratio", "nan"});
    CHECK_THROWS_WITH_AS(c.get_double("--ratio"), "--ratio: expected a number, got 'nan'", Error);
    c.parse(std::vector<std::string>{"--device", "tpu"});
    CHECK_THROWS_WITH_AS(parse_device(c.get("--device")), "--device: expected cpu or cuda, got 'tpu'", Error);
    c.parse(std::vector<std::string>{"--list", "1,x"});
    CHECK_THROWS_AS(c.get_int_list("--list"), Error);
}

TEST_CASE("--help lists every flag with its default and the presets") {
    Cli c = make_cli();
    std::string h = c.help_text();
    for (const char* f : {"--device", "--threads", "--seed", "--steps", "--batch", "--lr", "--out", "--dump-npy", "--load", "--save",
                          "--layers", "--ratio", "--fold", "--help"})
        CHECK(h.find(f) != std::string::npos);
    CHECK(h.find("(default: 4)") != std::string::npos);
    CHECK(h.find("small: small model") != std::string::npos);
    CHECK_FALSE(c.parse(std::vector<std::string>{"--help"}));
}
}
