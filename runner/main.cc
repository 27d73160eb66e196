// ringtrain-runner: one rank of a data-parallel job. Reads the env contract (DESIGN.md), joins
// the rendezvous, forms the communicator, trains, and exits 0, 1-127 (permanent) or 128-255
// (retryable) with a one-line reason in the termination log.
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <openssl/rand.h>

#include <cerrno>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/env.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/stop.h"
#include "runner/data/idx.h"
#include "runner/local_launcher.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/model/gemm.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/failure.h"
#include "runner/rendezvous/gang_gate.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/rendezvous/prefix_store.h"
#include "runner/rendezvous/tcp_store.h"
#include "runner/train/config.h"
#include "runner/train/model_data.h"

namespace ringtrain {
namespace {

// How long rank 0 keeps serving the store after a failure, so the other ranks read its cause.
constexpr Duration kStoreLinger{std::chrono::seconds(2)};

// This rank's exit code for its own error: a stop by signal is 128 + the signal.
int OwnExitCode(const Status& s) {
  if (s.ok()) return kExitOk;
  if (StopSignal() != 0) return 128 + StopSignal();
  return ExitCodeFor(s);
}

// What a failed rank reports once the gang's first failure is agreed (failure.h).
using Outcome = std::optional<rendezvous::FailureReport>;

// Publishes this rank's failure (unless another was first) while its connections are still
// up, so the peers that see them close read the real cause rather than a lost peer.
void Resolve(rendezvous::Store& store, const train::RankEnv& env, const Status& s,
             Outcome& outcome) {
  if (s.ok() || outcome || env.world_size == 1) return;
  outcome = rendezvous::ResolveFailure(store, env.rank, s, OwnExitCode(s));
}

void WriteTerminationLog(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::trunc);
  if (out) out << line << "\n";
}

Status WriteResult(const std::string& path, const train::TrainResult& r) {
  nlohmann::json j = {{"task", r.regression ? "regression" : "classification"},
                      {"test_loss", r.test_loss},
                      {"epochs", r.epochs},
                      {"steps", r.steps},
                      {"steps_this_run", r.steps_this_run},
                      {"wall_seconds", r.wall_seconds},
                      {"samples_per_second", r.samples_per_second},
                      {"world_size", r.world_size},
                      {"data_wait_seconds", r.data_wait_seconds},
                      {"allreduce_wait_seconds", r.allreduce_wait_seconds},
                      {"resumed", r.resumed},
                      {"recoveries", r.recoveries},
                      {"recovery_seconds", r.recovery_seconds},
                      {"recovery_steps_lost", r.recovery_steps_lost}};
  if (!r.resume_warning.empty()) j["resume_warning"] = r.resume_warning;
  // Regression reports the test MSE (the test loss) instead of an accuracy.
  if (r.regression) {
    j["test_mse"] = r.test_loss;
  } else {
    j["test_accuracy"] = r.test_accuracy;
  }
  // Every write checked, the close too: on a full volume the file was left empty and the run
  // "Succeeded" with no accuracy (review).
  const std::string tmp = path + ".tmp";
  const std::string text = j.dump(2) + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return ErrnoStatus(StatusCodeForErrno(errno), "result file " + tmp, errno);
  std::size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return ErrnoStatus(StatusCodeForErrno(err), "result file " + path, err);
  }
  return Status::Ok();
}

// The address peers use to reach this rank: explicit, the pod IP (downward API), loopback for
// a local gang, else the host name (resolvable through the job's headless Service).
std::string AdvertiseAddress(const train::RankEnv& env) {
  if (auto a = GetEnv("RINGTRAIN_ADVERTISE_ADDR")) return *a;
  if (auto a = GetEnv("POD_IP")) return *a;
  if (env.master_addr == "127.0.0.1" || env.master_addr == "localhost") return "127.0.0.1";
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') return host;
  return "127.0.0.1";
}

