// A bounded, deterministic fuzz driver for the GCC sanitizer build, where libFuzzer is not
// available: it replays every seed of the corpus, then runs a fixed number of seeded mutations
// (bit flips, interesting integers, dictionary tokens, inserts, deletes, repeats, splices) and
// feeds each to the target's LLVMFuzzerTestOneInput. It takes libFuzzer's flag names, so the
// scripts run either engine the same way. It is not coverage-guided: for long runs use the
// libFuzzer build (README, "Fuzzing").
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" __attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)());
extern "C" __attribute__((weak)) void __sanitizer_print_stack_trace();

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// The input being run, for the crash handlers (which may only call async-signal-safe code).
const std::uint8_t* g_current = nullptr;
std::size_t g_current_size = 0;
char g_crash_path[4096] = "";
char g_crash_kind[16] = "crash";

void WriteStr(int fd, const char* s) {
  ssize_t n = ::write(fd, s, std::strlen(s));
  (void)n;
}

// Saves the current input where the user asked (-artifact_prefix) and says where.
void SaveCurrentInput() {
  if (g_current == nullptr || g_crash_path[0] == '\0') return;
  int fd = ::creat(g_crash_path, 0644);
  if (fd < 0) return;
  std::size_t off = 0;
  while (off < g_current_size) {
    ssize_t n = ::write(fd, g_current + off, g_current_size - off);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  ::close(fd);
  WriteStr(2, "==fuzz-driver== ");
  WriteStr(2, g_crash_kind);
  WriteStr(2, ": input saved to ");
  WriteStr(2, g_crash_path);
  WriteStr(2, "\n");
  g_current = nullptr;  // once
}

void OnFatalSignal(int sig) {
  // An uncaught exception ends here: where it was thrown is still on the stack.
  if (__sanitizer_print_stack_trace) __sanitizer_print_stack_trace();
  SaveCurrentInput();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void OnTimeout(int) {
  std::memcpy(g_crash_kind, "timeout", 8);
  WriteStr(2, "==fuzz-driver== timeout: one input ran longer than -timeout\n");
  SaveCurrentInput();
  ::_exit(70);  // libFuzzer's timeout exit code
}

struct Options {
  std::uint64_t runs = 0;  // mutations in all, spread over the seeds
  std::uint64_t seed = 1;
  std::size_t max_len = 64 * 1024;
  double max_total_time = 0;  // seconds; 0 = no limit
  unsigned timeout = 25;      // seconds for one input
  std::string dict;
  std::string artifact_prefix = "./";
  std::vector<std::string> inputs;
};

bool Flag(const std::string& arg, const char* name, std::string* value) {
  std::string prefix = std::string("-") + name + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

Bytes ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// libFuzzer's dictionary format: one "token" per line, with \\, \" and \xNN escapes.
std::vector<Bytes> ReadDict(const std::string& path) {
  std::vector<Bytes> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto q = line.find('"');
    auto e = line.rfind('"');
    if (line.empty() || line[0] == '#' || q == std::string::npos || e <= q) continue;
    Bytes tok;
    for (std::size_t i = q + 1; i < e; ++i) {
      if (line[i] == '\\' && i + 1 < e) {
        if (line[i + 1] == 'x' && i + 3 < e) {
          tok.push_back(static_cast<std::uint8_t>(std::stoi(line.substr(i + 2, 2), nullptr, 16)));
          i += 3;
        } else {
          tok.push_back(static_cast<std::uint8_t>(line[i + 1]));
          i += 1;
        }
      } else {
        tok.push_back(static_cast<std::uint8_t>(line[i]));
      }
    }
    if (!tok.empty()) out.push_back(std::move(tok));
  }
  return out;
}

class Mutator {
 public:
  Mutator(const std::vector<Bytes>* seeds, const std::vector<Bytes>* dict, std::size_t max_len)
      : seeds_(seeds), dict_(dict), max_len_(max_len) {}

  // Applies 1-4 mutations chosen by `rng` to `b`.
  void Mutate(Bytes& b, std::mt19937_64& rng) {
    int n = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) MutateOnce(b, rng);
    if (b.size() > max_len_) b.resize(max_len_);
  }

 private:
  static std::size_t Pick(std::mt19937_64& rng, std::size_t n) { return n == 0 ? 0 : rng() % n; }

  void MutateOnce(Bytes& b, std::mt19937_64& rng) {
    static const std::uint64_t kInteresting[] = {0,
                                                 1,
                                                 0x7f,
                                                 0x80,
                                                 0xff,
                                                 0x7fff,
                                                 0xffff,
                                                 0x7fffffff,
                                                 0x80000000,
                                                 0xffffffff,
                                                 1ull << 28,
                                                 1ull << 34,
                                                 0x7fffffffffffffffull,
                                                 0x8000000000000000ull,
                                                 0xffffffffffffffffull};
    switch (rng() % 10) {
      case 0:  // flip a bit
        if (!b.empty()) b[Pick(rng, b.size())] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // set a byte
        if (!b.empty()) b[Pick(rng, b.size())] = static_cast<std::uint8_t>(rng());
        break;
      case 2: {  // overwrite with an interesting integer, 1/2/4/8 bytes, either byte order
        std::uint64_t v = kInteresting[Pick(rng, std::size(kInteresting))];
        std::size_t width = std::size_t{1} << (rng() % 4);
        if (b.size() < width) break;
        std::size_t at = Pick(rng, b.size() - width + 1);
        bool big = rng() % 2;
        for (std::size_t k = 0; k < width; ++k) {
          std::size_t shift = 8 * (big ? width - 1 - k : k);
          b[at + k] = static_cast<std::uint8_t>(v >> shift);
        }
        break;
      }
      case 3: {  // insert random bytes
        std::size_t n = 1 + Pick(rng, 16);
        std::size_t at = Pick(rng, b.size() + 1);
        Bytes ins(n);
        for (auto& c : ins) c = static_cast<std::uint8_t>(rng());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        break;
      }
      case 4: {  // delete a range
        if (b.empty()) break;
        std::size_t at = Pick(rng, b.size());
        std::size_t n = 1 + Pick(rng, std::min<std::size_t>(b.size() - at, 64));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 5: {  // repeat a range: deep nesting, long values, many keys
        if (b.empty()) break;
        std::size_t at = Pick(rng, b.size());
        std::size_t n = 1 + Pick(rng, std::min<std::size_t>(b.size() - at, 32));
        Bytes chunk(b.begin() + static_cast<std::ptrdiff_t>(at),
                    b.begin() + static_cast<std::ptrdiff_t>(at + n));
        std::size_t times = 1 + Pick(rng, 64);
        for (std::size_t t = 0; t < times && b.size() + n <= max_len_; ++t) {
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), chunk.begin(), chunk.end());
        }
        break;
      }
      case 6:
      case 7: {  // insert or overwrite with a dictionary token
        if (dict_->empty()) return MutateOnce(b, rng);
        const Bytes& tok = (*dict_)[Pick(rng, dict_->size())];
        std::size_t at = Pick(rng, b.size() + 1);
        if (rng() % 2 == 0 || at + tok.size() > b.size()) {
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), tok.begin(), tok.end());
        } else {
          std::copy(tok.begin(), tok.end(), b.begin() + static_cast<std::ptrdiff_t>(at));
        }
        break;
      }
      case 8: {  // splice: our head, another seed's tail
        if (seeds_->empty()) break;
        const Bytes& other = (*seeds_)[Pick(rng, seeds_->size())];
        std::size_t cut = Pick(rng, b.size() + 1);
        std::size_t from = Pick(rng, other.size() + 1);
        b.resize(cut);
        b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
      case 9:  // truncate
        if (!b.empty()) b.resize(Pick(rng, b.size()));
        break;
    }
  }

  const std::vector<Bytes>* seeds_;
  const std::vector<Bytes>* dict_;
  std::size_t max_len_;
};

