#!/usr/bin/env python3
"""tools/tolerance_report.py — reads doctest's XML stream of every assertion (tools/tolerance_report.sh runs the
suite with --success against a doctest that prints 17 digits) and writes, per comparison site, the tolerance it
applied beside the worst error it measured. Usage: tolerance_report.py XML --out FILE [--threads N] [--build DIR]"""
import argparse, datetime, io, math, os, re, subprocess, sys
import xml.etree.ElementTree as ET

NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf|nan)"
APPROX = re.compile(r"^(%s) (==|!=) Approx\( (%s) \)\.epsilon\( (%s) \)\.scale\( (%s) \)$" % (NUM, NUM, NUM, NUM))
APPROX_L = re.compile(r"^Approx\( (%s) \)\.epsilon\( (%s) \)\.scale\( (%s) \) (==|!=) (%s)$" % (NUM, NUM, NUM, NUM))
INT = re.compile(r"^[-+]?\d+$")
CMP = re.compile(r"^(%s)\s+(<=|<|>=|>)\s+(%s)$" % (NUM, NUM))


class Site:
    def __init__(self, key, original):
        self.key, self.original = key, original
        self.n = 0            # evaluations
        self.kind = None      # 'approx', 'upper', 'lower'
        self.ratio = -1.0     # worst measured / tolerance (upper, approx); worst tolerance / value (lower)
        self.measured = self.tol = float("nan")
        self.failed = 0

    def add(self, kind, measured, tol, ok):
        self.n += 1
        self.kind = self.kind or kind
        if not ok: self.failed += 1
        if kind == "lower":      # x >= t: the margin is t / x (1 = at the bound)
            r = tol / measured if measured > 0 else (math.inf if tol > 0 else 0.0)
        else:
            r = measured / tol if tol > 0 else (0.0 if measured == 0 else math.inf)
        if r > self.ratio:
            self.ratio, self.measured, self.tol = r, measured, tol


def parse(path):
    sites, case, total = {}, "", 0
    # Some assertions expand binary strings (a tokenizer's bytes): keep the XML parseable.
    text = open(path, "rb").read().decode("utf-8", "replace")
    text = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]", "?", text)
    for ev, el in ET.iterparse(io.BytesIO(text.encode("utf-8")), events=("start", "end")):
        if ev == "start" and el.tag == "TestCase":
            case = el.get("name", "")
        if ev != "end" or el.tag != "Expression":
            if ev == "end" and el.tag == "TestCase": el.clear()
            continue
        total += 1
        orig = (el.findtext("Original") or "").strip()
        exp = (el.findtext("Expanded") or "").strip()
        ok = el.get("success") == "true"
        key = (el.get("filename", "?"), int(el.get("line", "0")), case, orig)
        el.clear()
        m = APPROX.match(exp)
        if m:
            a, op, b, e, s = float(m.group(1)), m.group(2), float(m.group(3)), float(m.group(4)), float(m.group(5))
        else:
            m = APPROX_L.match(exp)
            if m:
                b, e, s, op, a = float(m.group(1)), float(m.group(2)), float(m.group(3)), m.group(4), float(m.group(5))
        if m:
            if op == "!=": continue
            site = sites.setdefault(key, Site(key, orig))
            site.add("approx", abs(a - b), e * (s + max(abs(a), abs(b))), ok)
            continue
        m = CMP.match(exp)
        if m:
            if INT.match(m.group(1)) and INT.match(m.group(3)): continue  # a size or a count, not a tolerance
            x, op, t = float(m.group(1)), m.group(2), float(m.group(3))
            site = sites.setdefault(key, Site(key, orig))
            if op in ("<=", "<"): site.add("upper", x, t, ok)
            else: site.add("lower", x, t, ok)
    return sites, total


def fmt(v):
    if v != v: return "—"
    if v == math.inf: return "∞"
    if v == 0: return "0"
    return "%.2g" % v