// Everything after the store exists: rendezvous (and recovery rounds), communicator, training.
Status TrainWithStore(const train::RankEnv& env, const train::TrainConfig& config,
                      const rank::Placement& placement, metrics::RunnerMetrics* metrics,
                      const train::TrainingData& data, rendezvous::Store& store, Outcome& outcome) {
  rank::RankDeps deps;
  deps.store = &store;
  deps.train = data.idx_train();
  deps.test = data.idx_test();
  deps.train_table = data.table_train();
  deps.test_table = data.table_test();
  deps.metrics = metrics;
  deps.stop = &StopFlag();
  deps.drain = &DrainFlag();
  deps.advertise_host = AdvertiseAddress(env);
  deps.report_failure = [&](rendezvous::Store& round_store, const Status& s) {
    Resolve(round_store, env, s, outcome);
  };
  ASSIGN_OR_RETURN(const train::TrainResult result, rank::TrainRank(env, config, placement, deps));
  spdlog::info("done: {} steps, {} {:.4f}, {:.0f} samples/s, {:.1f}s", result.steps,
               result.regression ? "test_mse" : "test_accuracy",
               result.regression ? result.test_loss : result.test_accuracy,
               result.samples_per_second, result.wall_seconds);
  if (env.rank == 0 && !config.result_file.empty()) {
    RETURN_IF_ERROR(WriteResult(config.result_file, result));
  }
  return Status::Ok();
}

// Connects to the gang's store, then trains; publishes a failure before the store goes.
Status Train(const train::RankEnv& env, const train::TrainConfig& config,
             const rank::Placement& placement, metrics::RunnerMetrics* metrics,
             const train::TrainingData& data, const std::string& store_host, int store_port,
             const std::string& token, Outcome& outcome) {
  rendezvous::TcpStoreClientOptions so;
  so.host = store_host;
  so.port = store_port;
  so.token = token;
  so.connect_timeout = env.rendezvous_timeout;
  ASSIGN_OR_RETURN(auto client, rendezvous::TcpStoreClient::Create(so));
  rendezvous::PrefixStore store(*client, env.job + "/" + std::to_string(env.attempt) + "/");
  Status s = TrainWithStore(env, config, placement, metrics, data, store, outcome);
  Resolve(store, env, s, outcome);
  return s;
}

