// csv.cpp — the CSV reader of report/plot.h (log.csv files read back by tools/plotlog and the experiments).
#include "report/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

#include "engine/common.h"
#include "engine/fileio.h"

namespace icl {

// ------------------------------------------------------------------------------------------------------
// 7. CSV

int CsvTable::find(const std::string& name) const {
    for (size_t i = 0; i < header.size(); i++)
        if (header[i] == name) return (int)i;
    return -1;
}

const std::vector<double>& CsvTable::col(const std::string& name) const {
    int i = find(name);
    if (i < 0) fail(strfmt("CSV has no column '%s'", name.c_str()));
    return cols[(size_t)i];
}

namespace {

std::string trim(const std::string& s) {
    size_t a = 0, b = s.size();
    while (a < b && (s[a] == ' ' || s[a] == '\t')) a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
    return s.substr(a, b - a);
}

// Split one CSV line; fields may be "quoted" with "" for a literal quote.
std::vector<std::string> split_csv_line(const std::string& line, const std::string& where) {
    std::vector<std::string> out;
    std::string cur;
    size_t i = 0;
    for (;;) {
        cur.clear();
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i < line.size() && line[i] == '"') {
            i++;
            for (;;) {
                if (i >= line.size()) fail(where + ": unterminated quoted field");
                if (line[i] == '"') {
                    if (i + 1 < line.size() && line[i + 1] == '"') cur += '"', i += 2;
                    else {
                        i++;
                        break;
                    }
                } else {
                    cur += line[i++];
                }
            }
            while (i < line.size() && line[i] != ',') {
                if (line[i] != ' ' && line[i] != '\t') fail(where + ": text after a closing quote");
                i++;
            }
            out.push_back(cur);
        } else {
            while (i < line.size() && line[i] != ',') cur += line[i++];
            out.push_back(trim(cur));
        }
        if (i >= line.size()) break;
        i++;  // the comma
    }
    return out;
}

}  // namespace

CsvTable read_csv(const std::string& path) {
    std::istringstream in(read_file(path, kMaxTextFileBytes, "CSV file"));
    CsvTable t;
    std::string line;
    size_t lineno = 0;
    bool have_header = false;
    while (std::getline(in, line)) {
        lineno++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (lineno == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // UTF-8 BOM
        if (trim(line).empty() || line[0] == '#') continue;  // blank lines and comments (the provenance line)
        const std::string where = strfmt("%s:%zu", path.c_str(), lineno);
        std::vector<std::string> cells = split_csv_line(line, where);
        if (!have_header) {
            for (size_t c = 0; c < cells.size(); c++) {
                if (cells[c].empty()) fail(strfmt("%s: empty column name (column %zu)", where.c_str(), c + 1));
                for (size_t d = 0; d < c; d++)
                    if (cells[d] == cells[c]) fail(strfmt("%s: duplicate column name '%s'", where.c_str(), cells[c].c_str()));
            }
            t.header = cells;
            t.cols.assign(cells.size(), {});
            t.text_cells.assign(cells.size(), 0);
            have_header = true;
            continue;
        }
        if (cells.size() != t.header.size())
            fail(strfmt("%s: row has %zu cells but the header has %zu columns", where.c_str(), cells.size(),
                        t.header.size()));
        for (size_t c = 0; c < cells.size(); c++) {
            const std::string& s = cells[c];
            double v = NAN;
            if (!s.empty()) {
                char* end = nullptr;
                double d = std::strtod(s.c_str(), &end);
                if (end == s.c_str() + s.size()) v = d;
                else t.text_cells[c]++;
            }
            t.cols[c].push_back(v);
        }
    }
    if (!have_header) fail(strfmt("CSV file '%s' is empty (no header row)", path.c_str()));
    return t;
}

}  // namespace icl
