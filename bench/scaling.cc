// attn-scaling: time and peak memory of one attention head as T doubles.
//
//   attn-scaling [--kernel streaming] [--threads 1] [--d 128] [--causal 0]
//                [--from 512] [--to 65536] [--min-time 0.5] [--json FILE]
//
// For each T (T_q = T_k = T, one head, dense [T, d] float32 inputs uniform in
// [-1, 1]) a child process is forked, so each measurement has its own
// high-water mark of resident memory. The child allocates and touches Q, K,
// V and O, reads its resident set size, then calls attn::attention once
// (a warm-up, unless it took over a second) and again until --min-time
// seconds have passed (at least once), and reports:
//   - seconds per call (minimum over the calls; thread CPU time for one
//     thread, wall clock for more, as attn-bench does),
//   - extra peak memory: getrusage's maximum RSS minus the RSS before the
//     first call, i.e. what the kernel itself (scratch, thread stacks,
//     OpenMP pools) added on top of the inputs and output.
// A kernel that refuses a shape (attn::Error, e.g. naive's guard against
// materialising more than 1 GiB of scores) is reported with its message; a
// child that dies (a crash, the OOM killer) is reported as such.
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.h"

namespace {

struct Args {
  std::string kernel = "streaming";
  int threads = 1;
  int64_t d = 128;
  bool causal = false;
  int64_t from = 512, to = 65536;
  double min_time = 0.5;
  std::string json;
};

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t ResidentBytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  const int got = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  return got == 2 ? int64_t(pages_resident) * sysconf(_SC_PAGESIZE) : -1;
}

int64_t PeakResidentBytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;  // Linux: kilobytes
}

attn::KernelId ParseKernel(const std::string& name) {
  try {
    return attn::ParseKernel(name);
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "attn-scaling: %s\n", e.what());
    std::exit(2);
  }
}

struct Result {
  bool ok = false;
  double seconds = 0.0;
  int calls = 0;
  double input_mib = 0.0, extra_mib = 0.0;
  char error[400] = {0};
};

