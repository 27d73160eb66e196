// EventRecorder's shutdown: Flush() writes what is queued but gives up on it after its timeout,
// so an API server that does not answer cannot hold a stopping controller past its grace period.
#include "controller/runtime/event_recorder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ringtrain::op {
namespace {

using kube::Json;

// Every write blocks until Unblock(); counts the Creates that began.
class BlockingClient final : public kube::KubeClient {
 public:
  void Unblock() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocked_ = false;
    }
    cv_.notify_all();
  }
  int Creates() {
    std::lock_guard<std::mutex> lock(mu_);
    return creates_;
  }

  StatusOr<Json> Get(const kube::Resource&, const std::string&, const std::string&) override {
    return NotFound("none");
  }
  StatusOr<Json> List(const kube::Resource&, const std::string&,
                      const kube::ListOptions&) override {
    return Json::object();
  }
  StatusOr<Json> Create(const kube::Resource&, const std::string&, const Json& object) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++creates_;
    // The request body, as the real client writes it: a strict dump (throws on broken UTF-8).
    try {
      bodies_.push_back(object.dump());
    } catch (const std::exception& e) {
      bodies_.push_back(std::string("dump threw: ") + e.what());
    }
    cv_.notify_all();
    cv_.wait(lock, [this] { return !blocked_; });
    return object;
  }
  StatusOr<Json> Update(const kube::Resource&, const std::string&, const Json& object) override {
    return object;
  }
  StatusOr<Json> UpdateStatus(const kube::Resource&, const std::string&,
                              const Json& object) override {
    return object;
  }
  StatusOr<Json> Patch(const kube::Resource&, const std::string&, const std::string&,
                       const Json& patch, kube::PatchType, bool) override {
    return patch;
  }
  Status Delete(const kube::Resource&, const std::string&, const std::string&,
                const kube::DeleteOptions&) override {
    return Status::Ok();
  }
  StatusOr<std::unique_ptr<kube::WatchStream>> Watch(const kube::Resource&, const std::string&,
                                                     const kube::WatchOptions&) override {
    return Unavailable("no watches");
  }

  std::vector<std::string> Bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

  // Waits (with a generous hang guard) until `n` Creates have begun.
  bool WaitForCreates(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return creates_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool blocked_ = true;
  int creates_ = 0;
  std::vector<std::string> bodies_;
};

Json Job(const std::string& name) {
  return {{"apiVersion", "ringtrain.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}}}};
}

bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(EventRecorderTest, FlushDropsWhatItCannotWriteInTime) {
  BlockingClient client;
  EventRecorder recorder(&client, "ringtrain-controller", "test");
  recorder.Record(Job("j0"), "Normal", "Created", "first");
  ASSERT_TRUE(client.WaitForCreates(1));  // the first write hangs at the API server
  for (int i = 1; i <= 4; ++i) {
    recorder.Record(Job("j" + std::to_string(i)), "Normal", "Created", "queued");
  }
  EXPECT_EQ(recorder.QueuedForTest(), 4u);
  std::thread flush([&] { recorder.Flush(std::chrono::milliseconds(100)); });
  // Once the timeout has passed, the queue is given up: then the hung write comes back.
  const bool dropped = Eventually([&] { return recorder.QueuedForTest() == 0; });
  client.Unblock();
  flush.join();
  EXPECT_TRUE(dropped);
  EXPECT_EQ(client.Creates(), 1);
}

TEST(EventRecorderTest, FlushWritesWhatIsQueuedWhenTheServerAnswers) {
  BlockingClient client;
  client.Unblock();
  EventRecorder recorder(&client, "ringtrain-controller", "test");
  for (int i = 0; i < 5; ++i) {
    recorder.Record(Job("j" + std::to_string(i)), "Normal", "Created", "queued");
  }
  recorder.Flush();
  EXPECT_EQ(client.Creates(), 5);
  EXPECT_EQ(recorder.QueuedForTest(), 0u);
}

// An Event's message is kept to 1024 bytes, cut between characters: a cut through one made the
// request's JSON dump throw, and the event (a RankRecovering naming a long cause) was lost.
TEST(EventRecorderTest, ALongMessageIsCutBetweenCharacters) {
  BlockingClient client;
  client.Unblock();
  EventRecorder recorder(&client, "ringtrain-controller", "test");
  std::string message(1020, 'x');  // then two-byte characters: byte 1021 is inside one
  for (int i = 0; i < 10; ++i) message += "\u00e9";
  recorder.Record(Job("j0"), "Warning", "RankRecovering", message);
  recorder.Flush();
  const std::vector<std::string> bodies = client.Bodies();
  ASSERT_EQ(bodies.size(), 1u);
  ASSERT_EQ(bodies[0].rfind("dump threw", 0), std::string::npos) << bodies[0];
  const Json event = Json::parse(bodies[0]);
  EXPECT_EQ(event["message"].get<std::string>(), std::string(1020, 'x') + "...");
}

}  // namespace
}  // namespace ringtrain::op
