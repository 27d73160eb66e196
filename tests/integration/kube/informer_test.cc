// The informer against the fake API server: sync, events, watch cuts, server restarts, 410.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "controller/kube/informer.h"
#include "tests/integration/kube/kube_test_util.h"

namespace ringtrain::kube {
namespace {

using testing::Eventually;
using testing::KubeTest;
using testing::Pod;

// Counts handler calls by object name.
struct Recorder {
  std::mutex mu;
  std::map<std::string, int> adds, updates, deletes;
  std::atomic<int> watch_restarts{0}, relists{0};
  std::vector<Status> list_errors;

  InformerOptions Options(const Resource& r) {
    InformerOptions o;
    o.resource = r;
    o.ns = "default";
    o.backoff = {Duration(20), Duration(200), 2.0};
    o.on_add = [this](const Json& j) { Bump(adds, j); };
    o.on_update = [this](const Json& j) { Bump(updates, j); };
    o.on_delete = [this](const Json& j) { Bump(deletes, j); };
    o.on_watch_restart = [this] { ++watch_restarts; };
    o.on_relist = [this] { ++relists; };
    o.on_list_error = [this](const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      list_errors.push_back(s);
    };
    return o;
  }
  void Bump(std::map<std::string, int>& m, const Json& j) {
    std::lock_guard<std::mutex> lock(mu);
    ++m[j["metadata"]["name"].get<std::string>()];
  }
  int Count(std::map<std::string, int>& m, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    return m.count(name) != 0 ? m[name] : 0;
  }
};

std::set<std::string> Names(const std::vector<Json>& objects) {
  std::set<std::string> out;
  for (const auto& o : objects) out.insert(o["metadata"]["name"].get<std::string>());
  return out;
}

class InformerTest : public KubeTest {
 protected:
  std::set<std::string> ServerPods() {
    return Names(server_->ListObjects({"", "pods"}, "default"));
  }
  // The cache holds exactly the server's pods, at the server's resourceVersions.
  bool CacheMatchesServer(const Informer& informer) {
    auto server = server_->ListObjects({"", "pods"}, "default");
    auto cache = informer.List();
    if (Names(server) != Names(cache)) return false;
    for (const auto& o : server) {
      auto c = informer.Get("default", o["metadata"]["name"]);
      if (!c || (*c)["metadata"]["resourceVersion"] != o["metadata"]["resourceVersion"]) {
        return false;
      }
    }
    return true;
  }
};

TEST_F(InformerTest, SyncsAndFollowsChanges) {
  for (const char* name : {"a", "b", "c"})
    ASSERT_TRUE(client_->Create(kPods, "default", Pod(name)).ok());
  Recorder rec;
  Informer informer(client_.get(), rec.Options(kPods));
  EXPECT_FALSE(informer.HasSynced());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(10)));
  EXPECT_EQ(informer.List().size(), 3u);
  EXPECT_EQ(rec.Count(rec.adds, "a"), 1);

  ASSERT_TRUE(client_->Create(kPods, "default", Pod("d")).ok());
  ASSERT_TRUE(client_
                  ->Patch(kPods, "default", "a", {{"metadata", {{"labels", {{"x", "1"}}}}}},
                          PatchType::kMerge)
                  .ok());
  ASSERT_TRUE(client_->Delete(kPods, "default", "b").ok());
  ASSERT_TRUE(Eventually([&] { return rec.Count(rec.deletes, "b") == 1; }));
  EXPECT_TRUE(Eventually([&] { return CacheMatchesServer(informer); }));
  EXPECT_EQ(rec.Count(rec.adds, "d"), 1);
  EXPECT_EQ(rec.Count(rec.updates, "a"), 1);
  EXPECT_FALSE(informer.Get("default", "b").has_value());
  EXPECT_EQ((*informer.Get("default", "a"))["metadata"]["labels"]["x"], "1");

  informer.Stop();
  EXPECT_TRUE(Eventually([&] { return server_->OpenWatchCount() == 0; }));
}

