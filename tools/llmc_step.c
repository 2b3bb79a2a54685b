// llmc_step.c — times llm.c's CPU train step on the same GPT that `bench model` times, for
// tools/bench_vs_llmc.sh. It is compiled against YOUR checkout of karpathy/llm.c (nothing of llm.c is in this
// repository): the script builds it as
//
//   gcc -Ofast -march=native -fopenmp -DOMP -DTESTING -I<llm.c> tools/llmc_step.c -lm
//
// i.e. with llm.c's own Makefile flags, and `#include "train_gpt2.c"` pulls in llm.c's layers and its
// gpt2_forward / gpt2_zero_grad / gpt2_backward / gpt2_update (TESTING drops llm.c's main()).
//
// What it does: writes a randomly initialized checkpoint in llm.c's format (header magic 20240326, version 3;
// GPT-2's init: N(0, 0.02) weights, unit layer-norm gains, zero biases) to a temporary file, loads it with
// llm.c's own gpt2_build_from_checkpoint, and times llm.c's training step exactly as llm.c's main() does
// (forward with targets, zero_grad, backward, AdamW update, one clock_gettime pair around the four) on
// random tokens, one warm-up step and then --reps timed steps. Prints each step and the median.
//
//   llmc_step [--layers 6] [--width 384] [--heads 6] [--vocab 256] [--seq 256] [--batch 8] [--reps 5]
#include "train_gpt2.c"

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// xorshift64* and Box–Muller: the checkpoint's weights and the tokens (fixed seed; values do not affect time).
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static double uniform01(void) { return ((next_u64() >> 11) + 0.5) / 9007199254740992.0; }
static float normal(float std) {
    double u = uniform01(), v = uniform01();
    return (float)(std * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

// the temporary checkpoint, removed however the program ends (llm.c's loader exit()s on a bad file)
static char ckpt_path[] = "/tmp/llmc_step_XXXXXX";
static int ckpt_written = 0;
static void remove_checkpoint(void) {
    if (ckpt_written) remove(ckpt_path);
    ckpt_written = 0;
}

static int parse_int(const char* flag, const char* s, int lo, int hi) {
    char* end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "llmc_step: %s must be an integer in [%d, %d], got '%s'\n", flag, lo, hi, s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char** argv) {
    int L = 6, C = 384, NH = 6, V = 256, T = 256, B = 8, reps = 5;
    const struct { const char* name; int* dst; int lo, hi; } flags[] = {
        {"--layers", &L, 1, 64},  {"--width", &C, 1, 8192}, {"--heads", &NH, 1, 256}, {"--vocab", &V, 2, 1 << 20},
        {"--seq", &T, 1, 8192},   {"--batch", &B, 1, 1024}, {"--reps", &reps, 1, 1000}};
    const int nflags = (int)(sizeof flags / sizeof flags[0]);
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            printf("usage: llmc_step [--layers N] [--width N] [--heads N] [--vocab N] [--seq N] [--batch N] [--reps N]\n"
                   "Times llm.c's CPU train step (built against an llm.c checkout by tools/bench_vs_llmc.sh).\n");
            return 0;
        }
        int k = 0;
        while (k < nflags && strcmp(f, flags[k].name)) k++;
        if (k == nflags) { fprintf(stderr, "llmc_step: unknown flag %s (see --help)\n", f); return 2; }
        if (i + 1 >= argc) { fprintf(stderr, "llmc_step: %s needs a value (see --help)\n", f); return 2; }
        *flags[k].dst = parse_int(f, argv[++i], flags[k].lo, flags[k].hi);
    }
    if (C % NH != 0) { fprintf(stderr, "llmc_step: --heads %d must divide --width %d\n", NH, C); return 2; }
    const int Vp = (V + 127) / 128 * 128;  // llm.c pads the vocabulary to a multiple of 128

    // 1. the checkpoint, in llm.c's layout: 256 ints of header, then the 16 parameter tensors in order
    GPT2Config cfg = {T, V, Vp, L, NH, C};
    size_t sizes[NUM_PARAMETER_TENSORS];
    fill_in_parameter_sizes(sizes, cfg);
    int fd = mkstemp(ckpt_path);
    if (fd < 0) { perror("llmc_step: mkstemp"); return 1; }
    ckpt_written = 1;
    atexit(remove_checkpoint);  // also when llm.c's loader exit()s
    FILE* f = fdopen(fd, "wb");
    if (!f) { perror("llmc_step: fdopen"); return 1; }
    int header[256] = {0};
    header[0] = 20240326; header[1] = 3; header[2] = T; header[3] = V; header[4] = L; header[5] = NH;
    header[6] = C; header[7] = Vp;
    int ok = fwrite(header, sizeof(int), 256, f) == 256;
    for (int t = 0; t < NUM_PARAMETER_TENSORS && ok; t++) {
        // ln1w, ln2w, lnfw are gains (1); ln1b, qkvb, attprojb, ln2b, fcb, fcprojb, lnfb are biases (0)
        const int gain = t == 2 || t == 8 || t == 14;
        const int bias = t == 3 || t == 5 || t == 7 || t == 9 || t == 11 || t == 13 || t == 15;
        for (size_t i = 0; i < sizes[t] && ok; i++) {
            float w = gain ? 1.0f : bias ? 0.0f : normal(0.02f);
            ok = fwrite(&w, sizeof w, 1, f) == 1;
        }
    }
    if (fclose(f) != 0 || !ok) { fprintf(stderr, "llmc_step: cannot write %s\n", ckpt_path); return 1; }

    // 2. llm.c's own loader, then its training step, timed as in its main()
    GPT2 model;
    gpt2_build_from_checkpoint(&model, ckpt_path);
    remove_checkpoint();
    int* tokens = (int*)mallocCheck((size_t)B * T * sizeof(int));
    int* targets = (int*)mallocCheck((size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) { tokens[i] = (int)(next_u64() % V); targets[i] = (int)(next_u64() % V); }
    double* ms = (double*)mallocCheck((size_t)reps * sizeof(double));
    printf("llm.c train_gpt2.c step: L=%d C=%d NH=%d V=%d (padded %d) B=%d T=%d", L, C, NH, V, Vp, B, T);
#ifdef OMP
    printf(", %d OpenMP threads\n", omp_get_max_threads());
#else
    printf(", no OpenMP\n");
#endif
    for (int step = 0; step <= reps; step++) {  // step 0: warm-up (llm.c allocates lazily in its first step)
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        gpt2_forward(&model, tokens, targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, step + 1);
        clock_gettime(CLOCK_MONOTONIC, &end);
        double t_ms = ((end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9) * 1000;
        printf("step %d%s: loss %.4f, %.1f ms\n", step, step == 0 ? " (warm-up)" : "", model.mean_loss, t_ms);
        fflush(stdout);
        if (step > 0) ms[step - 1] = t_ms;
    }
    qsort(ms, reps, sizeof(double), cmp_double);
    double median = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    printf("step: median %.1f ms over %d steps (min %.1f, max %.1f)\n", median, reps, ms[0], ms[reps - 1]);
    gpt2_free(&model);
    free(tokens); free(targets); free(ms);
    return 0;
}
