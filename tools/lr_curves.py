#!/usr/bin/env python3
"""tools/lr_curves.py — the seed-mean error curves of a linear-regression sweep (tools/sweep.cpp over train_cgt
--task linreg, e.g. the cgt-lr-ell and cgt-lr-dims presets) as one plot: for every cell of the sweep, the dynamic
curve and the curve frozen after --frozen samples, averaged over the cell's seeds, plus the Bayes (ridge) curve of
the first cell's evaluation sequences. Reads each run's summary.json ("eval": dynamic, frozen, bayes); writes
OUT.csv beside OUT.png and draws it with plotlog.

usage: tools/lr_curves.py SWEEP_DIR --out FILE.png [--frozen K] [--title T] [--plotlog PATH]
example: tools/lr_curves.py out/sweep/cgt-lr-dims --out docs/cgt/sweep_lr_dims_curves.png --frozen 8"""
import argparse, glob, json, os, re, subprocess, sys


def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("usage: ")[1].split("\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--out", required=True)
    ap.add_argument("--frozen", default="8", help="the frozen curve's k0 (default 8)")
    ap.add_argument("--title", default="")
    ap.add_argument("--plotlog", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "plotlog"))
    a = ap.parse_args()
    natural = lambda d: [float(t) if re.fullmatch(r"[0-9.]+", t) else t for t in re.split(r"([0-9][0-9.]*)", d)]
    cells = sorted((d for d in os.listdir(a.sweep) if os.path.isdir(os.path.join(a.sweep, d))), key=natural)
    if not cells:
        sys.exit("error: %s holds no sweep cells" % a.sweep)
    cols, names, n = {}, [], None
    for c in cells:
        evals = []
        for sd in sorted(glob.glob(os.path.join(a.sweep, c, "seed*/"))):
            if len(glob.glob(os.path.join(sd, "*", "summary.json"))) > 1:
                sys.exit("error: %s holds several runs (a --compare of several variants): one curve per seed is expected" % sd)
        for p in sorted(glob.glob(os.path.join(a.sweep, c, "seed*", "*", "summary.json"))):
            e = json.load(open(p)).get("eval") or {}
            if "dynamic" not in e or "bayes" not in e:
                sys.exit("error: %s has no linear-regression evaluation" % p)
            if a.frozen not in e.get("frozen", {}):
                sys.exit("error: %s has no curve frozen after %s (--frozen)" % (p, a.frozen))
            evals.append(e)
        if not evals:
            sys.exit("error: cell %s has no finished run" % c)
        lens = {len(e["dynamic"]) for e in evals} | {len(e["bayes"]) for e in evals} | {len(e["frozen"][a.frozen]) for e in evals}
        if len(lens) != 1 or (n is not None and lens != {n}):
            sys.exit("error: the curves of %s do not all have one length (%s)" % (c, sorted(lens)))
        n = lens.pop()

        def mean(key, k, sub=None):
            vals = [(e[key][sub] if sub else e[key])[k] for e in evals]
            return None if any(v is None for v in vals) else sum(vals) / len(vals)
        for label, key, sub in (("frozen%s" % a.frozen, "frozen", a.frozen), ("dynamic", "dynamic", None)):
            name = "%s %s (%d seeds)" % (c, label, len(evals))
            cols[name] = [mean(key, k, sub) for k in range(n)]
            names.append(name)
        if "bayes" not in cols:
            cols["bayes"] = [mean("bayes", k) for k in range(n)]
    names.append("bayes")
    csv = os.path.splitext(a.out)[0] + ".csv"
    with open(csv + ".tmp", "w") as f:
        f.write("k," + ",".join(names) + "\n")
        for k in range(n):
            f.write("%d," % k + ",".join("" if cols[c][k] is None else "%.6g" % cols[c][k] for c in names) + "\n")
    os.replace(csv + ".tmp", csv)
    title = a.title or "%s: error at query k, seed means" % os.path.basename(os.path.normpath(a.sweep))
    r = subprocess.run([a.plotlog, csv, "--x", "k", "--y", ",".join(names), "--logy", "--title", title, "--out", a.out])
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