TEST_F(InformerTest, LabelSelectorAndAllNamespaces) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("a")).ok());
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("b", "other")).ok());
  Json in_system = Pod("c");
  in_system["metadata"]["namespace"] = "kube-system";
  ASSERT_TRUE(client_->Create(kPods, "kube-system", in_system).ok());
  Recorder rec;
  InformerOptions o = rec.Options(kPods);
  o.ns = "";
  o.label_selector = "app=demo";
  Informer informer(client_.get(), o);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(10)));
  EXPECT_EQ(Names(informer.List()), (std::set<std::string>{"a", "c"}));
  EXPECT_TRUE(informer.Get("kube-system", "c").has_value());
  EXPECT_FALSE(informer.Get("default", "c").has_value());

  // A change the selector hides still moves the resourceVersion on, through a BOOKMARK.
  auto hidden = client_->Create(kPods, "default", Pod("hidden", "other"));
  ASSERT_TRUE(hidden.ok());
  std::string rv = (*hidden)["metadata"]["resourceVersion"];
  EXPECT_TRUE(Eventually([&] { return informer.LastResourceVersion() == rv; }));
  EXPECT_EQ(rec.Count(rec.adds, "hidden"), 0);
}

TEST_F(InformerTest, SurvivesWatchCutsAndServerRestart) {
  Recorder rec;
  Informer informer(client_.get(), rec.Options(kPods));
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(10)));
  int created = 0;
  auto create = [&] {
    auto c = client_->Create(kPods, "default", Pod("p" + std::to_string(created++)));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
  };
  for (int i = 0; i < 3; ++i) create();

  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(Eventually([&] { return server_->OpenWatchCount() == 1; }));
    server_->CloseAllWatches();
    create();  // possibly while no watch is open: the next watch resumes from the last rv
    // The cut reached the informer before the next round looks for an open watch: until the
    // server's watch thread wakes, the watch it cuts still counts as open, and a second cut
    // would end that same watch again.
    ASSERT_TRUE(Eventually([&] { return rec.watch_restarts.load() >= round + 1; }));
  }
  ASSERT_TRUE(Eventually([&] { return CacheMatchesServer(informer); }));

  ASSERT_TRUE(server_->Restart(/*keep_state=*/true).ok());
  for (int i = 0; i < 3; ++i) create();
  ASSERT_TRUE(client_->Delete(kPods, "default", "p0").ok());
  ASSERT_TRUE(Eventually([&] { return CacheMatchesServer(informer); }))
      << informer.List().size() << " cached";
  EXPECT_EQ(informer.List().size(), static_cast<std::size_t>(created - 1));
  for (int i = 0; i < created; ++i) {
    EXPECT_EQ(rec.Count(rec.adds, "p" + std::to_string(i)), 1) << "p" << i;  // no duplicate adds
  }
  // The cache changes before the handler runs: wait for the handler itself.
  EXPECT_TRUE(Eventually([&] { return rec.Count(rec.deletes, "p0") >= 1; }));
  EXPECT_EQ(rec.Count(rec.deletes, "p0"), 1);
  // Three cuts for sure; the restart cuts a fourth watch only if one was open by then.
  EXPECT_GE(rec.watch_restarts.load(), 3);
  EXPECT_EQ(rec.relists.load(), 0);  // every gap was resumable from the last resourceVersion
}

TEST_F(InformerTest, TransformShapesWhatIsCachedAndHandedOut) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("listed")).ok());
  Recorder rec;
  InformerOptions o = rec.Options(kPods);
  o.transform = [](const Json& pod) {
    Json slim = pod;
    slim.erase("spec");
    return slim;
  };
  Informer informer(client_.get(), o);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(10)));
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("watched")).ok());
  ASSERT_TRUE(Eventually([&] { return informer.Get("default", "watched").has_value(); }));
  for (const char* name : {"listed", "watched"}) {
    auto cached = informer.Get("default", name);
    ASSERT_TRUE(cached.has_value()) << name;
    EXPECT_FALSE(cached->contains("spec")) << name;
    EXPECT_TRUE((*cached)["metadata"].contains("resourceVersion")) << name;
  }
}