def sh(cmd):
    try: return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception: return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("xml")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--build", default="build")
    ap.add_argument("--isa", default="", help="the vector ISA the build compiled for (default: the CPU's widest)")
    args = ap.parse_args()
    sites, total = parse(args.xml)
    cpu = (sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-") or "unknown CPU").strip()
    fam, mod = sh("grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2-"), sh("grep -m1 '^model\\s*:' /proc/cpuinfo | cut -d: -f2-")
    if fam and mod: cpu += " (family %s, model %s)" % (fam.strip(), mod.strip())
    isa = args.isa or ("AVX-512" if "avx512f" in sh("grep -m1 flags /proc/cpuinfo") else "AVX2")
    commit = sh("git rev-parse --short HEAD") + (" (dirty tree)" if sh("git status --porcelain -uno") else "")
    rows = sorted(sites.values(), key=lambda s: (s.key[0], s.key[1], s.key[2]))
    up = [s for s in rows if s.kind in ("upper", "approx")]
    loose = [s for s in up if s.ratio < 1e-3]
    zero = [s for s in up if s.measured == 0]
    failed = [s for s in rows if s.failed]
    lines = []
    w = lines.append
    w("# Tolerances of the CPU test suite beside the errors they measured")
    w("")
    w("Generated by `tools/tolerance_report.sh` (do not edit): the suite run with `--success` against a doctest that "
      "prints 17 digits, every comparison site's worst value kept. Measured on %s (%s path of the build in %s/), "
      "commit %s, %s threads, %s." % (cpu.strip(), isa, args.build, commit, args.threads,
                                               datetime.date.today().isoformat()))
    w("")
    w("- `a == Approx(b)`: measured |a − b|, tolerance doctest's ε·(scale + max(|a|, |b|)) — with the default "
      "scale 1 that is an **absolute** ε below 1, which is why the code states `.scale(0)` where it means relative.")
    w("- `x <= t`: measured x (an error, a residual, a distance), tolerance t.  `x >= t` (a lower bound, e.g. a "
      "signal that must be present): the margin t / x, listed apart.")
    w("- ratio = measured / tolerance at the site's worst evaluation (1 = at the limit). A tolerance that is a "
      "rounding *bound* of the operations involved (e.g. fp64 at 1e-13 for a few hundred operations) is expected to "
      "sit far above what one machine measures; the comment at the site says which bound.")
    w("- The convention of the test files (stated at the top of each): fp64 checks at 1e-12 … 1e-15 are rounding "
      "bounds of the operations compared; fp32 checks at 1e-5 … 1e-6 are fp32 rounding bounds (u = 6e-8 over the "
      "sums involved); every other tolerance says beside it the error it was measured at or the bound it comes from.")
    w("- tests/test_cuda.cpp's sites are not here: they need a GPU (their tolerances are bounds, explained in that "
      "file, and unmeasured until a GPU runs them). Checks that accumulate a boolean over a loop are not seen either.")
    w("")
    w("%d assertions read; %d comparison sites (%d upper bounds and approximations, %d lower bounds); "
      "%d with a tolerance more than 1000× the worst measured value (below, first); %d measured exactly 0; "
      "%d sites with a failed evaluation." % (total, len(rows), len(up), len(rows) - len(up), len(loose),
                                             len(zero), len(failed)))
    w("")

    def table(title, rs, lower=False):
        w("## " + title)
        w("")
        if not rs:
            w("(none)")
            w("")
            return
        w("| site | test case | check | n | %s | %s | %s |" % (("value", "bound", "bound / value") if lower
                                                         else ("worst measured", "tolerance", "ratio")))
        w("|---|---|---|---|---|---|---|")
        for s in rs:
            chk = s.original.replace("|", "\\|")
            if len(chk) > 90: chk = chk[:87] + "…"
            w("| %s:%d | %s | `%s` | %d | %s | %s | %s%s |" % (s.key[0].replace("tests/", ""), s.key[1],
                                                          s.key[2].replace("|", "\\|")[:60], chk, s.n,
                                                          fmt(s.measured), fmt(s.tol), fmt(s.ratio),
                                                          " **failed**" if s.failed else ""))
        w("")

    table("Tolerances more than 1000× the worst measured value", loose)
    table("Every upper bound and approximation", up)
    table("Lower bounds (a quantity that must exceed a threshold)", [s for s in rows if s.kind == "lower"], True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f: f.write("\n".join(lines) + "\n")
    os.replace(tmp, args.out)
    print("%d sites, %d loose (> 1000×), %d failed" % (len(rows), len(loose), len(failed)), file=sys.stderr)


if __name__ == "__main__":
    main()