std::uint64_t Fnv1a(const Bytes& b) {
  std::uint64_t h = 1469598103934665603ull;
  for (auto c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

void Run(const Bytes& input, const Options& opt) {
  std::snprintf(g_crash_path, sizeof(g_crash_path), "%scrash-%016llx", opt.artifact_prefix.c_str(),
                static_cast<unsigned long long>(Fnv1a(input)));
  g_current = input.data();
  g_current_size = input.size();
  ::alarm(opt.timeout);
  LLVMFuzzerTestOneInput(input.data(), input.size());
  ::alarm(0);
  g_current = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (Flag(a, "runs", &v)) {
      opt.runs = std::stoull(v);
    } else if (Flag(a, "seed", &v)) {
      opt.seed = std::stoull(v);
    } else if (Flag(a, "max_len", &v)) {
      opt.max_len = std::stoull(v);
    } else if (Flag(a, "max_total_time", &v)) {
      opt.max_total_time = std::stod(v);
    } else if (Flag(a, "timeout", &v)) {
      opt.timeout = static_cast<unsigned>(std::stoul(v));
    } else if (Flag(a, "dict", &v)) {
      opt.dict = v;
    } else if (Flag(a, "artifact_prefix", &v)) {
      opt.artifact_prefix = v;
    } else if (a.rfind("-", 0) == 0) {
      std::fprintf(stderr, "fuzz-driver: ignoring libFuzzer flag %s\n", a.c_str());
    } else {
      opt.inputs.push_back(a);
    }
  }
  // Seeds in a fixed order, so a run is reproducible from -seed alone.
  std::vector<fs::path> files;
  for (const auto& in : opt.inputs) {
    if (fs::is_directory(in)) {
      for (const auto& e : fs::directory_iterator(in)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.emplace_back(in);
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<Bytes> seeds;
  for (const auto& f : files) seeds.push_back(ReadFile(f));
  if (seeds.empty()) seeds.emplace_back();
  std::vector<Bytes> dict;
  if (!opt.dict.empty()) dict = ReadDict(opt.dict);

  // Under a sanitizer its own SEGV/BUS/FPE handler reports (stack overflow included) and then
  // calls the death callback; an uncaught exception is an abort, which it leaves alone.
  if (__sanitizer_set_death_callback) {
    __sanitizer_set_death_callback(SaveCurrentInput);
    ::signal(SIGABRT, OnFatalSignal);
  } else {
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(sig, OnFatalSignal);
  }
  ::signal(SIGALRM, OnTimeout);
  ::signal(SIGPIPE, SIG_IGN);

  auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    std::fprintf(stderr, "fuzz-driver: seed %s (%zu bytes)\n",
                 files.empty() ? "<empty>" : files[i].c_str(), seeds[i].size());
    Run(seeds[i], opt);
  }
  std::fprintf(stderr, "fuzz-driver: %zu seeds replayed\n", seeds.size());
  Mutator mutator(&seeds, &dict, opt.max_len);
  std::uint64_t done = 0;
  for (; done < opt.runs; ++done) {
    if (opt.max_total_time > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            opt.max_total_time) {
      break;
    }
    // Each run's input depends only on (-seed, run number, corpus): run N replays alone.
    std::mt19937_64 rng(opt.seed * 0x9e3779b97f4a7c15ull + done);
    Bytes b = seeds[done % seeds.size()];
    mutator.Mutate(b, rng);
    Run(b, opt);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "fuzz-driver: done: %zu seeds, %llu mutations (-seed=%llu) in %.1f s\n",
               seeds.size(), static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(opt.seed), secs);
  return 0;
}