TEST_F(InformerTest, RelistsAfterCompaction) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("keep")).ok());
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("vanish")).ok());
  Recorder rec;
  Informer informer(client_.get(), rec.Options(kPods));
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(10)));

  // Changes the informer cannot see: the server is down; then history is compacted past them.
  server_->Stop();
  ASSERT_TRUE(server_->DeleteObject({"", "pods"}, "default", "vanish").ok());
  ASSERT_TRUE(server_->CreateObject({"", "pods"}, "default", Pod("appeared")).ok());
  server_->ForceCompaction();
  ASSERT_TRUE(server_->Start().ok());

  ASSERT_TRUE(Eventually([&] { return rec.relists.load() >= 1; }));
  ASSERT_TRUE(Eventually([&] { return CacheMatchesServer(informer); }));
  EXPECT_EQ(rec.Count(rec.deletes, "vanish"), 1);  // the relist-generated delete
  EXPECT_EQ(rec.Count(rec.adds, "appeared"), 1);
  EXPECT_EQ(rec.Count(rec.adds, "keep"), 1);

  // A compaction while a watch is open. The next watch is 410 and relists, unless a BOOKMARK
  // already carried the informer to the compaction point: either way nothing is lost.
  ASSERT_TRUE(server_
                  ->CreateObject({"", "services"}, "default",
                                 {{"apiVersion", "v1"},
                                  {"kind", "Service"},
                                  {"metadata", {{"name", "s"}}},
                                  {"spec", {{"clusterIP", "None"}}}})
                  .ok());
  server_->ForceCompaction();
  ASSERT_TRUE(Eventually([&] { return server_->OpenWatchCount() == 1; }));
  server_->CloseAllWatches();
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("after")).ok());
  EXPECT_TRUE(Eventually([&] { return CacheMatchesServer(informer); }));
  EXPECT_TRUE(Eventually([&] { return rec.Count(rec.adds, "after") >= 1; }));
  EXPECT_EQ(rec.Count(rec.adds, "after"), 1);
}

TEST_F(InformerTest, StopIsPromptWithAnIdleWatch) {
  Recorder rec;
  Informer informer(client_.get(), rec.Options(kPods));
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(10)));
  ASSERT_TRUE(Eventually([&] { return server_->OpenWatchCount() == 1; }));
  // Stop() returns only after its watch is closed (the watch's own timeout is 300 s, past the
  // test's limit, so a Stop that waited for it fails the test by timing out, not by a clock).
  informer.Stop();
  EXPECT_TRUE(Eventually([&] { return server_->OpenWatchCount() == 0; }));
}

// A review found a controller whose TrainingJob lists failed (the CRD not installed) silent in
// its metrics: every alert quiet, nothing reconciled. Each failed list is told (on_list_error),
// with the API's answer, until one succeeds.
TEST_F(InformerTest, EachFailedListIsToldUntilOneSucceeds) {
  Recorder rec;
  const Resource unserved{"ringtrain.dev", "v1alpha1", "nosuchthings"};
  Informer missing(client_.get(), rec.Options(unserved));
  missing.Start();
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(rec.mu);
    return rec.list_errors.size() >= 2;
  }));
  missing.Stop();
  EXPECT_FALSE(missing.HasSynced());
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    EXPECT_EQ(rec.list_errors[0].code(), StatusCode::kNotFound) << rec.list_errors[0].ToString();
  }
  Recorder ok;
  // Forbidden (the client retries a 503 itself), then allowed: one error told, then synced.
  server_->FailNextRequests("GET", "pods", 403, 1);
  Informer pods(client_.get(), ok.Options(kPods));
  pods.Start();
  ASSERT_TRUE(pods.WaitForSync(std::chrono::seconds(10)));
  std::lock_guard<std::mutex> lock(ok.mu);
  EXPECT_EQ(ok.list_errors.size(), 1u);
}

TEST_F(InformerTest, ReconnectsAfterServerOutage) {
  Recorder rec;
  Informer informer(client_.get(), rec.Options(kPods));
  server_->Stop();
  // Once back, the server refuses the first three lists: the test counts the refusals instead
  // of sleeping, and two of them leave at most the third in flight, which is refused too.
  constexpr int kRefused = 3;
  server_->FailNextRequests("GET", "pods", 503, kRefused);
  const std::int64_t lists_before = server_->RequestCount("GET", "pods");
  informer.Start();
  EXPECT_FALSE(informer.HasSynced());  // nothing to list from while the server is down
  ASSERT_TRUE(server_->Start().ok());
  ASSERT_TRUE(Eventually(
      [&] { return server_->RequestCount("GET", "pods") >= lists_before + kRefused - 1; }));
  EXPECT_FALSE(informer.HasSynced()) << "synced from a refused list";
  ASSERT_TRUE(informer.WaitForSync(std::chrono::seconds(10)));
  EXPECT_GE(server_->RequestCount("GET", "pods"), lists_before + kRefused + 1);
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("late")).ok());
  EXPECT_TRUE(Eventually([&] { return informer.Get("default", "late").has_value(); }));
}

}  // namespace
}  // namespace ringtrain::kube
