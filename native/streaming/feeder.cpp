// gatehouse-feed: the streaming gate's paced feeder, a process of its own so that no Python thread, GIL or
// consumer work sits between a chunk's deadline and its write (harness/streaming/capture.py runs it).
//
//   gatehouse-feed --bytes N [--chunk-bytes 1280] [--bytes-per-second 64000] [--realtime-priority P]
//                  [--nice N] [--cpu K] [--spin-us 300]
//
// stdin:  exactly N bytes of input, then one go byte (sent by the harness after the engine's ready event);
//         stdin closing first means cancelled (exit 4, nothing written).
// stdout: the engine's stdin. Chunk k (ending at byte e) is written once the monotonic clock, counted from the
//         go byte's receipt, reaches e / bytes-per-second; never before. Sleeps with clock_nanosleep
//         (TIMER_ABSTIME) to spin-us before the deadline, then spins.
// stderr: JSON lines: "setup" (the scheduling actually applied and why any request was refused), "loaded",
//         "start" (CLOCK_MONOTONIC seconds at go), one "chunk" per write with its deadline and the clock just
//         before and just after the write, and "end" (status complete, broken_pipe or error).
// Exit status: 0 complete, 3 the engine closed its input, 2 error, 4 cancelled before go.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/json.hpp"

namespace {

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

using gatehouse::Controls;
using gatehouse::quote;
using gatehouse::real;

// One unbuffered write per line, so the harness sees every record even if this process is killed.
void report(const std::string& line) {
    std::string s = line + "\n";
    const char* p = s.data();
    size_t left = s.size();
    while (left) {
        ssize_t n = ::write(2, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        p += n; left -= size_t(n);
    }
}

[[noreturn]] void fail(const std::string& why, int status = 2) {
    report("{\"kind\":\"end\",\"status\":\"error\",\"message\":" + quote(why, Controls::AllUnicode) + "}");
    std::exit(status);
}

long arg_int(int argc, char** argv, int& i) {
    if (i + 1 >= argc) fail(std::string(argv[i]) + " needs a value");
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(argv[i + 1], &end, 10);
    if (errno || end == argv[i + 1] || *end) fail(std::string(argv[i]) + ": not an integer: " + argv[i + 1]);
    ++i;
    return v;
}

// Read exactly n bytes; false if stdin closed first.
bool read_exact(unsigned char* p, size_t n) {
    while (n) {
        ssize_t r = ::read(0, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail(std::string("reading stdin: ") + std::strerror(errno));
        if (r == 0) return false;
        p += r; n -= size_t(r);
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    long total = -1, chunk = 1280, rate = 64000, rt_prio = 0, nice_req = 0, cpu = -1, spin_us = 300;
    bool want_nice = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--bytes") total = arg_int(argc, argv, i);
        else if (a == "--chunk-bytes") chunk = arg_int(argc, argv, i);
        else if (a == "--bytes-per-second") rate = arg_int(argc, argv, i);
        else if (a == "--realtime-priority") rt_prio = arg_int(argc, argv, i);
        else if (a == "--nice") { nice_req = arg_int(argc, argv, i); want_nice = true; }
        else if (a == "--cpu") cpu = arg_int(argc, argv, i);
        else if (a == "--spin-us") spin_us = arg_int(argc, argv, i);
        else fail("unknown flag " + a);
    }
    if (total < 0) fail("--bytes is required");
    if (chunk <= 0 || rate <= 0 || 1000000000 % rate) fail("--chunk-bytes and --bytes-per-second must be positive, "
                                                           "and the rate must divide 1e9 (exact ns deadlines)");
    if (spin_us < 0 || spin_us > 5000) fail("--spin-us must be within 0..5000");
    ::signal(SIGPIPE, SIG_IGN);  // a closed engine input is EPIPE, reported, not a silent death

    // Scheduling: each request is applied if permitted; what was applied (and each refusal) is reported.
    std::string refused;
    auto refuse = [&](const std::string& what) {
        refused += (refused.empty() ? "" : ",") + quote(what, Controls::AllUnicode);
    };
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    if (want_nice && setpriority(PRIO_PROCESS, 0, int(nice_req)) != 0)
        refuse("nice " + std::to_string(nice_req) + ": " + std::strerror(errno));
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(int(cpu), &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) refuse("cpu " + std::to_string(cpu) + ": " + std::strerror(errno));
    }
    if (rt_prio > 0) {
        sched_param sp{};
        sp.sched_priority = int(rt_prio);
        if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) != 0)
            refuse("SCHED_FIFO " + std::to_string(rt_prio) + ": " + std::strerror(errno));
    }
    std::vector<unsigned char> pcm(size_t(total) + 1);
    bool locked = mlockall(MCL_CURRENT) == 0;
    int policy = sched_getscheduler(0) & ~SCHED_RESET_ON_FORK;
    sched_param got{};
    sched_getparam(0, &got);
    errno = 0;
    int nice_now = getpriority(PRIO_PROCESS, 0);
    report("{\"kind\":\"setup\",\"scheduler\":\"" + std::string(policy == SCHED_FIFO ? "SCHED_FIFO" : policy == SCHED_RR ?
           "SCHED_RR" : "SCHED_OTHER") + "\",\"realtime_priority\":" + std::to_string(got.sched_priority) +
           ",\"nice\":" + std::to_string(nice_now) + ",\"cpu\":" + (cpu >= 0 ? std::to_string(cpu) : "null") +
           ",\"memory_locked\":" + (locked ? "true" : "false") + ",\"spin_us\":" + std::to_string(spin_us) +
           ",\"refused\":[" + refused + "]}");

