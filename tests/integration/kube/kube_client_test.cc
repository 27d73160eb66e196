// The cpprestsdk KubeClient against the fake API server: CRUD, typed errors, retries, rate
// limiting and raw watch streams.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "tests/integration/kube/kube_test_util.h"

namespace ringtrain::kube {
namespace {

using testing::Eventually;
using testing::KubeTest;
using testing::LoadManifest;
using testing::Pod;

std::string Rv(const Json& o) { return o["metadata"]["resourceVersion"].get<std::string>(); }

TEST_F(KubeTest, PodRoundTrip) {
  auto created = client_->Create(kPods, "default", Pod("p1"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["metadata"]["name"], "p1");
  EXPECT_FALSE(Rv(*created).empty());

  ASSERT_TRUE(client_->Create(kPods, "default", Pod("p2", "other")).ok());
  auto got = client_->Get(kPods, "default", "p1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)["metadata"]["uid"], (*created)["metadata"]["uid"]);

  ListOptions by_label;
  by_label.label_selector = "app in (demo)";
  auto list = client_->List(kPods, "default", by_label);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ((*list)["items"].size(), 1u);
  EXPECT_EQ((*list)["items"][0]["metadata"]["name"], "p1");
  auto all = client_->List(kPods, "", {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)["items"].size(), 2u);

  Json update = *got;
  update["metadata"]["labels"]["tier"] = "a";
  auto updated = client_->Update(kPods, "default", update);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  EXPECT_EQ((*updated)["metadata"]["labels"]["tier"], "a");
  EXPECT_NE(Rv(*updated), Rv(*got));

  auto patched = client_->Patch(kPods, "default", "p1", {{"metadata", {{"labels", {{"x", "y"}}}}}},
                                PatchType::kMerge);
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ((*patched)["metadata"]["labels"]["x"], "y");
  EXPECT_EQ((*patched)["metadata"]["labels"]["tier"], "a");

  auto status = client_->Patch(kPods, "default", "p1", {{"status", {{"phase", "Running"}}}},
                               PatchType::kMerge, /*status=*/true);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ((*status)["status"]["phase"], "Running");

  ASSERT_TRUE(client_->Delete(kPods, "default", "p1").ok());
  auto gone = client_->Get(kPods, "default", "p1");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("p1"), std::string::npos) << gone.status().message();
  Status again = client_->Delete(kPods, "default", "p1");
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
}

TEST_F(KubeTest, EmptyNamespaceMeansTheConfiguredOne) {
  ASSERT_TRUE(client_->Create(kPods, "", Pod("p1")).ok());
  EXPECT_TRUE(client_->Get(kPods, "", "p1").ok());
}

TEST_F(KubeTest, TypedErrors) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("p1")).ok());
  auto dup = client_->Create(kPods, "default", Pod("p1"));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists) << dup.status().ToString();

  auto first = client_->Get(kPods, "default", "p1");
  ASSERT_TRUE(first.ok());
  Json a = *first;
  a["metadata"]["labels"]["v"] = "1";
  ASSERT_TRUE(client_->Update(kPods, "default", a).ok());
  Json stale = *first;  // still carries the old resourceVersion
  stale["metadata"]["labels"]["v"] = "2";
  auto conflict = client_->Update(kPods, "default", stale);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.status().code(), StatusCode::kAborted) << conflict.status().ToString();

  DeleteOptions wrong_uid;
  wrong_uid.precondition_uid = "00000000-0000-0000-0000-000000000000";
  EXPECT_EQ(client_->Delete(kPods, "default", "p1", wrong_uid).code(), StatusCode::kAborted);

  Json bad = Pod("Upper-Case");
  auto invalid = client_->Create(kPods, "default", bad);
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find("metadata.name"), std::string::npos)
      << invalid.status().message();

  server_->FailNextRequests("GET", "pods", 401, 1);
  EXPECT_EQ(client_->Get(kPods, "default", "p1").status().code(), StatusCode::kUnauthenticated);
  server_->FailNextRequests("GET", "pods", 403, 1);
  EXPECT_EQ(client_->Get(kPods, "default", "p1").status().code(), StatusCode::kPermissionDenied);
}

