// gatehouse-stream: a streaming recognizer that reads mono 16 kHz float32 little-endian PCM on stdin and
// writes the rolling-trim event protocol as JSON lines on stdout (see harness/streaming/protocol.py).
//
// Positions are 80 ms tokens (4 frames of 20 ms). The stream starts with left_pad silent positions; the
// first window prefills startup positions, every later window one. The KV cache is allocated once for
// the rolling context; when it would overflow, cached + incoming - context + trim - 1 positions after the
// stable prefix are dropped. Errors (bad flags, bad model, odd byte count, non-finite samples) are an
// {"kind":"error"} event, a message on stderr and exit status 2.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/json.hpp"
#include "common/sha256.hpp"

namespace {

constexpr int kRate = 16000, kFrame = 320, kFramesPerToken = 4, kSamplesPerToken = kFrame * kFramesPerToken;
constexpr int kBins = kFrame / 2 + 1;
const char* kPhases = "[\"features\",\"encoder\",\"decoder\",\"logits\",\"emit\"]";

struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

using Clock = std::chrono::steady_clock;
Clock::time_point g_origin;
double now_s() { return std::chrono::duration<double>(Clock::now() - g_origin).count(); }

using gatehouse::Controls;
using gatehouse::quote;
using gatehouse::real;

void emit(const std::string& line) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
}

// ---- the model -------------------------------------------------------------------------------------

struct Model {
    std::map<std::string, int> cfg;
    std::vector<int> dilations, delays;
    std::map<std::string, std::vector<float>> t;
    std::string sha256;

    const std::vector<float>& get(const std::string& name, size_t size) const {
        auto it = t.find(name);
        if (it == t.end()) throw Failure("model has no tensor " + name);
        if (it->second.size() != size)
            throw Failure("model tensor " + name + " has " + std::to_string(it->second.size()) + " values, expected " +
                          std::to_string(size));
        return it->second;
    }
    int c(const std::string& k) const {
        auto it = cfg.find(k);
        if (it == cfg.end()) throw Failure("model header has no " + k);
        return it->second;
    }
};

Model load_model(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Failure("cannot open model " + path);
    std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    Model m;
    m.sha256 = gatehouse::sha256_hex(bytes);
    size_t pos = 0;
    auto line = [&]() {
        size_t e = pos;
        while (e < bytes.size() && bytes[e] != '\n') ++e;
        if (e >= bytes.size()) throw Failure("model " + path + ": header is not terminated by 'end'");
        std::string s(bytes.begin() + pos, bytes.begin() + e);
        pos = e + 1;
        return s;
    };
    if (line() != "GHSTRM01") throw Failure("model " + path + " does not start with GHSTRM01");
    std::vector<std::pair<std::string, size_t>> order;
    for (std::string s = line(); s != "end"; s = line()) {
        std::istringstream in(s);
        std::string key;
        in >> key;
        if (key == "tensor") {
            std::string name; size_t n = 0;
            in >> name >> n;
            order.emplace_back(name, n);
        } else if (key == "dilations" || key == "delays") {
            auto& v = key == "dilations" ? m.dilations : m.delays;
            for (int x; in >> x;) v.push_back(x);
        } else {
            int v; in >> v;
            m.cfg[key] = v;
        }
    }
    for (auto& [name, n] : order) {
        if (pos + 4 * n > bytes.size()) throw Failure("model " + path + " is truncated in tensor " + name);
        std::vector<float> v(n);
        std::memcpy(v.data(), bytes.data() + pos, 4 * n);  // little-endian hosts only
        pos += 4 * n;
        m.t[name] = std::move(v);
    }
    if (pos != bytes.size()) throw Failure("model " + path + " has trailing bytes");
    return m;
}

void linear(const float* W, const float* b, const float* x, float* y, int out, int in) {
    for (int o = 0; o < out; ++o) {
        const float* w = W + size_t(o) * in;
        float acc = 0.f;
        for (int i = 0; i < in; ++i) acc += w[i] * x[i];
        y[o] = acc + b[o];
    }
}

inline float gelu(float x) { return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752440f)); }

