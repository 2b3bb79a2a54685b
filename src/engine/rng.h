// rng.h — deterministic, seedable random numbers (same seed ⇒ same stream on every machine).
//
// SplitMix64 seeds a xoshiro256** generator; uniform() gives 24-bit-exact floats in [0,1) and 53-bit
// doubles; normal() is Box–Muller. Each data generator and each model init owns its own Rng, so changing
// one never shifts another's stream.
#pragma once
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace icl {

struct Rng {
    uint64_t s[4];
    bool has_spare = false;
    double spare = 0.0;

    explicit Rng(uint64_t seed = 1) { reseed(seed); }

    void reseed(uint64_t seed) {
        uint64_t z = seed;
        for (auto& w : s) {  // SplitMix64
            z += 0x9E3779B97F4A7C15ull;
            uint64_t x = z;
            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
            x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
            w = x ^ (x >> 31);
        }
        has_spare = false;
    }

    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

    uint64_t next_u64() {  // xoshiro256**
        uint64_t result = rotl(s[1] * 5, 7) * 9;
        uint64_t t = s[1] << 17;
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return result;
    }

    double uniform() { return (double)(next_u64() >> 11) * 0x1.0p-53; }           // [0,1)
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }    // [lo,hi)
    // Uniform integer in [0, n) without modulo bias (n > 0).
    uint64_t below(uint64_t n) {
        uint64_t limit = UINT64_MAX - UINT64_MAX % n;
        uint64_t x;
        do { x = next_u64(); } while (x >= limit);
        return x % n;
    }
    double normal() {  // N(0,1), Box–Muller
        if (has_spare) { has_spare = false; return spare; }
        double u1, u2;
        do { u1 = uniform(); } while (u1 <= 0.0);
        u2 = uniform();
        double r = std::sqrt(-2.0 * std::log(u1)), th = 6.283185307179586 * u2;
        spare = r * std::sin(th);
        has_spare = true;
        return r * std::cos(th);
    }
    // A child generator whose stream is independent of this one's future draws.
    Rng split(uint64_t salt) { return Rng(next_u64() ^ (salt * 0xD1B54A32D192ED03ull)); }

    // The whole state as text (resumable checkpoints): "s0:s1:s2:s3:spare_flag:spare_bits", all hexadecimal.
    std::string state() const {
        uint64_t bits;
        std::memcpy(&bits, &spare, sizeof bits);
        char buf[128];
        std::snprintf(buf, sizeof buf, "%016" PRIx64 ":%016" PRIx64 ":%016" PRIx64 ":%016" PRIx64 ":%d:%016" PRIx64, s[0], s[1], s[2],
                      s[3], has_spare ? 1 : 0, bits);
        return buf;
    }
    // Restore a state() string; false (and unchanged) if `text` is not one.
    bool set_state(const std::string& text) {
        uint64_t w[4], bits;
        int flag = -1, used = 0;
        if (std::sscanf(text.c_str(), "%16" SCNx64 ":%16" SCNx64 ":%16" SCNx64 ":%16" SCNx64 ":%1d:%16" SCNx64 "%n", &w[0], &w[1], &w[2],
                        &w[3], &flag, &bits, &used) != 6 || used != (int)text.size() || (flag != 0 && flag != 1) ||
            (w[0] | w[1] | w[2] | w[3]) == 0)
            return false;
        std::memcpy(s, w, sizeof s);
        has_spare = flag == 1;
        std::memcpy(&spare, &bits, sizeof bits);
        return true;
    }
};

// What changes from step to step in a model or data generator besides its parameters: random streams and counters
// (e.g. the number of forwards that seeds each random-neighbour draw). Resumable checkpoints save and restore them
// by name (models/trainer.h).
struct RandomState {
    std::vector<std::pair<std::string, Rng*>> streams;
    std::vector<std::pair<std::string, uint64_t*>> counters;
};

// A copy of the values a RandomState points to, put back with restore(): what runs between the two (the trainer's
// evaluations) leaves every training stream where it was.
struct RandomSnapshot {
    std::vector<Rng> streams;
    std::vector<uint64_t> counters;
    explicit RandomSnapshot(const RandomState& rs) {
        for (auto& s : rs.streams) streams.push_back(*s.second);
        for (auto& c : rs.counters) counters.push_back(*c.second);
    }
    void restore(const RandomState& rs) const {
        for (size_t i = 0; i < streams.size(); i++) *rs.streams[i].second = streams[i];
        for (size_t i = 0; i < counters.size(); i++) *rs.counters[i].second = counters[i];
    }
};

template <typename real>
void fill_normal(real* x, size_t n, Rng& rng, double mean = 0.0, double std = 1.0) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(mean + std * rng.normal());
}
template <typename real>
void fill_uniform(real* x, size_t n, Rng& rng, double lo = -1.0, double hi = 1.0) {
    for (size_t i = 0; i < n; i++) x[i] = (real)rng.uniform(lo, hi);
}

}  // namespace icl