TEST_F(KubeTest, TrainingJobRoundTripAndValidation) {
  CreateCrd();
  Json job = LoadManifest("manifests/examples/fashion-mnist-mlp.yaml");
  auto created = client_->Create(kTrainingJobs, "default", job);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["spec"]["replicas"], 2);

  auto got = client_->Get(kTrainingJobs, "default", "fashion-mnist-mlp");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  Json with_status = *got;
  with_status["status"] = {{"phase", "Running"}, {"restarts", 0}};
  auto status = client_->UpdateStatus(kTrainingJobs, "default", with_status);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ((*status)["status"]["phase"], "Running");
  EXPECT_EQ((*status)["metadata"]["generation"], (*got)["metadata"]["generation"]);

  // The stale resourceVersion of `got` now conflicts.
  Json stale = *got;
  stale["spec"]["replicas"] = 3;
  auto conflict = client_->Update(kTrainingJobs, "default", stale);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.status().code(), StatusCode::kAborted);

  auto dup = client_->Create(kTrainingJobs, "default", job);
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);

  Json zero = job;
  zero["metadata"]["name"] = "zero";
  zero["spec"]["replicas"] = 0;
  auto invalid = client_->Create(kTrainingJobs, "default", zero);
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find("spec.replicas"), std::string::npos)
      << invalid.status().message();
  EXPECT_NE(invalid.status().message().find("greater than or equal to 1"), std::string::npos)
      << invalid.status().message();

  auto patched = client_->Patch(kTrainingJobs, "default", "fashion-mnist-mlp",
                                {{"spec", {{"replicas", 4}}}}, PatchType::kMerge);
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ((*patched)["spec"]["replicas"], 4);

  ASSERT_TRUE(client_->Delete(kTrainingJobs, "default", "fashion-mnist-mlp").ok());
  EXPECT_EQ(client_->Get(kTrainingJobs, "default", "fashion-mnist-mlp").status().code(),
            StatusCode::kNotFound);
}

TEST_F(KubeTest, ReadsRetryAfter429And5xx) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("p1")).ok());
  auto before = server_->RequestCount("GET", "pods");
  server_->FailNextRequests("GET", "pods", 429, 2, /*retry_after_seconds=*/1);
  auto got = client_->Get(kPods, "default", "p1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(server_->RequestCount("GET", "pods") - before, 3);

  server_->FailNextRequests("GET", "pods", 503, 1);
  EXPECT_TRUE(client_->Get(kPods, "default", "p1").ok());

  // Bounded: more failures than retries surface as the typed error.
  server_->FailNextRequests("GET", "pods", 500, 10);
  ClientOptions one_retry;
  one_retry.max_retries = 1;
  auto c = NewClient(one_retry);
  auto failed = c->Get(kPods, "default", "p1");
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
}

TEST_F(KubeTest, WritesRetryOnlyOn429) {
  auto before = server_->RequestCount("POST", "pods");
  server_->FailNextRequests("POST", "pods", 429, 1, 1);
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("p1")).ok());
  EXPECT_EQ(server_->RequestCount("POST", "pods") - before, 2);

  before = server_->RequestCount("POST", "pods");
  server_->FailNextRequests("POST", "pods", 500, 1);
  auto failed = client_->Create(kPods, "default", Pod("p2"));
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(server_->RequestCount("POST", "pods") - before, 1);

  server_->FailNextRequests("POST", "pods", 429, 10, 0);
  auto throttled = client_->Create(kPods, "default", Pod("p3"));
  EXPECT_EQ(throttled.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(KubeTest, RateLimiterCapsWrites) {
  ClientOptions slow;
  slow.qps = 10;
  slow.burst = 2;
  auto c = NewClient(slow);
  // Throttled writes wait their turn and all succeed; how long each waits is the token
  // bucket's rule, tested on a fake clock (tests/unit/controller/token_bucket_test.cc).
  const auto before = server_->RequestCount("POST", "pods");
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(c->Create(kPods, "default", Pod("p" + std::to_string(i))).ok());
  }
  EXPECT_EQ(server_->RequestCount("POST", "pods") - before, 8);

  ClientOptions tight;
  tight.qps = 0.1;
  tight.burst = 1;
  tight.max_throttle_wait = std::chrono::milliseconds(100);
  auto t = NewClient(tight);
  ASSERT_TRUE(t->Create(kPods, "default", Pod("t0")).ok());
  EXPECT_EQ(t->Create(kPods, "default", Pod("t1")).status().code(), StatusCode::kDeadlineExceeded);
}

// Reads events until one of `type` arrives (or 10 s pass); returns all events seen.
std::vector<WatchEvent> ReadUntil(WatchStream* w, const std::string& type) {
  std::vector<WatchEvent> seen;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = w->Next(std::chrono::milliseconds(500));
    if (!e.ok()) {
      if (e.status().code() == StatusCode::kDeadlineExceeded) continue;
      ADD_FAILURE() << e.status().ToString();
      break;
    }
    if (!e->has_value()) break;
    seen.push_back(**e);
    if (seen.back().type == type) break;
  }
  return seen;
}