// Runs in the child; never returns.
[[noreturn]] void Child(const Args& a, int64_t T, int fd) {
  Result r;
  const size_t n = size_t(T * a.d);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> q(n), k(n), v(n), out(n, 0.0f);
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = dist(rng);
  r.input_mib = double(4 * n * 4) / (1 << 20);
  attn::Problem p;
  p.q_len = p.kv_len = T;
  p.head_dim = a.d;
  p.q = attn::DenseBHTD(static_cast<const float*>(q.data()), 1, T, a.d);
  p.k = attn::DenseBHTD(static_cast<const float*>(k.data()), 1, T, a.d);
  p.v = attn::DenseBHTD(static_cast<const float*>(v.data()), 1, T, a.d);
  p.out = attn::DenseBHTD(out.data(), 1, T, a.d);
  p.causal = a.causal ? attn::Causal::kTopLeft : attn::Causal::kNone;
  attn::Options o;
  o.kernel = ParseKernel(a.kernel);
  o.threads = a.threads;
  const int64_t rss0 = ResidentBytes();
  try {
    // The first call is a warm-up (first-use set-up, scratch) unless it
    // took a second or more, when that overhead is noise and it counts.
    double best = 1e300, spent = 0.0;
    bool warm = false;
    while (r.calls == 0 || spent < a.min_time) {
      const double c0 = ThreadCpuSeconds(), w0 = WallSeconds();
      attn::attention(p, o);
      const double t = a.threads == 1 ? ThreadCpuSeconds() - c0 : WallSeconds() - w0;
      if (!warm && t < 1.0) {
        warm = true;
        continue;
      }
      warm = true;
      best = std::min(best, t);
      spent += t;
      ++r.calls;
    }
    r.seconds = best;
    r.ok = true;
  } catch (const std::exception& e) {
    std::snprintf(r.error, sizeof(r.error), "%s", e.what());
  }
  r.extra_mib = double(PeakResidentBytes() - rss0) / (1 << 20);
  if (write(fd, &r, sizeof(r)) != ssize_t(sizeof(r))) _exit(3);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "attn-scaling: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--kernel") a.kernel = next();
    else if (s == "--threads") a.threads = std::atoi(next().c_str());
    else if (s == "--d") a.d = std::atoll(next().c_str());
    else if (s == "--causal") a.causal = std::atoi(next().c_str()) != 0;
    else if (s == "--from") a.from = std::atoll(next().c_str());
    else if (s == "--to") a.to = std::atoll(next().c_str());
    else if (s == "--min-time") a.min_time = std::atof(next().c_str());
    else if (s == "--json") a.json = next();
    else {
      std::fprintf(stderr,
                   "usage: attn-scaling [--kernel K] [--threads N] [--d D] [--causal 0|1] "
                   "[--from T] [--to T] [--min-time S] [--json FILE]\n");
      return s == "--help" || s == "-h" ? 0 : 2;
    }
  }
  ParseKernel(a.kernel);
  FILE* json = a.json.empty() ? nullptr : std::fopen(a.json.c_str(), "w");
  std::printf("# attn-scaling: kernel %s, %d thread%s, d %lld, causal %d, target %s\n",
              a.kernel.c_str(), a.threads, a.threads == 1 ? "" : "s", (long long)a.d,
              int(a.causal), attn::CurrentTarget().c_str());
  std::printf("| T | time per call (s) | x previous T | GFLOP/s | inputs+output (MiB) | extra peak "
              "memory (MiB) | calls |\n|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  double prev = 0.0;
  for (int64_t T = a.from; T <= a.to; T *= 2) {
    int fds[2];
    if (pipe(fds) != 0) return 2;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      Child(a, T, fds[1]);
    }
    close(fds[1]);
    Result r;
    const ssize_t got = read(fds[0], &r, sizeof(r));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const double fl = 4.0 * double(T) * double(T) * double(a.d) * (a.causal ? 0.5 : 1.0);
    std::string line;
    char buf[512];
    if (got != ssize_t(sizeof(r))) {
      std::snprintf(buf, sizeof(buf), "| %lld | child died (%s %d) | | | | | |",
                    (long long)T, WIFSIGNALED(status) ? "signal" : "exit",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      line = buf;
      if (json)
        std::fprintf(json, "{\"T\": %lld, \"ok\": false, \"error\": \"child died\"}\n",
                     (long long)T);
    } else if (!r.ok) {
      std::snprintf(buf, sizeof(buf), "| %lld | error: %s | | | %.1f | %.1f | 0 |", (long long)T,
                    r.error, r.input_mib, r.extra_mib);
      line = buf;
      if (json) {
        std::string msg = r.error;
        std::replace(msg.begin(), msg.end(), '"', '\'');
        std::fprintf(json,
                     "{\"kernel\": \"%s\", \"threads\": %d, \"T\": %lld, \"d\": %lld, "
                     "\"ok\": false, \"error\": \"%s\", \"extra_mib\": %.2f}\n",
                     a.kernel.c_str(), a.threads, (long long)T, (long long)a.d, msg.c_str(),
                     r.extra_mib);
      }
    } else {
      char ratio[32] = "";
      if (prev > 0) std::snprintf(ratio, sizeof(ratio), "%.2f", r.seconds / prev);
      std::snprintf(buf, sizeof(buf), "| %lld | %.4g | %s | %.1f | %.1f | %.1f | %d |",
                    (long long)T, r.seconds, ratio, fl / r.seconds * 1e-9, r.input_mib,
                    r.extra_mib, r.calls);
      line = buf;
      prev = r.seconds;
      if (json)
        std::fprintf(json,
                     "{\"kernel\": \"%s\", \"threads\": %d, \"T\": %lld, \"d\": %lld, "
                     "\"ok\": true, \"seconds\": %.6g, \"gflops\": %.3f, \"input_mib\": %.2f, "
                     "\"extra_mib\": %.2f, \"calls\": %d}\n",
                     a.kernel.c_str(), a.threads, (long long)T, (long long)a.d, r.seconds,
                     fl / r.seconds * 1e-9, r.input_mib, r.extra_mib, r.calls);
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (json) std::fflush(json);
  }
  if (json) std::fclose(json);
  return 0;
}