void layernorm(const float* x, const float* g, const float* b, float* y, int d) {
    float mean = 0.f, var = 0.f;
    for (int i = 0; i < d; ++i) mean += x[i];
    mean /= d;
    for (int i = 0; i < d; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= d;
    float inv = 1.f / std::sqrt(var + 1e-5f);
    for (int i = 0; i < d; ++i) y[i] = (x[i] - mean) * inv * g[i] + b[i];
}

struct Net {
    int vocab, d, layers, heads, ffn, mels, left_pad, eof_drain;
    const Model& m;
    std::vector<std::vector<float>> hist;  // per conv layer, 2*dilation past inputs, oldest first
    std::vector<float> K, V;               // [layers][context][d], allocated once
    int context, delay_index;

    Net(const Model& model, int ctx, int delay_tokens) : m(model), context(ctx) {
        vocab = m.c("vocab"); d = m.c("d_model"); layers = m.c("layers"); heads = m.c("heads");
        ffn = m.c("ffn"); mels = m.c("n_mels"); left_pad = m.c("left_pad_tokens"); eof_drain = m.c("eof_drain_tokens");
        auto it = std::find(m.delays.begin(), m.delays.end(), delay_tokens);
        if (it == m.delays.end()) throw Failure("model is not conditioned on a delay of " + std::to_string(delay_tokens) + " tokens");
        delay_index = int(it - m.delays.begin());
        for (int dil : m.dilations) hist.emplace_back(size_t(2 * dil) * d, 0.f);
        K.assign(size_t(layers) * context * d, 0.f);
        V.assign(size_t(layers) * context * d, 0.f);
        // Touch every tensor once so a malformed model fails before ready.
        m.get("dft_cos", kFrame * kBins); m.get("dft_sin", kFrame * kBins); m.get("mel", kBins * mels);
        m.get("mean", mels); m.get("inv_std", mels);
        m.get("in1.w", size_t(d) * kFramesPerToken * mels); m.get("in2.w", size_t(d) * d);
        for (size_t i = 0; i < m.dilations.size(); ++i) m.get("conv" + std::to_string(i) + ".w", size_t(d) * 3 * d);
        m.get("tok", size_t(vocab) * d); m.get("delay", m.delays.size() * d); m.get("slopes", heads);
        for (int l = 0; l < layers; ++l) m.get("b" + std::to_string(l) + ".qkv.w", size_t(3) * d * d);
        m.get("head.w", size_t(vocab) * d);
    }
    size_t bytes_per_token() const { return size_t(layers) * 2 * d * 4; }

    // Four 20 ms frames -> 4 x n_mels standardized log-mel features.
    void features(const float* samples, float* out) const {
        const auto& C = m.t.at("dft_cos"); const auto& S = m.t.at("dft_sin"); const auto& M = m.t.at("mel");
        const auto& mean = m.t.at("mean"); const auto& inv = m.t.at("inv_std");
        std::vector<float> re(kBins), im(kBins), pw(kBins);
        for (int f = 0; f < kFramesPerToken; ++f) {
            const float* x = samples + f * kFrame;
            std::fill(re.begin(), re.end(), 0.f); std::fill(im.begin(), im.end(), 0.f);
            for (int n = 0; n < kFrame; ++n) {
                const float xn = x[n];
                const float* cr = C.data() + size_t(n) * kBins; const float* sr = S.data() + size_t(n) * kBins;
                for (int k = 0; k < kBins; ++k) { re[k] += xn * cr[k]; im[k] += xn * sr[k]; }
            }
            for (int k = 0; k < kBins; ++k) pw[k] = re[k] * re[k] + im[k] * im[k];
            for (int j = 0; j < mels; ++j) {
                float acc = 0.f;
                for (int k = 0; k < kBins; ++k) acc += pw[k] * M[size_t(k) * mels + j];
                out[f * mels + j] = (std::log(acc + 1e-6f) - mean[j]) * inv[j];
            }
        }
    }

    // The audio path up to the token embedding: input MLP and dilated causal convolutions.
    void encode(const float* feat, float* x) {
        std::vector<float> a(d), cat(3 * d), y(d);
        linear(m.t.at("in1.w").data(), m.t.at("in1.b").data(), feat, a.data(), d, kFramesPerToken * mels);
        for (auto& v : a) v = gelu(v);
        linear(m.t.at("in2.w").data(), m.t.at("in2.b").data(), a.data(), x, d, d);
        for (size_t i = 0; i < m.dilations.size(); ++i) {
            int dil = m.dilations[i];
            auto& h = hist[i];
            std::copy(h.begin(), h.begin() + d, cat.begin());
            std::copy(h.begin() + size_t(dil) * d, h.begin() + size_t(dil + 1) * d, cat.begin() + d);
            std::copy(x, x + d, cat.begin() + 2 * d);
            std::string n = "conv" + std::to_string(i);
            linear(m.t.at(n + ".w").data(), m.t.at(n + ".b").data(), cat.data(), y.data(), d, 3 * d);
            std::move(h.begin() + d, h.end(), h.begin());
            std::copy(x, x + d, h.end() - d);
            for (int j = 0; j < d; ++j) x[j] += gelu(y[j]);
        }
    }

    // One position through the transformer at cache slot `slot`; writes the residual stream to h.
    void decode(float* h, const float* x, int prev, int slot) {
        const auto& tok = m.t.at("tok"); const auto& dly = m.t.at("delay"); const auto& slopes = m.t.at("slopes");
        for (int j = 0; j < d; ++j) h[j] = x[j] + tok[size_t(prev) * d + j] + dly[size_t(delay_index) * d + j];
        int dh = d / heads, n = slot + 1;
        std::vector<float> ln(d), qkv(3 * d), att(d), o(d), f1(ffn), sc(n);
        float scale = 1.f / std::sqrt(float(dh));
        for (int l = 0; l < layers; ++l) {
            std::string b = "b" + std::to_string(l) + ".";
            layernorm(h, m.t.at(b + "ln1.g").data(), m.t.at(b + "ln1.b").data(), ln.data(), d);
            linear(m.t.at(b + "qkv.w").data(), m.t.at(b + "qkv.b").data(), ln.data(), qkv.data(), 3 * d, d);
            float* Kl = K.data() + size_t(l) * context * d; float* Vl = V.data() + size_t(l) * context * d;
            std::copy(qkv.begin() + d, qkv.begin() + 2 * d, Kl + size_t(slot) * d);
            std::copy(qkv.begin() + 2 * d, qkv.end(), Vl + size_t(slot) * d);
            for (int hd = 0; hd < heads; ++hd) {
                const float* q = qkv.data() + hd * dh;
                float mx = -INFINITY;
                for (int j = 0; j < n; ++j) {
                    const float* k = Kl + size_t(j) * d + hd * dh;
                    float s = 0.f;
                    for (int e = 0; e < dh; ++e) s += q[e] * k[e];
                    sc[j] = s * scale - slopes[hd] * float(slot - j);
                    mx = std::max(mx, sc[j]);
                }
                float sum = 0.f;
                for (int j = 0; j < n; ++j) { sc[j] = std::exp(sc[j] - mx); sum += sc[j]; }
                for (int e = 0; e < dh; ++e) {
                    float acc = 0.f;
                    for (int j = 0; j < n; ++j) acc += sc[j] * Vl[size_t(j) * d + hd * dh + e];
                    att[hd * dh + e] = acc / sum;
                }
            }
            linear(m.t.at(b + "proj.w").data(), m.t.at(b + "proj.b").data(), att.data(), o.data(), d, d);
            for (int j = 0; j < d; ++j) h[j] += o[j];
            layernorm(h, m.t.at(b + "ln2.g").data(), m.t.at(b + "ln2.b").data(), ln.data(), d);
            linear(m.t.at(b + "ff1.w").data(), m.t.at(b + "ff1.b").data(), ln.data(), f1.data(), ffn, d);
            for (auto& v : f1) v = gelu(v);
            linear(m.t.at(b + "ff2.w").data(), m.t.at(b + "ff2.b").data(), f1.data(), o.data(), d, ffn);
            for (int j = 0; j < d; ++j) h[j] += o[j];
        }
    }

    // Final norm and head: argmax token and its margin over the runner-up.
    int logits(const float* h, float* margin) {
        std::vector<float> ln(d), lg(vocab);
        layernorm(h, m.t.at("ln_f.g").data(), m.t.at("ln_f.b").data(), ln.data(), d);
        linear(m.t.at("head.w").data(), m.t.at("head.b").data(), ln.data(), lg.data(), vocab, d);
        int best = 0;
        for (int i = 1; i < vocab; ++i) if (lg[i] > lg[best]) best = i;
        float second = -INFINITY;
        for (int i = 0; i < vocab; ++i) if (i != best) second = std::max(second, lg[i]);
        *margin = lg[best] - second;
        return best;
    }

    // Remove `drop` cached positions after the stable prefix, shifting the rest down.
    void trim(int cached, int drop, int keep) {
        for (auto* cache : {&K, &V})
            for (int l = 0; l < layers; ++l) {
                float* base = cache->data() + size_t(l) * context * d;
                std::move(base + size_t(keep + drop) * d, base + size_t(cached) * d, base + size_t(keep) * d);
            }
    }
};

// ---- input -----------------------------------------------------------------------------------------

struct Input {
    std::vector<float> buf;  // unconsumed samples, fixed capacity
    size_t have = 0;         // samples in buf
    int64_t consumed = 0;    // samples handed to the frontend (or skipped as padding) so far
    int64_t total = 0;       // samples received
    unsigned char carry[4]; int ncarry = 0;
    bool eof = false;
    double eof_at = 0, wait = 0, convert = 0;

    explicit Input(size_t capacity) : buf(capacity, 0.f) {}

    // Block for more input; false at EOF.
    void read_more() {
        size_t room = buf.size() - have;
        if (room == 0) throw Failure("internal: input buffer full");
        std::vector<unsigned char> raw(std::min<size_t>(room * 4, 65536) + 4);
        std::memcpy(raw.data(), carry, ncarry);
        double t0 = now_s();
        ssize_t n;
        do { n = ::read(0, raw.data() + ncarry, std::min<size_t>(room * 4, 65536) - ncarry); } while (n < 0 && errno == EINTR);
        double t1 = now_s();
        wait += t1 - t0;
        if (n < 0) throw Failure(std::string("reading stdin: ") + std::strerror(errno));
        if (n == 0) {
            eof = true; eof_at = t1;
            if (ncarry) throw Failure("odd byte count on stdin: input ended " + std::to_string(ncarry) +
                                      " bytes into a float32 sample (" + std::to_string(total * 4 + ncarry) + " bytes in all)");
            if (total == 0) throw Failure("no audio: stdin closed before any sample");
            return;
        }
        size_t bytes = ncarry + size_t(n), whole = bytes / 4;
        for (size_t i = 0; i < whole; ++i) {
            float v;
            std::memcpy(&v, raw.data() + 4 * i, 4);
            if (!std::isfinite(v)) throw Failure("non-finite sample (" + std::string(std::isnan(v) ? "NaN" : "Inf") +
                                                 ") at sample index " + std::to_string(total + int64_t(i)));
            buf[have + i] = v;
        }
        ncarry = int(bytes - whole * 4);
        std::memcpy(carry, raw.data() + whole * 4, ncarry);
        have += whole; total += int64_t(whole);
        convert += now_s() - t1;
    }

    // Copy the 1280 samples of audio slot `a` (zero past the end) and release them.
    void take_slot(int64_t a, float* out) {
        int64_t start = a * kSamplesPerToken;
        if (start != consumed) throw Failure("internal: slots out of order");
        size_t n = size_t(std::max<int64_t>(0, std::min<int64_t>(kSamplesPerToken, total - start)));
        std::copy(buf.begin(), buf.begin() + n, out);
        std::fill(out + n, out + kSamplesPerToken, 0.f);
        size_t drop = std::min(n, have);
        std::move(buf.begin() + drop, buf.begin() + have, buf.begin());
        have -= drop; consumed += kSamplesPerToken;
    }
};

struct Args {
    std::string model, vocab, startup;
    int delay_ms = -1, batch = -1, context = -1, trim = -1, stable = -1, capacity = 16384;
};

int to_int(const std::string& flag, const char* v) {
    char* end = nullptr;
    long x = std::strtol(v, &end, 10);
    if (!*v || *end) throw Failure("flag " + flag + ": '" + v + "' is not an integer");
    return int(x);
}

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string f = argv[i];
        if (i + 1 >= argc) throw Failure("flag " + f + " needs a value");
        const char* v = argv[++i];
        if (f == "--model") a.model = v;
        else if (f == "--vocab") a.vocab = v;
        else if (f == "--startup") a.startup = v;
        else if (f == "--delay-ms") a.delay_ms = to_int(f, v);
        else if (f == "--batch") a.batch = to_int(f, v);
        else if (f == "--context") a.context = to_int(f, v);
        else if (f == "--trim") a.trim = to_int(f, v);
        else if (f == "--stable-prefix") a.stable = to_int(f, v);
        else if (f == "--capacity-samples") a.capacity = to_int(f, v);
        else throw Failure("unknown flag " + f);
    }
    if (a.model.empty() || a.vocab.empty()) throw Failure("--model and --vocab are required");
    if (a.startup != "realtime" && a.startup != "hf") throw Failure("--startup must be realtime or hf");
    if (a.delay_ms != 80 && a.delay_ms != 160 && a.delay_ms != 240 && a.delay_ms != 480)
        throw Failure("--delay-ms must be 80, 160, 240 or 480");
    if (a.batch != 1 && a.batch != 2 && a.batch != 4) throw Failure("--batch must be 1, 2 or 4");
    if (a.trim < 1 || a.stable < 0) throw Failure("--trim must be >= 1 and --stable-prefix >= 0");
    return a;
}

