#!/usr/bin/env bash
# Every CPU-sized experiment whose numbers or plots stand in docs/ and the README, in one command (`make
# reproduce-cpu`): each runs into its own folder under OUT (default out/reproduce), whose files carry their
# provenance (summary.json's "provenance", log.csv's and table.md's first or last line); OUT/index.md lists each
# entry's command, the doc it feeds, exit code, seconds and provenance line. Several hours on 2 cores; entries
# are independent, so a failed one does not stop the rest.
#
#   tools/reproduce_cpu.sh [--out DIR] [--build DIR] [--only NAME,NAME] [--list]
#
#   --list         print the entries (name, doc, command) and exit
#   --only a,b     run only these entries (names from --list)
#   --build DIR    the binaries (default build/; `make` first)
#   --out DIR      where the runs go (default out/reproduce)
#
# The TinT LM entries read /usr/share/perl/5.36/pod/perldiag.pod (Debian 12's perl), as docs/tint.md did.
# The fortune-corpus entries need the Debian packages fortunes fortunes-de fortunes-it fortunes-es (installed
# here when run as root, else the entries fail with the apt-get line). The tables in docs/ are transcribed from
# these runs by hand; each doc section names its command, machine and date.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
B=$repo/build O=$repo/out/reproduce only="" list=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) O=$2; shift ;;
        --build) B=$2; shift ;;
        --only) only=$2; shift ;;
        --list) list=1 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)"; exit 2 ;;
    esac
    shift