TEST_F(KubeTest, WatchSeesAddedModifiedDeletedAndBookmark) {
  auto list = client_->List(kPods, "default", {});
  ASSERT_TRUE(list.ok());
  WatchOptions options;
  options.resource_version = (*list)["metadata"]["resourceVersion"];
  options.label_selector = "app=demo";
  auto w = client_->Watch(kPods, "default", options);
  ASSERT_TRUE(w.ok()) << w.status().ToString();

  ASSERT_TRUE(client_->Create(kPods, "default", Pod("w1")).ok());
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("ignored", "other")).ok());
  // A big label so the event line spans several chunks and reads.
  std::string big(20000, 'x');
  ASSERT_TRUE(client_
                  ->Patch(kPods, "default", "w1", {{"metadata", {{"annotations", {{"big", big}}}}}},
                          PatchType::kMerge)
                  .ok());
  ASSERT_TRUE(client_->Delete(kPods, "default", "w1").ok());

  // A pod's DELETE is a MODIFIED (deletionTimestamp) and then a DELETED, as in transcript 05.
  auto events = ReadUntil(w->get(), "DELETED");
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().type, "ADDED");
  EXPECT_EQ(events.front().object["metadata"]["name"], "w1");
  EXPECT_EQ(events[1].type, "MODIFIED");
  EXPECT_EQ(events[1].object["metadata"]["annotations"]["big"], big);
  EXPECT_EQ(events.back().type, "DELETED");
  for (const auto& e : events) EXPECT_EQ(e.object["metadata"]["name"], "w1");

  auto bookmark = ReadUntil(w->get(), "BOOKMARK");
  ASSERT_FALSE(bookmark.empty());
  EXPECT_EQ(bookmark.back().type, "BOOKMARK");
  EXPECT_FALSE(bookmark.back().object["metadata"]["resourceVersion"].get<std::string>().empty());
}

// DeleteOptions.gracePeriodSeconds reaches the API server: the pod (bound to a node) is
// terminating with that grace, as t4-03-pod-delete-grace.txt recorded; without it, its own.
TEST_F(KubeTest, ADeleteWithAGraceGivesThePodThatGrace) {
  auto list = client_->List(kPods, "default", {});
  ASSERT_TRUE(list.ok());
  WatchOptions options;
  options.resource_version = (*list)["metadata"]["resourceVersion"];
  auto w = client_->Watch(kPods, "default", options);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const char* name : {"short", "own"}) {
    Json pod = Pod(name);
    pod["spec"]["nodeName"] = "node-0";
    ASSERT_TRUE(client_->Create(kPods, "default", pod).ok());
  }
  DeleteOptions shortened;
  shortened.grace_period_seconds = 1;
  ASSERT_TRUE(client_->Delete(kPods, "default", "short", shortened).ok());
  ASSERT_TRUE(client_->Delete(kPods, "default", "own").ok());
  // Both stay, terminating, until their kubelet deletes them with grace 0
  // (t4-05-binding-graceful-delete.txt).
  std::map<std::string, Json> terminating;
  for (int i = 0; i < 4 && terminating.size() < 2; ++i) {
    for (const auto& e : ReadUntil(w->get(), "MODIFIED")) {
      EXPECT_NE(e.type, "DELETED") << e.object.dump();
      if (e.type == "MODIFIED" && e.object["metadata"].contains("deletionTimestamp")) {
        terminating[e.object["metadata"]["name"]] = e.object["metadata"];
      }
    }
  }
  ASSERT_EQ(terminating.size(), 2u);
  EXPECT_EQ(terminating["short"]["deletionGracePeriodSeconds"], 1);
  EXPECT_EQ(terminating["own"]["deletionGracePeriodSeconds"], 30);
  DeleteOptions now;
  now.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(kPods, "default", "own", now).ok());
  const auto events = ReadUntil(w->get(), "DELETED");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().type, "DELETED");
  EXPECT_EQ(events.back().object["metadata"]["name"], "own");
}

TEST_F(KubeTest, WatchFromCompactedVersionGets410) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("p1")).ok());
  auto list = client_->List(kPods, "default", {});
  ASSERT_TRUE(list.ok());
  std::string old_rv = (*list)["metadata"]["resourceVersion"];
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("p2")).ok());
  server_->ForceCompaction();
  WatchOptions options;
  options.resource_version = old_rv;
  auto w = client_->Watch(kPods, "default", options);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto e = (*w)->Next(std::chrono::seconds(5));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ((*e)->type, "ERROR");
  EXPECT_EQ((*e)->object["code"], 410);
  EXPECT_EQ((*e)->object["reason"], "Expired");
  auto end = (*w)->Next(std::chrono::seconds(5));
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_FALSE(end->has_value());
}