std::vector<std::pair<std::string, std::string>> load_vocab(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw Failure("cannot open vocabulary " + path);
    std::vector<std::pair<std::string, std::string>> out;
    for (std::string line; std::getline(f, line);) {
        size_t a = line.find('\t'), b = line.find('\t', a + 1);
        if (a == std::string::npos || b == std::string::npos || line.substr(0, a) != std::to_string(out.size()))
            throw Failure("vocabulary " + path + " line " + std::to_string(out.size() + 1) + " is malformed");
        out.emplace_back(line.substr(a + 1, b - a - 1), line.substr(b + 1));
    }
    return out;
}

int run(int argc, char** argv) {
    Args a = parse(argc, argv);
    Model model = load_model(a.model);
    auto vocab = load_vocab(a.vocab);
    const int D = a.delay_ms / 80;
    Net net(model, a.context, D);
    if (int(vocab.size()) != net.vocab) throw Failure("vocabulary has " + std::to_string(vocab.size()) +
                                                      " tokens, the model " + std::to_string(net.vocab));
    const int P = net.left_pad, E = net.eof_drain, S = P + 1 + (a.startup == "hf" ? D : 0);
    const int C = a.context, T = a.trim, KEEP = a.stable, B = a.batch;
    if (KEEP > S || C < S + KEEP + T) throw Failure("context " + std::to_string(C) + " is below startup + stable prefix + trim");
    const int64_t need_first = int64_t(S - P) * kSamplesPerToken;
    if (a.capacity < need_first + int64_t(B) * kSamplesPerToken || a.capacity > 32768)
        throw Failure("--capacity-samples " + std::to_string(a.capacity) + " cannot hold a batch (or exceeds 32768)");
    Input in(size_t(a.capacity));
    const size_t per_token = net.bytes_per_token(), allocated = per_token * size_t(C);

    g_origin = Clock::now();  // the audio clock's origin: the ready event
    std::ostringstream r;
    r << "{\"kind\":\"ready\",\"protocol_version\":1,\"engine\":\"gatehouse-stream\",\"input_format\":\"mono_16000_f32le\""
      << ",\"sample_rate\":" << kRate << ",\"token_period_ms\":80,\"samples_per_token\":" << kSamplesPerToken
      << ",\"frames_per_token\":" << kFramesPerToken << ",\"startup_policy\":\""
      << (a.startup == "hf" ? "hf_delayed" : "realtime_first_token") << "\",\"startup_tokens\":" << S
      << ",\"delay_ms\":" << a.delay_ms << ",\"delay_tokens\":" << D << ",\"left_pad_tokens\":" << P
      << ",\"eof_drain_tokens\":" << E << ",\"right_pad_tokens\":" << D + E << ",\"rolling_context_tokens\":" << C
      << ",\"rolling_trim_tokens\":" << T << ",\"rolling_stable_prefix_tokens\":" << KEEP << ",\"batch_windows\":" << B
      << ",\"first_batch_windows\":1,\"model_sha256\":\"" << model.sha256 << "\",\"vocab_size\":" << net.vocab
      << ",\"cache_bytes_per_token\":" << per_token << ",\"cache_allocated_bytes\":" << allocated
      << ",\"retained_audio_capacity_samples\":" << a.capacity << ",\"phase_names\":" << kPhases
      << ",\"seconds\":0.0}";
    emit(r.str());

    const int fdim = kFramesPerToken * net.mels, d = net.d;
    std::vector<float> slot(kSamplesPerToken), zero(kSamplesPerToken, 0.f);
    std::vector<uint32_t> ids;
    std::string text;
    int cached = 0, trims = 0, prev = 0, visible = 0, skipped = 0;
    int64_t dropped = 0, count = -1;
    double work_total = 0, first_text = -1, last_text = -1;
    std::vector<float> feats, x(d), h(d);
    for (int64_t start = 0;;) {
        int64_t want_end = start + (start == 0 ? 1 : B);
        int64_t need = (S - P + want_end - 1) * int64_t(kSamplesPerToken);
        while (!in.eof && in.total < need) in.read_more();
        if (in.eof && count < 0) {
            int64_t n_audio = (in.total + kSamplesPerToken - 1) / kSamplesPerToken;
            count = P + n_audio + D + E - S + 1;
        }
        int64_t end = count >= 0 ? std::min(want_end, count) : want_end;
        if (start >= end) break;
        const double t0 = now_s();
        // Features for every position of the batch first: the frontend runs ahead of the decoder.
        int64_t first_pos = start == 0 ? 0 : S - 1 + start, last_pos = S - 1 + end - 1;
        feats.assign(size_t(last_pos - first_pos + 1) * fdim, 0.f);
        std::vector<double> feat_s(size_t(end - start), 0.0);
        for (int64_t p = first_pos; p <= last_pos; ++p) {
            double f0 = now_s();
            const float* src = zero.data();
            if (p >= P) { in.take_slot(p - P, slot.data()); src = slot.data(); }
            net.features(src, feats.data() + size_t(p - first_pos) * fdim);
            size_t w = size_t(std::max<int64_t>(p - (S - 1), 0));
            feat_s[std::min(w, feat_s.size() - 1)] += now_s() - f0;
        }
        const int64_t processed = int64_t(S + end - 1) * kFramesPerToken;
        for (int64_t i = start; i < end; ++i) {
            double ph[5] = {feat_s[size_t(i - start)], 0, 0, 0, 0};
            int incoming = i == 0 ? S : 1;
            if (cached + incoming > C) {
                int drop = cached + incoming - C + T - 1;
                net.trim(cached, drop, KEEP);
                cached -= drop; dropped += drop; ++trims;
            }
            int64_t p0 = i == 0 ? 0 : S - 1 + i;
            for (int j = 0; j < incoming; ++j) {
                double e0 = now_s();
                net.encode(feats.data() + size_t(p0 + j - first_pos) * fdim, x.data());
                double e1 = now_s();
                net.decode(h.data(), x.data(), incoming > 1 ? 0 : prev, cached + j);
                ph[1] += e1 - e0; ph[2] += now_s() - e1;
            }
            cached += incoming;
            double l0 = now_s();
            float margin = 0;
            int id = net.logits(h.data(), &margin);
            prev = id;
            ids.push_back(uint32_t(id));
            std::string delta;
            if (vocab[size_t(id)].first == "word") {
                delta = (text.empty() ? "" : " ") + vocab[size_t(id)].second;
                text += delta; ++visible;
            } else ++skipped;
            double ws = now_s();
            ph[3] = ws - l0;
            std::ostringstream w;
            w << "{\"kind\":\"window\",\"index\":" << i << ",\"token_id\":" << id << ",\"text_position\":" << cached
              << ",\"encoder_position\":" << cached * kFramesPerToken << ",\"absolute_text_position\":" << S + i
              << ",\"absolute_encoder_position\":" << (S + i) * kFramesPerToken
              << ",\"processed_absolute_encoder_position\":" << processed << ",\"rolling_dropped_tokens\":" << dropped
              << ",\"rolling_trim_count\":" << trims << ",\"cache_logical_bytes\":" << size_t(cached) * per_token
              << ",\"logit_margin\":" << real(margin) << ",\"phase_seconds\":[";
            std::string tail = "],\"seconds\":" + real(ws) + "}";
            // The emit phase is measured around formatting and writing; it is reported as written so far.
            double m0 = now_s();
            std::string body = w.str();
            ph[4] = now_s() - m0;
            for (int k = 0; k < 5; ++k) body += (k ? "," : "") + real(ph[k]);
            emit(body + tail);
            if (!delta.empty()) {
                emit("{\"kind\":\"text_delta\",\"index\":" + std::to_string(i) +
                     ",\"text\":" + quote(delta, Controls::AllUnicode) + ",\"seconds\":" + real(ws) + "}");
                if (first_text < 0) first_text = ws;
                last_text = ws;
            }
        }
        const double t1 = now_s(), work = t1 - t0;
        work_total += work;
        const int64_t src_end = int64_t(S - P + end - 1) * kSamplesPerToken;
        // Before EOF the input already covers src_end, so min() is the source deadline in both cases.
        const double ready_at = double(std::min(in.total, src_end)) / kRate;
        std::ostringstream b;
        b << "{\"kind\":\"batch\",\"start_window\":" << start << ",\"end_window_exclusive\":" << end
          << ",\"started_seconds\":" << real(t0) << ",\"finished_seconds\":" << real(t1)
          << ",\"work_seconds\":" << real(work)
          << ",\"cache_allocated_bytes\":" << allocated << ",\"decoder_cached_tokens\":" << cached
          << ",\"rolling_trim_count\":" << trims << ",\"retained_audio_capacity_samples\":" << a.capacity
          << ",\"input_eof\":" << (src_end > in.total ? "true" : "false")
          << ",\"source_audio_ready_seconds\":" << real(ready_at)
          << ",\"relative_to_audio_clock_seconds\":" << real(t0 - ready_at) << "}";
        emit(b.str());
        start = end;
    }
    // Work must not overlap with input reading; both are disjoint intervals inside elapsed.
    const double elapsed = now_s();
    const double audio_s = double(in.total) / kRate;
    std::string digest;
    {
        std::vector<unsigned char> raw;
        for (uint32_t v : ids) for (int k = 0; k < 4; ++k) raw.push_back((v >> (8 * k)) & 0xff);
        digest = gatehouse::sha256_hex(raw);
    }
    auto opt = [](double v) { return v < 0 ? std::string("null") : real(v); };
    std::ostringstream c;
    c << "{\"kind\":\"complete\",\"status\":\"complete\",\"all_source_audio_observed\":true,\"audio_samples\":" << in.total
      << ",\"audio_seconds\":" << real(audio_s) << ",\"emitted_tokens\":" << ids.size()
      << ",\"generated_ids_sha256\":\"" << digest << "\",\"text_bytes\":" << text.size() << ",\"visible_tokens\":" << visible
      << ",\"skipped_tokens\":" << skipped << ",\"first_text_seconds\":" << opt(first_text)
      << ",\"last_text_seconds\":" << opt(last_text) << ",\"elapsed_seconds\":" << real(elapsed)
      << ",\"input_eof_detected_seconds\":" << real(in.eof_at)
      << ",\"completion_after_eof_detected_seconds\":" << real(elapsed - in.eof_at)
      << ",\"completion_relative_to_audio_clock_seconds\":" << real(elapsed - audio_s)
      << ",\"input_wait_seconds\":" << real(in.wait) << ",\"input_convert_seconds\":" << real(in.convert)
      << ",\"input_seconds\":" << real(in.wait + in.convert) << ",\"batch_work_seconds\":" << real(work_total)
      << ",\"peak_cache_allocated_bytes\":" << allocated << ",\"retained_audio_capacity_samples\":" << a.capacity << "}";
    emit(c.str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        emit(std::string("{\"kind\":\"error\",\"reason\":") + quote(e.what(), Controls::AllUnicode) + "}");
        std::fprintf(stderr, "gatehouse-stream: %s\n", e.what());
        return 2;
    }
}
