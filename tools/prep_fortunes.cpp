// prep_fortunes — build a categorized text corpus for the CGT text-mixture experiments (spec/cgt.md §4.3)
// from the Debian fortune packages (apt-get install fortunes fortunes-de fortunes-it fortunes-es).
//
// Each category gathers one or more fortune files; the output is one file per category, OUT/<name>.txt,
// documents separated by lines holding only '%' — the format `train_cgt --task mix --data OUT` reads.
// Cleaning: overstrike sequences ("c\bc", bold/underline in old fortune files) are removed, bytes that are
// not valid UTF-8 are read as Latin-1, tabs become spaces, trailing spaces go, and documents shorter than
// --min-bytes, longer than --max-bytes or less than half letters (ASCII art) are dropped.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/fileio.h"
#include "engine/cli.h"
#include "engine/common.h"
#include "engine/run.h"

using namespace icl;
namespace fs = std::filesystem;

namespace {

const char* kDefaultCategories =
    "computers=computers+linux+perl;science=science+medicine;love=love+men-women;politics=politics+law;"
    "literature=literature+songs-poems;deutsch=de/*;italiano=it/*;espanol=es/*";

// Valid UTF-8 stays; any other byte is taken as Latin-1 and re-encoded.
std::string to_utf8(const std::string& s) {
    std::string o;
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = s[i];
        int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0 && i + n <= s.size();
        for (int k = 1; ok && k < n; k++) ok = ((unsigned char)s[i + k] >> 6) == 2;
        if (ok) {
            o.append(s, i, n);
            i += n;
        } else {
            o += (char)(0xC0 | (c >> 6));
            o += (char)(0x80 | (c & 0x3F));
            i++;
        }
    }
    return o;
}

std::string clean(const std::string& doc) {
    std::string a;
    for (char ch : doc) {
        if (ch == '\b') { if (!a.empty()) a.pop_back(); continue; }  // "c\bc": drop the overstruck char
        if (ch == '\t') ch = ' ';
        if (ch == '\r') continue;
        a += ch;
    }
    std::string o, line;
    std::stringstream ss(a);
    while (std::getline(ss, line)) {
        while (!line.empty() && line.back() == ' ') line.pop_back();
        o += line + "\n";
    }
    while (!o.empty() && o.back() == '\n') o.pop_back();
    while (!o.empty() && o.front() == '\n') o.erase(o.begin());
    return to_utf8(o);
}

double letter_fraction(const std::string& s) {
    size_t letters = 0, visible = 0;
    for (unsigned char c : s) {
        if (c == ' ' || c == '\n') continue;
        visible++;
        letters += (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 128;
    }
    return visible ? (double)letters / visible : 0.0;
}

std::vector<std::string> read_fortunes(const std::string& path) {
    std::istringstream f(read_file(path, kMaxTextFileBytes, "fortune file"));  // no FIFO, bounded
    std::vector<std::string> docs;
    std::string line, cur;
    while (std::getline(f, line)) {
        if (line == "%" || line == "%\r") { docs.push_back(cur); cur.clear(); continue; }
        cur += line + "\n";
    }
    docs.push_back(cur);
    return docs;
}

// "de/*" → every fortune file in SRC/de (no .dat, .u8, subdirectories); "computers" → SRC/computers.
std::vector<std::string> expand(const std::string& src, const std::string& item) {
    std::vector<std::string> out;
    if (item.size() >= 2 && item.substr(item.size() - 2) == "/*") {
        const std::string dir = src + "/" + item.substr(0, item.size() - 2);
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) fail("'" + dir + "' is not a directory (is the fortune package for it installed?)");
        for (auto& e : fs::directory_iterator(dir, ec)) {
            const std::string n = e.path().filename().string();
            if (!e.is_regular_file() || e.is_symlink()) continue;
            if (n.size() > 4 && (n.substr(n.size() - 4) == ".dat" || n.substr(n.size() - 3) == ".u8")) continue;
            if (n.find(".dat") != std::string::npos || n.find("-pre") != std::string::npos) continue;
            out.push_back(e.path().string());
        }
        std::sort(out.begin(), out.end());
    } else {
        out.push_back(src + "/" + item);
    }
    return out;
}

int run(int argc, char** argv) {
    Cli cli("prep_fortunes", "Build a categorized corpus (one file per category, documents separated by '%' lines) from the Debian fortune packages.");
    cli.flag("--src", "/usr/share/games/fortunes", "where the fortune files are (apt-get install fortunes fortunes-de fortunes-it fortunes-es)");
    cli.flag("--out", "out/fortunes", "output directory: OUT/<category>.txt");
    cli.flag("--categories", kDefaultCategories, "name=file+file+dir/*;… (files relative to --src; dir/* = every fortune file in it)");
    cli.flag("--min-bytes", "40", "drop documents shorter than this");
    cli.flag("--max-bytes", "1500", "drop documents longer than this");
    cli.epilog(
        "examples:\n"
        "  apt-get install fortunes fortunes-de fortunes-it fortunes-es\n"
        "  prep_fortunes                                  # the 8 default categories into out/fortunes/\n"
        "  train_cgt --preset text-mini --data out/fortunes");
    if (!cli.parse(argc, argv)) return 0;
    const std::string src = cli.get("--src"), out = cli.get("--out");
    const int64_t lo = cli.get_int("--min-bytes", 0), hi = cli.get_int("--max-bytes", 1);
    std::error_code ec;
    if (!fs::is_directory(src, ec))
        fail("--src: '" + src + "' does not exist; install the corpus with: apt-get install fortunes fortunes-de fortunes-it fortunes-es");
    make_dirs(out);
    std::stringstream spec(cli.get("--categories"));
    std::string entry;
    int ncat = 0;
    while (std::getline(spec, entry, ';')) {
        if (entry.empty()) continue;
        const size_t eq = entry.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size())
            fail_usage("--categories: '" + entry + "' is not name=file+file");
        const std::string name = entry.substr(0, eq);
        std::stringstream items(entry.substr(eq + 1));
        std::string item, text;
        size_t kept = 0, dropped = 0, bytes = 0;
        while (std::getline(items, item, '+'))
            for (const std::string& path : expand(src, item))
                for (const std::string& raw : read_fortunes(path)) {
                    const std::string d = clean(raw);
                    if ((int64_t)d.size() < lo || (int64_t)d.size() > hi || letter_fraction(d) < 0.5) { dropped++; continue; }
                    text += (kept ? "%\n" : "") + d + "\n";
                    kept++;
                    bytes += d.size();
                }
        if (kept == 0) fail("--categories: category '" + name + "' has no document left");
        write_file_atomic(out + "/" + name + ".txt", text);
        std::printf("%-12s %6zu documents, %8zu bytes (%zu dropped)  -> %s/%s.txt\n", name.c_str(), kept, bytes, dropped, out.c_str(), name.c_str());
        ncat++;
    }
    std::printf("wrote %d categories to %s/\n", ncat, out.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