done
case "$O" in /*) ;; *) O=$PWD/$O ;; esac
case "$B" in /*) ;; *) B=$PWD/$B ;; esac

# name | doc it feeds | command ($B = binaries, $O = the output root; each entry writes under $O/<name>)
entries=(
"make-run|README, docs/cgt.md (ICL arithmetic)|OMP_NUM_THREADS=2 \$B/train_cgt --preset make-run --out \$O/make-run"
"icl-mini|README, docs/cgt.md (ICL-mini, 3 seeds)|OMP_NUM_THREADS=2 \$B/train_cgt --preset icl-mini --out \$O/icl-mini"
"lr-mini|docs/cgt.md (linear regression, 3 seeds)|OMP_NUM_THREADS=2 \$B/train_cgt --preset lr-mini --seeds 3 --out \$O/lr-mini"
"lr-mini-6k|docs/cgt.md (linear regression, 6000 steps)|OMP_NUM_THREADS=2 \$B/train_cgt --preset lr-mini --steps 6000 --lr 2e-3 --seeds 3 --threads 2 --out \$O/lr-mini-6k"
"vae-mini|docs/cgt.md (VAE beta sweep, 3 seeds)|OMP_NUM_THREADS=1 \$B/train_cgt --preset vae-mini --seeds 3 --threads 1 --out \$O/vae-mini"
"vae-remedies|docs/cgt.md (VAE remedies: KL warm-up, free bits, beta = 0; 3 seeds)|for v in plain: wu500:--beta-warmup=500 wu1000:--beta-warmup=1000 fb10:--free-bits=10 fb12:--free-bits=12 fb20:--free-bits=20 fb200:--free-bits=200; do n=\${v%%:*}; f=\${v#*:}; OMP_NUM_THREADS=1 \$B/train_cgt --preset vae-mini --compare vae:0.01 --steps 1000 --seeds 3 --threads 1 \$f --out \$O/vae-remedies/\$n || exit 1; done && OMP_NUM_THREADS=1 \$B/train_cgt --preset vae-mini --compare vae:0 --steps 1000 --seeds 3 --threads 1 --out \$O/vae-remedies/beta0"
"fortunes|docs/cgt.md (the corpus)|\$B/prep_fortunes --out \$O/fortunes/corpus && \$B/bpe train \$O/fortunes/corpus --vocab 2000 --out \$O/fortunes/fortunes-2k.bpe"
"text-mini|docs/cgt.md (text mixtures, bytes, 3 seeds)|OMP_NUM_THREADS=1 \$B/train_cgt --preset text-mini --data \$O/fortunes/corpus --steps 1200 --seeds 3 --threads 1 --out \$O/text-mini"
"text-mini-single|docs/cgt.md (Fig. 15 stand-in: trained on single texts, 3 seeds)|OMP_NUM_THREADS=1 \$B/train_cgt --preset text-mini --data \$O/fortunes/corpus --steps 1200 --two-texts 0 --compare aux-reg --seeds 3 --threads 1 --out \$O/text-mini-single"
"cgt-ell|docs/cgt.md (ablation sweep: ℓ, 3 seeds)|\$B/sweep --preset cgt-ell --seeds 3 --out \$O/cgt-ell"
"cgt-rank|docs/cgt.md (ablation sweep: rank r, 3 seeds)|\$B/sweep --preset cgt-rank --seeds 3 --out \$O/cgt-rank"
"cgt-templates|docs/cgt.md (ablation sweep: templates M, 3 seeds)|\$B/sweep --preset cgt-templates --seeds 3 --out \$O/cgt-templates"
"cgt-single-task|docs/cgt.md (ablation sweep: App. D.1 single task, 3 seeds)|\$B/sweep --preset cgt-single-task --seeds 3 --out \$O/cgt-single-task"
"cgt-lr-ell|docs/cgt.md (ablation sweep: LR, ℓ, 3 seeds)|\$B/sweep --preset cgt-lr-ell --seeds 3 --out \$O/cgt-lr-ell"
"cgt-wcwd|docs/cgt.md (ablation sweep: w_C × w_D, 3 seeds; 36 runs of ~165 s on one Zen 5 core)|\$B/sweep --preset cgt-wcwd --seeds 3 --out \$O/cgt-wcwd"
"cgt-two-texts|docs/cgt.md (Fig. 15 stand-in as a sweep: single texts vs mixtures, 3 seeds)|\$B/sweep --preset cgt-two-texts --seeds 3 --out \$O/cgt-two-texts -- --data \$O/fortunes/corpus"
"iclca-e1-linear|docs/iclca.md (Theorem 4.1 as a model option: e1 with --attention linear)|OMP_NUM_THREADS=1 \$B/iclca e1 --attention linear --sizes 205k,2m --trials 20 --threads 1 --out \$O/iclca-e1-linear"
"cgt-lr-dims|docs/cgt.md (ablation sweep: LR, d_x = 64, 128 with d_y = 64, 3 seeds)|\$B/sweep --preset cgt-lr-dims --seeds 3 --out \$O/cgt-lr-dims"
"duallens-text|docs/duallens.md (the modified attentions on the fortune corpus, 3 seeds)|\$B/sweep --grid '--attn-mod=none,regularized,augmented' --metric val=/final_val_loss,train=/final_train_loss --seeds 3 --out \$O/duallens-text -- train_gpt --task mix --data \$O/fortunes/corpus --layers 4 --width 128 --heads 4 --seq 128 --batch 16 --lr 1e-3 --steps 1000 --eval-every 0 --eval-batches 64 --threads 1 && \$B/sweep --grid '--attn-beta=0.5' --metric val=/final_val_loss,train=/final_train_loss --seeds 3 --out \$O/duallens-text-negative -- train_gpt --task mix --data \$O/fortunes/corpus --layers 4 --width 128 --heads 4 --seq 128 --batch 16 --lr 1e-3 --steps 1000 --eval-every 0 --eval-batches 64 --threads 1 --attn-mod negative --attn-neighbors all"
"text-mini-bpe|docs/cgt.md (text mixtures, BPE)|OMP_NUM_THREADS=1 \$B/train_cgt --preset text-mini --data \$O/fortunes/corpus --tokenizer \$O/fortunes/fortunes-2k.bpe --compare baseline,aux-reg --steps 1000 --seeds 3 --threads 1 --out \$O/text-mini-bpe"
"iclca-e1|README, docs/iclca.md (E1)|OMP_NUM_THREADS=1 \$B/iclca e1 --sizes 205k,2m --trials 100 --threads 1 --out \$O/iclca-e1"
"iclca-e1-200m|docs/iclca.md (E1, one 200m pair: ~4 GB of memory)|OMP_NUM_THREADS=1 \$B/iclca e1 --sizes 200m --trials 1 --threads 1 --out \$O/iclca-e1-200m"
"iclca-train|docs/iclca.md (E2's model)|OMP_NUM_THREADS=1 \$B/iclca train --steps 20000 --threads 1 --out \$O/iclca-train --save \$O/iclca-train/ind.safetensors"
"iclca-e2|README, docs/iclca.md (E2)|OMP_NUM_THREADS=2 \$B/iclca e2 --load \$O/iclca-train/ind.safetensors --trials 2000 --out \$O/iclca-e2"
"iclca-e2-3seeds|README, docs/iclca.md (E2, three models trained from seeds 1-3)|OMP_NUM_THREADS=1 \$B/iclca e2 --trials 2000 --seeds 3 --threads 1 --out \$O/iclca-e2-3seeds"
"iclca-e3|README, docs/iclca.md (E3)|OMP_NUM_THREADS=1 \$B/iclca e3 --seeds 3 --steps 10000 --seq 128 --threads 1 --out \$O/iclca-e3"
"iclca-e4|README, docs/iclca.md (E4, logit std 0.3, 20 trials)|OMP_NUM_THREADS=1 \$B/iclca e4 --layers 3 --width 64 --heads 4 --M 40 --N 20 --trials 20 --features 16,64,266,1024,8192 --attn-std 0.3 --threads 1 --out \$O/iclca-e4"
"iclca-e4-std1|docs/iclca.md (E4, logit std 1, ORF and i.i.d. features)|OMP_NUM_THREADS=1 \$B/iclca e4 --layers 3 --width 64 --heads 4 --M 40 --N 20 --trials 20 --features 16,64,266,1024,8192 --attn-std 1.0 --threads 1 --out \$O/iclca-e4-std1 && OMP_NUM_THREADS=1 \$B/iclca e4 --layers 3 --width 64 --heads 4 --M 40 --N 20 --trials 20 --features 16,64,266,1024,8192 --attn-std 1.0 --orf 0 --threads 1 --out \$O/iclca-e4-std1-prf"
"iclca-bench|README, docs/iclca.md (inference and training cost)|OMP_NUM_THREADS=1 \$B/iclca bench --threads 1 --Ms 0,256,1024,4096 --Ts 256,1024,4096 --out \$O/iclca-bench"
"vae-text|docs/cgt.md (Figs. 18-20 stand-in: the VAE at beta 1, 3, 10 on the fortune mixtures, one seed)|OMP_NUM_THREADS=1 \$B/train_cgt --preset text-mini --data \$O/fortunes/corpus --steps 1200 --compare vae:1,vae:3,vae:10 --seeds 1 --seed 1 --threads 1 --out \$O/vae-text"
"gradcheck|README (the two printed gradcheck tables)|\$B/gradcheck --threads 2 && \$B/gradcheck --devices cpu,cpu --threads 2"
"tolerances|docs/tolerances.md (every test tolerance beside its measured error; rebuilds tests/ against a patched doctest)|bash $repo/tools/tolerance_report.sh --build \$B --out \$O/tolerances.md"
"tint-check|docs/tint.md (simulator vs oracles)|\$B/tint check --out \$O/tint-check"
"tint-params|docs/tint.md (parameter counts)|\$B/tint params --out \$O/tint-params && \$B/tint params --k 1 --out \$O/tint-params-k1 && \$B/tint params --loss-layers --out \$O/tint-params-loss-layers"
"tint-check-gamma|docs/tint.md (the gamma descent)|\$B/tint check --ln-gamma --threads 1 --out \$O/tint-check-gamma"
"tint-check-loss-layers|docs/tint.md (the App. G loss head)|\$B/tint check --loss-layers --threads 1 --out \$O/tint-check-loss-layers"
"tint-eps|docs/tint.md (error vs eps)|\$B/tint eps --threads 1 --out \$O/tint-eps"
"tint-lm|docs/tint.md (language modelling, 3 seeds: each trains its auxiliary model)|\$B/tint lm --seeds 3 --data /usr/share/perl/5.36/pod/perldiag.pod --steps 4000 --threads 1 --out \$O/tint-lm"
"tint-fewshot|docs/tint.md (few-shot, 3 seeds: each trains its auxiliary model)|\$B/tint fewshot --seeds 3 --threads 1 --out \$O/tint-fewshot"
"tint-fewshot-flip32|README, docs/tint.md (the stand-in where SGD helps: --labels flip, 32 demos, 3 seeds)|\$B/tint fewshot --labels flip --demos 32 --seq 320 --steps 1500 --episodes 60 --dev-episodes 24 --budgets 4:1 --etas 1e-2,1e-1,1 --seeds 3 --threads 1 --out \$O/tint-fewshot-flip32"
"tint-fewshot-flip32-gamma|docs/tint.md (the same with --ln-gamma, on tint-fewshot-flip32's models)|for s in 1 2 3; do \$B/tint fewshot --labels flip --demos 32 --episodes 60 --dev-episodes 24 --budgets 4:1 --etas 1e-2,1e-1,1 --threads 1 --ln-gamma --load \$O/tint-fewshot-flip32/seed\$s/aux.safetensors --seed \$s --out \$O/tint-fewshot-flip32-gamma/seed\$s || exit 1; done && python3 $repo/tools/tint_paired.py \$O/tint-fewshot-flip32 \$O/tint-fewshot-flip32-gamma > \$O/tint-fewshot-flip32-gamma/paired.md"
"tint-bench|docs/tint.md (performance)|OMP_NUM_THREADS=1 \$B/tint bench --threads 1 --k 4 --out \$O/tint-bench && OMP_NUM_THREADS=1 \$B/tint bench --threads 1 --k 1 --out \$O/tint-bench-k1"
"duallens-check|docs/duallens.md (theory checks)|\$B/duallens check --out \$O/duallens-check"
"duallens-features|docs/duallens.md (R2 random features)|\$B/duallens features --out \$O/duallens-features"
"duallens-r5-m1|docs/duallens.md (R5, M1)|\$B/duallens experiment --models m1 --steps 4000 --seeds 5 --threads 1 --out \$O/duallens-r5-m1"
"duallens-r5-m2|docs/duallens.md (R5, M2)|\$B/duallens experiment --models m2 --steps 1500 --seeds 3 --threads 1 --out \$O/duallens-r5-m2"
"bench-gemm|docs/benchmarks.md (GEMM)|OMP_NUM_THREADS=2 \$B/bench gemm --reps 7"
"bench-model|docs/benchmarks.md (GPT train step)|OMP_NUM_THREADS=2 \$B/bench model --reps 7"
"bench-cgt|docs/benchmarks.md (CGT train step)|OMP_NUM_THREADS=2 \$B/bench cgt --reps 7"
"bench-pytorch|README, docs/benchmarks.md (the GPT step vs PyTorch; needs python3-torch and libopenblas0-pthread)|BUILD=\$B bash $repo/tools/bench_vs_pytorch.sh 2"
)

if [ $list = 1 ]; then
    for e in "${entries[@]}"; do IFS='|' read -r n d c <<<"$e"; printf '%-20s %s\n%20s   %s\n' "$n" "$d" "" "$c"; done
    exit 0
fi
if [ -n "$only" ]; then
    for n in ${only//,/ }; do
        printf '%s\n' "${entries[@]}" | grep -q "^$n|" || { echo "error: --only: no entry '$n' (see --list)"; exit 2; }
    done
fi
[ -x "$B/train_cgt" ] || { echo "error: no binaries in $B (run make first, or give --build DIR)"; exit 2; }
mkdir -p "$O" || { echo "error: cannot create $O"; exit 1; }
if [[ ",$only," == *",fortunes,"* || -z "$only" ]] && [ ! -d /usr/share/games/fortunes ] && [ "$(id -u)" = 0 ]; then
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq fortunes fortunes-de fortunes-it fortunes-es >/dev/null) ||
        echo "warning: could not install the fortune packages; the fortune entries will fail"
fi

index="# tools/reproduce_cpu.sh — $(date -u +%Y-%m-%dT%H:%M:%SZ)\n\n| entry | feeds | exit | seconds | provenance | command |\n|---|---|---|---|---|---|\n"
failed=0
for e in "${entries[@]}"; do
    IFS='|' read -r n d c <<<"$e"
    [ -z "$only" ] || [[ ",$only," == *",$n,"* ]] || continue
    cmd=${c//\$B/$B}
    cmd=${cmd//\$O/$O}
    echo "=== $n ($d)"
    echo "    $cmd"
    t0=$SECONDS
    (cd "$repo" && bash -c "$cmd") >"$O/$n.log" 2>&1
    rc=$?
    dt=$((SECONDS - t0))
    [ $rc = 0 ] || { failed=$((failed + 1)); echo "    FAILED (exit $rc): $(tail -1 "$O/$n.log")"; }
    # the run's provenance: from its summary.json, else the first provenance line of its files or log
    prov=$(find "$O/$n" -name summary.json 2>/dev/null | head -1 | xargs -r python3 -c '
import json, sys
p = json.load(open(sys.argv[1])).get("provenance", {})
if p: print("icl.cpp %s, %s, %s (%s), %s threads, %s, %s" % (p["commit"], p["compiler"], p["cpu"], p["isa"], p["threads"], p["device"], p["date"]))' 2>/dev/null)
    [ -n "$prov" ] || prov=$(grep -h -m1 -o 'icl.cpp [0-9a-f]\{12\}[^|]*' "$O/$n.log" "$O/$n"/*.md "$O/$n"/*.csv "$O/$n"/*/log.csv 2>/dev/null | head -1 | tr -d '_')
    echo "    exit $rc, ${dt} s"
    index+="| $n | $d | $rc | $dt | ${prov:-(see $n.log)} | \`${c//|/\\|}\` |\n"
    printf "%b" "$index" >"$O/index.md.tmp" && mv "$O/index.md.tmp" "$O/index.md"
done
echo "wrote $O/index.md; $failed entr$([ $failed = 1 ] && echo y || echo ies) failed"
[ $failed = 0 ]