TEST_F(KubeTest, WatchEndsWhenTheServerEndsIt) {
  WatchOptions options;
  options.timeout_seconds = 1;
  auto w = client_->Watch(kPods, "default", options);
  ASSERT_TRUE(w.ok());
  auto events = ReadUntil(w->get(), "never");
  EXPECT_TRUE(events.empty());
  auto end = (*w)->Next(std::chrono::seconds(1));
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());

  auto w2 = client_->Watch(kPods, "default", {});
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE(Eventually([&] { return server_->OpenWatchCount() >= 1; }));
  server_->CloseAllWatches();
  auto end2 = (*w2)->Next(std::chrono::seconds(5));
  ASSERT_TRUE(end2.ok()) << end2.status().ToString();
  EXPECT_FALSE(end2->has_value());
}

TEST_F(KubeTest, WatchCloseIsPrompt) {
  auto w = client_->Watch(kPods, "default", {});
  ASSERT_TRUE(w.ok());
  std::atomic<bool> returned{false};
  std::thread reader([&] {
    auto e = (*w)->Next(std::chrono::seconds(30));
    EXPECT_TRUE(e.ok());
    returned = true;
  });
  // Closed only once the reader is blocked in Next(): Close() must wake it, not pre-empt it.
  ASSERT_TRUE((*w)->BlockedNextsForTest().AwaitAbove(0, std::chrono::seconds(60)));
  EXPECT_FALSE(returned.load());
  (*w)->Close();
  EXPECT_TRUE(Eventually([&] { return returned.load(); }, std::chrono::seconds(5)));
  reader.join();
  w->reset();  // joins the reader thread: must not hang
  EXPECT_TRUE(Eventually([&] { return server_->OpenWatchCount() == 0; }));
}

TEST_F(KubeTest, WatchOfUnknownResourceIsNotFound) {
  auto w = client_->Watch(kTrainingJobs, "default", {});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
}

TEST_F(KubeTest, ServerDownIsUnavailable) {
  server_->Stop();
  ClientOptions no_retry;
  no_retry.max_retries = 0;
  auto c = NewClient(no_retry);
  auto got = c->Get(kPods, "default", "p1");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  ASSERT_TRUE(server_->Start().ok());
}

// An API server that accepts a connection, reads the request and never answers. Set `on_request`
// before Start(); it runs on the listener's thread once a whole request head has arrived.
class SilentServer {
 public:
  ~SilentServer() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    if (conn_ >= 0) ::close(conn_);
    if (listener_ >= 0) ::close(listener_);
  }

  // The URL to send requests to.
  std::string Start() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    thread_ = std::thread([this] { Serve(); });
    return "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }

  std::function<void()> on_request;

 private:
  // Polls in short slices only so that the destructor can end it.
  bool Readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    while (!done_) {
      if (::poll(&p, 1, 20) > 0) return true;
    }
    return false;
  }

  void Serve() {
    if (!Readable(listener_)) return;
    conn_ = ::accept(listener_, nullptr, nullptr);
    std::string head;
    char buf[4096];
    while (head.find("\r\n\r\n") == std::string::npos && Readable(conn_)) {
      ssize_t n = ::recv(conn_, buf, sizeof(buf), 0);
      if (n <= 0) return;
      head.append(buf, static_cast<std::size_t>(n));
    }
    if (head.find("\r\n\r\n") != std::string::npos && on_request) on_request();
  }

  std::atomic<bool> done_{false};
  int listener_ = -1;
  int conn_ = -1;
  std::thread thread_;
};

TEST(KubeClientStopTest, StopWakesARequestTheServerNeverAnswers) {
  SilentServer server;
  std::atomic<bool> stop{false};
  // The stop comes once the server holds the whole request: the client is then waiting for an
  // answer that never comes, for as long as its request timeout (far longer than this test).
  server.on_request = [&] { stop = true; };
  KubeConfig config;
  config.server = server.Start();
  ClientOptions options;
  options.request_timeout = std::chrono::seconds(30);
  options.max_retries = 0;
  options.stop = &stop;
  auto client = NewKubeClient(config, options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto got = (*client)->Get(kLeases, "default", "ringtrain-controller-leader");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCancelled) << got.status().ToString();
  EXPECT_TRUE(stop.load());  // ended by the stop, not by anything else

  // A stopped client sends nothing new.
  auto again = (*client)->Get(kLeases, "default", "ringtrain-controller-leader");
  EXPECT_EQ(again.status().code(), StatusCode::kCancelled) << again.status().ToString();
}

}  // namespace
}  // namespace ringtrain::kube
