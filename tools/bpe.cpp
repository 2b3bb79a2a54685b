// bpe — train a byte-level BPE tokenizer on text files (src/data/bpe_tokenizer.h), or encode a file with one and report
// the compression and the round trip. The tokenizer file feeds `train_cgt/train_gpt --task mix --tokenizer`.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/fileio.h"
#include "data/bpe_tokenizer.h"
#include "engine/cli.h"
#include "engine/common.h"

using namespace icl;
namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path) {
    return read_file(path, kMaxTextFileBytes, "text file");  // no FIFO, bounded
}

// Files named on the command line; a directory stands for every regular file in it.
std::vector<std::string> inputs(const std::vector<std::string>& args) {
    std::vector<std::string> out;
    for (const std::string& a : args) {
        std::error_code ec;
        if (fs::is_directory(a, ec)) {
            std::vector<std::string> d;
            for (auto& e : fs::directory_iterator(a, ec))
                if (e.is_regular_file()) d.push_back(e.path().string());
            std::sort(d.begin(), d.end());
            out.insert(out.end(), d.begin(), d.end());
        } else {
            out.push_back(a);
        }
    }
    return out;
}

int run(int argc, char** argv) {
    Cli cli("bpe", "Train a byte-level BPE tokenizer on text files, or encode a file with one (round trip + compression).");
    cli.positionals("train FILE|DIR...  |  encode FILE|DIR...", 2, 1 << 20);
    cli.flag("--vocab", "8000", "train: vocabulary size (256 bytes + merges)");
    cli.flag("--out", "out/tokenizer.bpe", "train: where to write the tokenizer");
    cli.flag("--tokenizer", "out/tokenizer.bpe", "encode: the tokenizer file");
    cli.epilog(
        "examples:\n"
        "  bpe train out/fortunes --vocab 2000 --out out/fortunes-2k.bpe\n"
        "  bpe encode out/fortunes --tokenizer out/fortunes-2k.bpe\n"
        "  train_cgt --preset text-mini --data out/fortunes --tokenizer out/fortunes-2k.bpe");
    if (!cli.parse(argc, argv)) return 0;
    const std::string cmd = cli.args()[0];
    std::vector<std::string> files = inputs(std::vector<std::string>(cli.args().begin() + 1, cli.args().end()));
    std::string text;
    for (auto& f : files) text += read_all(f);
    if (cmd == "train") {
        const int V = (int)cli.get_int("--vocab", 256, 1 << 20);
        const double t0 = now_seconds();
        BPE t = BPE::train(text, V);
        t.save(cli.get("--out"));
        std::vector<int> ids = t.encode(text);
        std::printf("trained %d tokens (%zu merges) on %zu bytes from %zu files in %.1f s: %.2f bytes/token; wrote %s\n", t.size(),
                    t.merges().size(), text.size(), files.size(), now_seconds() - t0, (double)text.size() / std::max<size_t>(1, ids.size()),
                    cli.get("--out").c_str());
        std::printf("first merges:");
        for (size_t i = 0; i < std::min<size_t>(12, t.merges().size()); i++) {
            std::string s = t.token_bytes(256 + (int)i);
            for (auto& c : s) if (c == '\n') c = '~';
            std::printf(" '%s'", s.c_str());
        }
        std::printf("\n");
    } else if (cmd == "encode") {
        BPE t = BPE::load(cli.get("--tokenizer"));
        std::vector<int> ids = t.encode(text);
        const bool ok = t.decode(ids) == text;
        std::printf("%zu bytes -> %zu tokens (%.2f bytes/token, vocabulary %d); round trip %s\n", text.size(), ids.size(),
                    (double)text.size() / std::max<size_t>(1, ids.size()), t.size(), ok ? "exact" : "FAILED");
        if (!ok) return 1;
    } else {
        fail_usage("bpe: the first argument must be 'train' or 'encode', got '" + cmd + "'");
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