    if (!read_exact(pcm.data(), size_t(total))) {
        report("{\"kind\":\"end\",\"status\":\"cancelled\",\"message\":\"stdin closed before the input was loaded\"}");
        return 4;
    }
    report("{\"kind\":\"loaded\",\"bytes\":" + std::to_string(total) + "}");
    unsigned char go;
    if (!read_exact(&go, 1)) {
        report("{\"kind\":\"end\",\"status\":\"cancelled\",\"message\":\"stdin closed before the go byte\"}");
        return 4;
    }
    const int64_t start = now_ns(), ns_per_byte = 1000000000 / rate, spin = int64_t(spin_us) * 1000;
    report("{\"kind\":\"start\",\"monotonic_seconds\":" + real(double(start) / 1e9) + "}");
    long sent = 0;
    for (long k = 0; sent < total; ++k) {
        const long end = std::min(total, sent + chunk);
        const int64_t due = start + int64_t(end) * ns_per_byte;  // exact: the deadline in integer ns
        const double samples = double(end) / 4.0, deadline = samples / (double(rate) / 4.0);
        if (due - spin > now_ns()) {
            timespec ts{time_t((due - spin) / 1000000000), long((due - spin) % 1000000000)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {}
        }
        int64_t t;
        // Never early: the integer deadline and the figure the harness checks must both be reached.
        while ((t = now_ns()) < due || double(t - start) / 1e9 < deadline) {}
        const double before = double(t - start) / 1e9;
        const unsigned char* p = pcm.data() + sent;
        size_t left = size_t(end - sent);
        while (left) {
            ssize_t n = ::write(1, p, left);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EPIPE) {
                report("{\"kind\":\"end\",\"status\":\"broken_pipe\",\"sent_bytes\":" +
                       std::to_string(sent + (p - (pcm.data() + sent))) + ",\"total_bytes\":" + std::to_string(total) + "}");
                return 3;
            }
            if (n < 0) fail(std::string("writing the engine's input: ") + std::strerror(errno));
            p += n; left -= size_t(n);
        }
        const double after = double(now_ns() - start) / 1e9;
        sent = end;
        report("{\"kind\":\"chunk\",\"chunk\":" + std::to_string(k) + ",\"samples\":" + real(samples) +
               ",\"deadline_seconds\":" + real(deadline) + ",\"before_seconds\":" + real(before) +
               ",\"after_seconds\":" + real(after) + "}");
    }
    ::close(1);
    report("{\"kind\":\"end\",\"status\":\"complete\",\"sent_bytes\":" + std::to_string(sent) + ",\"total_bytes\":" +
           std::to_string(total) + "}");
    return 0;
}