Status Run(const train::RankEnv& env, train::TrainConfig config, metrics::RunnerMetrics* metrics,
           Outcome& outcome) {
  // Data first, then the model against it: a bad file or a model that does not fit is a
  // permanent error and must not cost the others a rendezvous wait.
  ASSIGN_OR_RETURN(
      const train::TrainingData data,
      train::LoadTrainingData(train::DatasetSpecOf(config), config.seed, config.model.classes));
  if (StopRequested()) return StoppedStatus("data loading");
  const bool preset = !config.model_spec.has_value();
  // IDX images carry no class count: the dataset spec's, else --model's 10, for every engine.
  if (data.idx) config.model.classes = data.shape.outputs;
  ASSIGN_OR_RETURN(config.model_spec, train::ResolveModelSpec(config, data.shape));
  ASSIGN_OR_RETURN(const rank::Placement placement, rank::PlaceThisRank(config, env));
  ASSIGN_OR_RETURN(const model::ShapeReport report, model::InferShapes(*config.model_spec));
  spdlog::info("loaded {}; model {} ({} parameters)", data.description,
               preset ? config.model.name : std::string("from --model-spec"), report.params);

  // The rendezvous clock starts once the whole gang is placed: a scheduling wait (a peer
  // unschedulable, pulling its image) is the operator's to bound, not a rendezvous timeout.
  if (!env.gang_gate.empty()) {
    RETURN_IF_ERROR(rendezvous::WaitForGangGate(env.gang_gate, env.gang_gate_timeout));
  }

  // A gang of one has no peer to reach its store: it keeps it in memory and opens no socket.
  if (env.world_size == 1) {
    rendezvous::MemoryStore memory;
    rendezvous::PrefixStore store(memory, env.job + "/" + std::to_string(env.attempt) + "/");
    return TrainWithStore(env, config, placement, metrics, data, store, outcome);
  }
  std::string store_host = env.master_addr;
  int store_port = env.master_port;
  std::unique_ptr<rendezvous::TcpStoreServer> server;
  if (env.rank == 0) {
    ASSIGN_OR_RETURN(server,
                     rendezvous::TcpStoreServer::Create(env.bind_addr, env.master_port, env.token));
    store_host = env.bind_addr == "0.0.0.0" ? "127.0.0.1" : env.bind_addr;
    store_port = server->port();
  }
  Status s =
      Train(env, config, placement, metrics, data, store_host, store_port, env.token, outcome);
  if (!s.ok() && server != nullptr && s.code() != StatusCode::kCancelled) {
    // The other ranks read the root cause of a failure from this store, a permanent one as
    // much as a retryable one: keep it up briefly (a stop request still ends the wait).
    (void)SleepOrStop(kStoreLinger);
  }
  return s;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (flags::HelpRequested(args)) {
    std::fputs(train::TrainFlagsHelp().c_str(), stdout);
    return 0;
  }
  InstallStopSignalHandlers();
  // Several GPUs in this pod: start one rank per GPU and supervise them.
  auto launch = LocalLaunchFromEnvironment(args);
  if (launch.ok() && launch->nproc > 1) {
    InitLogging("launcher");
    return RunLocalRanks(*launch);
  }
  auto env = train::RankEnvFromEnvironment();
  InitLogging("rank " + (env.ok() ? std::to_string(env->rank) : std::string("?")));
  auto fail = [&](const Status& s, const std::string& log_path, const Outcome& outcome = {}) {
    int code = outcome ? outcome->exit_code : OwnExitCode(s);
    std::string message = outcome ? outcome->message : s.ToString();
    if (outcome && message != s.ToString()) spdlog::error("{}", s.ToString());
    spdlog::error("{} (exit code {}, {})", message, code, code >= 128 ? "retryable" : "permanent");
    WriteTerminationLog(log_path, message);
    return code;
  };
  if (!launch.ok()) return fail(launch.status(), "/dev/termination-log");
  if (!env.ok()) return fail(env.status(), "/dev/termination-log");
  auto config = train::ParseTrainFlags(args);
  if (!config.ok()) return fail(config.status(), env->termination_log);

  // One BLAS thread per rank: ranks already fill the cores, and oversubscription is slower.
  auto blas_threads = GetEnvInt("RINGTRAIN_BLAS_THREADS", 1, 1, 256);
  if (!blas_threads.ok()) return fail(blas_threads.status(), env->termination_log);
  model::SetKernelThreads(static_cast<int>(*blas_threads));
  // RINGTRAIN_GEMM=openblas|onednn overrides the matrix-product backend (default onednn).
  if (auto gemm = GetEnv("RINGTRAIN_GEMM"); gemm && !gemm->empty()) {
    auto backend = model::GemmBackendFromName(*gemm);
    if (!backend) {
      return fail(
          InvalidArgument("RINGTRAIN_GEMM: unknown backend '" + *gemm + "' (onednn, openblas)"),
          env->termination_log);
    }
    model::SetGemmBackend(*backend);
  }

  metrics::RunnerMetrics metrics({env->job, env->ns, env->rank});
  // Before the rendezvous, /status already says which attempt and gang this rank is starting
  // for (the operator reads a replacement's or a new attempt's rank 0 from the first poll).
  metrics::Progress starting;
  starting.attempt = env->attempt;
  starting.world_size = env->world_size;
  metrics.UpdateProgress(starting);
  metrics.SetWorldSize(env->world_size);
  if (env->metrics_port >= 0) {
    Status s = metrics.Serve(env->bind_addr, env->metrics_port);
    if (!s.ok()) return fail(s.WithContext("metrics server"), env->termination_log);
    spdlog::info("serving /metrics and /status on port {}", metrics.port());
  }
  Outcome outcome;
  Status s;
  try {
    s = Run(*env, *config, &metrics, outcome);
  } catch (const std::bad_alloc&) {
    // The last resort for an allocation no check foresaw (a model too large for this process is
    // refused naming its size before it is allocated): a restarted pod gets the same memory.
    s = FailedPrecondition(
        "out of memory: an allocation failed (std::bad_alloc); give the rank more memory, or "
        "train a smaller model, batch or dataset");
  }
  if (!s.ok()) return fail(s, env->termination_log, outcome);
  // The contract: rank 0's final /status is its termination message, so the operator knows the
  // final step and epoch even when its last poll of /status is seconds old.
  if (env->rank == 0) WriteTerminationLog(env->termination_log, metrics.FinalStatusJson());
  return 0;
}

}  // namespace
}  // namespace ringtrain

int main(int argc, char** argv) { return ringtrain::Main(argc, argv); }
