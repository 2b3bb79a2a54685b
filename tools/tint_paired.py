#!/usr/bin/env python3
"""Compare two `tint fewshot --seeds N` studies seed by seed (the same episodes and auxiliary models, one setting
changed — e.g. --ln-gamma): per arm the test accuracy of each (mean ± 95% interval, Student t over the seeds) and
the paired difference B − A.

    tools/tint_paired.py out/reproduce/tint-fewshot-flip32 out/reproduce/tint-fewshot-flip32-gamma

Each folder holds seed1/, seed2/, … with the table.csv `tint fewshot` writes; seeds missing from either side are
left out (and said so). Prints a Markdown table."""
import csv
import math
import os
import sys

# two-sided 95% Student t quantiles t_{0.975, df}, df = 1..10 (standard table values)
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def interval(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return m, (T975[n - 2] if n - 1 <= len(T975) else 1.96) * sd / math.sqrt(n)


def chosen_rows(path):
    """arm -> (acc_test, acc_test_cal, acc_test_before) from the rows whose eta column names the chosen pair."""
    rows = {}
    with open(path) as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(lines):
        if "/" not in r["eta"]:
            continue
        arm = "%s %s %s (%s,%s)" % (r["method"], r["format"], r["loss"], r["k"], r["s"])
        rows[arm] = (float(r["acc_test"]), float(r["acc_test_cal"]), float(r["acc_test_before"]))
    return rows


def seeds(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        p = os.path.join(folder, name, "table.csv")
        if name.startswith("seed") and os.path.isfile(p):
            out[name] = chosen_rows(p)
    return out


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(sys.argv) != 3:
        print("error: need two study folders, A and B (got %d arguments); see --help" % (len(sys.argv) - 1), file=sys.stderr)
        return 2
    a, b = seeds(sys.argv[1]), seeds(sys.argv[2])
    common = sorted(set(a) & set(b))
    if not common:
        print("error: no seed<i>/table.csv common to both folders", file=sys.stderr)
        return 1
    for s in sorted(set(a) ^ set(b)):
        print("note: %s is in only one of the folders, left out" % s, file=sys.stderr)
    arms = [k for k in a[common[0]] if all(k in a[s] and k in b[s] for s in common)]
    if not arms:
        print("error: no arm is present in every seed of both folders", file=sys.stderr)
        return 1
    print("%d seeds (%s); A = %s, B = %s; mean ± 95%% interval (Student t), differences paired by seed, in points\n"
          % (len(common), ", ".join(common), sys.argv[1], sys.argv[2]))
    print("| arm | A: accuracy | B: accuracy | B − A | A: calibrated | B: calibrated | B − A (calibrated) |")
    print("|---|---|---|---|---|---|---|")
    fmt = lambda mi: "%.1f%% ± %.1f" % (100 * mi[0], 100 * mi[1])
    dif = lambda mi: "%+.1f ± %.1f" % (100 * mi[0], 100 * mi[1])
    for k in arms:
        xa = [a[s][k][0] for s in common]
        xb = [b[s][k][0] for s in common]
        ca = [a[s][k][1] for s in common]
        cb = [b[s][k][1] for s in common]
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            k, fmt(interval(xa)), fmt(interval(xb)), dif(interval([y - x for x, y in zip(xa, xb)])),
            fmt(interval(ca)), fmt(interval(cb)), dif(interval([y - x for x, y in zip(ca, cb)]))))
    before_a = [a[s][arms[0]][2] for s in common]
    before_b = [b[s][arms[0]][2] for s in common]
    print("\nvanilla ICL (no update): A %s, B %s%s" % (fmt(interval(before_a)), fmt(interval(before_b)),
          "" if before_a == before_b else "  (differ: not the same episodes or models?)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
