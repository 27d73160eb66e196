// The gang fingerprint: ranks that run the same runner on the same configuration join as
// before; any difference (release, protocol, image, configuration, a rank too old to publish
// one) is refused on every rank of the round with rank 0's words, a replacement that joins
// survivors in a recovery round included, and the failure protocol then gives every rank the
// same root cause.
#include "runner/rendezvous/fingerprint.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>
#include <vector>

#include <csignal>

#include "common/stop.h"
#include "runner/rendezvous/failure.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/rendezvous/rendezvous.h"
#include "runner/rendezvous/rounds.h"

namespace ringtrain::rendezvous {
namespace {

using namespace std::chrono_literals;

GangFingerprint Fp(std::string runner = "0.1.0", std::string image = "ghcr.io/x:0.1",
                   std::string config = "00000000000000aa", int protocol = 1) {
  return {protocol, std::move(runner), std::move(image), std::move(config)};
}

// One rank's join and agreement: the round, or the refusal / error as a Status.
struct Joined {
  int round = -1;
  Status status;
  std::string refusal;
};

Joined JoinAndAgree(Store& store, int rank, int world, const GangFingerprint& fp,
                    std::optional<int> failed_round = std::nullopt) {
  RoundOptions o;
  o.rank = rank;
  o.world_size = world;
  o.failed_round = failed_round;
  o.timeout = 20s;
  o.fingerprint = fp;
  Joined j;
  auto round = JoinRound(store, o);
  if (!round.ok()) {
    j.status = round.status();
    return j;
  }
  j.round = *round;
  auto verdict = AgreeOnFingerprints(*RoundStore(store, *round), rank, world, fp, 20s);
  if (!verdict.ok()) {
    j.status = verdict.status();
  } else {
    j.refusal = verdict->refusal;
  }
  return j;
}

// A whole gang of threads, rank r with fps[r].
std::vector<Joined> Gang(Store& store, const std::vector<GangFingerprint>& fps) {
  const int world = static_cast<int>(fps.size());
  std::vector<std::future<Joined>> futures;
  for (int r = 0; r < world; ++r) {
    futures.push_back(std::async(std::launch::async, [&store, &fps, r, world] {
      return JoinAndAgree(store, r, world, fps[static_cast<std::size_t>(r)]);
    }));
  }
  std::vector<Joined> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Fingerprint, EncodesAndParsesBack) {
  const GangFingerprint fp = Fp("0.1.0", "ghcr.io/ringtrain/ringtrain-runner:0.1.0", "0123");
  auto back = ParseFingerprint(EncodeFingerprint(fp));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, fp);
  EXPECT_EQ(DescribeFingerprint(fp),
            "runner 0.1.0 protocol 1 image ghcr.io/ringtrain/ringtrain-runner:0.1.0");
  EXPECT_EQ(DescribeFingerprint(Fp("0.1.0", "")), "runner 0.1.0 protocol 1");
}

TEST(Fingerprint, ALaterProtocolStaysReadableAndGarbageIsNot) {
  auto later = ParseFingerprint(R"({"protocol": 7, "runner": "0.9.0", "cuda": "12.4"})");
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->protocol, 7);
  EXPECT_EQ(later->runner, "0.9.0");
  EXPECT_EQ(later->image, "");
  for (const char* bad :
       {"", "1", "not json", R"({"runner": "0.1.0"})", R"({"protocol": "1"})", R"([1, 2])"}) {
    EXPECT_FALSE(ParseFingerprint(bad).has_value()) << bad;
  }
}

TEST(Fingerprint, RanksThatRunTheSameJoinAsBefore) {
  MemoryStore store;
  const auto joined = Gang(store, {Fp(), Fp(), Fp()});
  for (std::size_t r = 0; r < joined.size(); ++r) {
    EXPECT_TRUE(joined[r].status.ok()) << r << ": " << joined[r].status.ToString();
    EXPECT_EQ(joined[r].round, 0) << r;
    EXPECT_EQ(joined[r].refusal, "") << r;
  }
  EXPECT_TRUE(store.Get("fingerprint/2", 0ms).ok()) << "round 0 keeps the attempt's own keys";
}

TEST(Fingerprint, ADifferentReleaseIsRefusedOnEveryRankNamingBoth) {
  MemoryStore store;
  const auto joined = Gang(store, {Fp(), Fp(), Fp("0.2.0", "ghcr.io/x:0.2")});
  for (std::size_t r = 0; r < joined.size(); ++r) {
    ASSERT_TRUE(joined[r].status.ok()) << r << ": " << joined[r].status.ToString();
    EXPECT_EQ(joined[r].refusal, joined[0].refusal) << "rank " << r << " tells another story";
  }
  const std::string& why = joined[0].refusal;
  EXPECT_TRUE(Has(why, "rank 2 runs runner 0.2.0 protocol 1 image ghcr.io/x:0.2")) << why;
  EXPECT_TRUE(Has(why, "rank 0 runs runner 0.1.0 protocol 1 image ghcr.io/x:0.1")) << why;
}

TEST(Fingerprint, ADifferentProtocolOrImageIsADifferentRunner) {
  for (const GangFingerprint& other :
       {Fp("0.1.0", "ghcr.io/x:0.1", "00000000000000aa", 2), Fp("0.1.0", "ghcr.io/x:custom")}) {
    MemoryStore store;
    const auto joined = Gang(store, {Fp(), other});
    ASSERT_TRUE(joined[0].status.ok()) << joined[0].status.ToString();
    ASSERT_TRUE(joined[1].status.ok()) << joined[1].status.ToString();
    EXPECT_TRUE(Has(joined[0].refusal, "rank 1 runs " + DescribeFingerprint(other)))
        << joined[0].refusal;
    EXPECT_FALSE(joined[1].refusal.empty())
        << "rank 1 trained beside " << DescribeFingerprint(other);
  }
}

// A pod from before RINGTRAIN_IMAGE, or a rank started by hand, does not know its image: the
// same release and protocol are the same runner.
TEST(Fingerprint, AnImageOnlyOneRankKnowsIsNoDifference) {
  MemoryStore store;
  const auto joined = Gang(store, {Fp("0.1.0", ""), Fp("0.1.0", "ghcr.io/x:0.1")});
  for (const auto& j : joined) {
    EXPECT_TRUE(j.status.ok()) << j.status.ToString();
    EXPECT_EQ(j.refusal, "");
  }
}

TEST(Fingerprint, ADifferentConfigurationIsRefusedNamingBothDigests) {
  MemoryStore store;
  const auto joined = Gang(store, {Fp(), Fp("0.1.0", "ghcr.io/x:0.1", "00000000000000bb")});
  ASSERT_TRUE(joined[0].status.ok()) << joined[0].status.ToString();
  ASSERT_TRUE(joined[1].status.ok()) << joined[1].status.ToString();
  EXPECT_EQ(joined[1].refusal, joined[0].refusal);
  EXPECT_TRUE(Has(joined[0].refusal,
                  "rank 1's training configuration differs from rank 0's (digest "
                  "00000000000000bb vs 00000000000000aa)"))
      << joined[0].refusal;
  EXPECT_TRUE(Has(joined[0].refusal, "give every rank the same training configuration"))
      << joined[0].refusal;
}

using Fields = std::vector<std::pair<std::string, std::string>>;

GangFingerprint WithFields(std::string config, Fields fields) {
  GangFingerprint fp = Fp("0.1.0", "ghcr.io/x:0.1", std::move(config));
  fp.config_fields = std::move(fields);
  return fp;
}

TEST(Fingerprint, TheConfigurationsFieldsTravelAndBadListsAreDropped) {
  const GangFingerprint fp = WithFields("aa", {{"batch_size", "64"}, {"seed", "1"}});
  auto back = ParseFingerprint(EncodeFingerprint(fp));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, fp);
  // A value that is not UTF-8 (a dataset path) does not stop the rank from publishing.
  GangFingerprint odd = WithFields("aa", {{"dataset", "/data/\xff\xfe"}});
  odd.image = "ghcr.io/x:\xff";
  auto odd_back = ParseFingerprint(EncodeFingerprint(odd));
  ASSERT_TRUE(odd_back.has_value());
  ASSERT_EQ(odd_back->config_fields.size(), 1u);
  EXPECT_EQ(odd_back->config_fields[0].first, "dataset");
  for (const char* bad : {R"({"protocol": 1, "config_fields": [["a", "1"], ["b"]]})",
                          R"({"protocol": 1, "config_fields": [["a", "1"], ["b", 2]]})",
                          R"({"protocol": 1, "config_fields": {"a": "1"}})"}) {
    auto parsed = ParseFingerprint(bad);
    ASSERT_TRUE(parsed.has_value()) << bad;
    EXPECT_TRUE(parsed->config_fields.empty()) << bad;
  }
}

// Rank 0 names the fields that differ, theirs first, so a user need not diff two logs.
TEST(Fingerprint, ADifferentConfigurationIsRefusedNamingTheFieldsThatDiffer) {
  const Fields mine = {{"model", "mlp"}, {"batch_size", "32"}, {"seed", "1"}, {"epochs", "2"}};
  const Fields theirs = {{"model", "mlp"}, {"batch_size", "64"}, {"seed", "2"}, {"epochs", "2"}};
  MemoryStore store;
  const auto joined =
      Gang(store, {WithFields("00000000000000aa", mine), WithFields("00000000000000bb", theirs)});
  ASSERT_TRUE(joined[0].status.ok()) << joined[0].status.ToString();
  ASSERT_TRUE(joined[1].status.ok()) << joined[1].status.ToString();
  EXPECT_EQ(joined[1].refusal, joined[0].refusal);
  EXPECT_TRUE(Has(joined[0].refusal,
                  "rank 1's training configuration differs from rank 0's in batch_size (64 vs "
                  "32), seed (2 vs 1) (digest 00000000000000bb vs 00000000000000aa)"))
      << joined[0].refusal;
}

// A field only one side has (another layout of the line), many differences, long values: the
// refusal stays short enough for a termination log.
TEST(Fingerprint, TheNamedFieldsAreFewAndShort) {
  Fields mine;
  Fields theirs;
  for (int i = 0; i < 10; ++i) {
    mine.emplace_back("f" + std::to_string(i), std::string(500, 'a'));
    theirs.emplace_back("f" + std::to_string(i), std::string(500, 'b'));
  }
  mine.emplace_back("only_mine", "1");
  MemoryStore store;
  const auto joined = Gang(store, {WithFields("aa", mine), WithFields("bb", theirs)});
  const std::string& why = joined[0].refusal;
  EXPECT_TRUE(
      Has(why, " in f0 (" + std::string(57, 'b') + "... vs " + std::string(57, 'a') + "...), f1 ("))
      << why;
  EXPECT_TRUE(Has(why, " and 7 more fields (digest bb vs aa)")) << why;
  EXPECT_LT(why.size(), 1024u) << why;
  Fields fewer = mine;
  fewer.erase(fewer.begin(), fewer.begin() + 10);  // only "only_mine" is left
  MemoryStore store2;
  const auto joined2 = Gang(store2, {WithFields("aa", fewer), WithFields("bb", {})});
  EXPECT_TRUE(Has(joined2[0].refusal, "differs from rank 0's (digest bb vs aa)"))
      << "a rank that published no fields: the digests alone: " << joined2[0].refusal;
  MemoryStore store3;
  const auto joined3 = Gang(store3, {WithFields("aa", fewer), WithFields("bb", {{"x", "1"}})});
  EXPECT_TRUE(Has(joined3[0].refusal, " in only_mine ((none) vs 1), x (1 vs (none))"))
      << joined3[0].refusal;
}

// Whatever a peer publishes (keys of any length, line breaks, bytes that are not UTF-8, any
// number of differing ranks), the refusal is one line that fits a termination log, the same on
// every rank; and ranks of one image that is not UTF-8 still agree.
TEST(Fingerprint, APeersStringsCannotBreakOrFloodTheRefusal) {
  MemoryStore store;
  std::vector<GangFingerprint> gang = {WithFields("aa", {{"seed", "1"}})};
  for (int r = 1; r < 40; ++r) {
    gang.push_back(WithFields("bb", {{std::string(5000, 'k') + "\nforged line", "1"}}));
  }
  gang.push_back(Fp("0.9.0\n" + std::string(9000, 'r'), "img\r" + std::string(9000, 'i')));
  const auto joined = Gang(store, gang);
  const std::string& why = joined[0].refusal;
  EXPECT_LE(why.size(), 2048u);
  EXPECT_EQ(why.find_first_of("\n\r"), std::string::npos) << why.substr(0, 300);
  for (const auto& j : joined) EXPECT_EQ(j.refusal, why);
  // A key cut short, its line break shown as '?'.
  MemoryStore store2;
  const auto two = Gang(store2, {WithFields("aa", {{"seed", "1"}}),
                                 WithFields("bb", {{"x\ny" + std::string(100, 'k'), "1"}})});
  EXPECT_TRUE(Has(two[0].refusal, "x?y" + std::string(54, 'k') + "... (1 vs (none))"))
      << two[0].refusal;
  // The same image on both ranks, with a byte that is not UTF-8: the same runner.
  MemoryStore store3;
  const auto odd = Gang(store3, {Fp("0.1.0", "img:\xff"), Fp("0.1.0", "img:\xff")});
  for (const auto& j : odd) {
    EXPECT_TRUE(j.status.ok()) << j.status.ToString();
    EXPECT_EQ(j.refusal, "");
  }
}

// Two runners may digest one configuration differently: the runner is named first, and every
// rank that differs is listed.
TEST(Fingerprint, TheRunnerIsNamedBeforeTheConfigurationAndEveryDifferingRankIsListed) {
  MemoryStore store;
  const GangFingerprint config_b = Fp("0.1.0", "ghcr.io/x:0.1", "00000000000000bb");
  const auto joined = Gang(store, {Fp(), config_b, Fp("0.2.0", "ghcr.io/x:0.2"), config_b, Fp()});
  const std::string& why = joined[0].refusal;
  EXPECT_TRUE(Has(why, "rank 2 runs runner 0.2.0")) << why;
  EXPECT_TRUE(Has(why, "(ranks 1-3 differ from rank 0)")) << why;
  for (const auto& j : joined) EXPECT_EQ(j.refusal, why);
}

// A runner from before the fingerprint arrives without one: refused when it is any rank, by
// rank 0's verdict, and when it is rank 0 (which gives no verdict), by every other rank at
// once rather than at the verdict's timeout.
TEST(Fingerprint, ARankOfARunnerFromBeforeTheFingerprintIsRefused) {
  {
    MemoryStore store;
    auto old = std::async(std::launch::async, [&store] { return JoinRendezvous(store, 1, 2); });
    const Joined rank0 = JoinAndAgree(store, 0, 2, Fp());
    ASSERT_TRUE(old.get().ok());
    ASSERT_TRUE(rank0.status.ok()) << rank0.status.ToString();
    EXPECT_TRUE(Has(rank0.refusal, "rank 1 published no gang fingerprint")) << rank0.refusal;
    EXPECT_TRUE(Has(rank0.refusal, "rank 0 runs runner 0.1.0")) << rank0.refusal;
  }
  {
    MemoryStore store;
    auto old = std::async(std::launch::async, [&store] { return JoinRendezvous(store, 0, 2); });
    const Joined rank1 = JoinAndAgree(store, 1, 2, Fp());
    ASSERT_TRUE(old.get().ok());
    ASSERT_TRUE(rank1.status.ok())
        << "waited for a verdict an old rank 0 never gives: " << rank1.status.ToString();
    EXPECT_TRUE(Has(rank1.refusal, "rank 0 published no gang fingerprint")) << rank1.refusal;
    EXPECT_TRUE(Has(rank1.refusal, "rank 1 runs runner 0.1.0")) << rank1.refusal;
  }
}

// The case that matters: an in-place replacement started from another image joins the
// survivors of the older one. The recovery round refuses it on every rank, and the failure
// protocol gives every rank the same root cause and a retryable code.
TEST(Fingerprint, AReplacementOfAnotherReleaseIsRefusedOnEveryRankOfTheRecoveryRound) {
  MemoryStore store;
  ASSERT_EQ(Gang(store, {Fp(), Fp(), Fp()})[0].refusal, "");
  // Rank 1 is lost in round 0; ranks 0 and 2 survive it; its replacement runs 0.2.0.
  const GangFingerprint newer = Fp("0.2.0", "ghcr.io/x:0.2");
  auto s0 = std::async(std::launch::async, [&] { return JoinAndAgree(store, 0, 3, Fp(), 0); });
  auto s2 = std::async(std::launch::async, [&] { return JoinAndAgree(store, 2, 3, Fp(), 0); });
  auto r1 = std::async(std::launch::async, [&] { return JoinAndAgree(store, 1, 3, newer); });
  const std::vector<Joined> joined = {s0.get(), r1.get(), s2.get()};
  for (int r = 0; r < 3; ++r) {
    const Joined& j = joined[static_cast<std::size_t>(r)];
    ASSERT_TRUE(j.status.ok()) << r << ": " << j.status.ToString();
    EXPECT_EQ(j.round, 1) << r;
    EXPECT_EQ(j.refusal, joined[0].refusal) << r;
  }
  const std::string& why = joined[0].refusal;
  EXPECT_TRUE(Has(why,
                  "rank 1 runs runner 0.2.0 protocol 1 image ghcr.io/x:0.2 but rank 0 runs "
                  "runner 0.1.0 protocol 1 image ghcr.io/x:0.1"))
      << why;

  // Each rank reports its refusal to the round's key space, as the runner does.
  auto round1 = RoundStore(store, 1);
  std::vector<std::future<FailureReport>> reports;
  for (int r = 0; r < 3; ++r) {
    reports.push_back(std::async(std::launch::async, [&, r] {
      return ResolveFailure(*round1, r, Aborted(why), kExitRetryable);
    }));
  }
  for (int r = 0; r < 3; ++r) {
    const FailureReport report = reports[static_cast<std::size_t>(r)].get();
    EXPECT_TRUE(Has(report.message, why)) << r << ": " << report.message;
    EXPECT_EQ(report.exit_code, kExitRetryable) << r;
  }
}

TEST(Fingerprint, NoVerdictFromRankZeroEndsTheWaitAtItsTimeoutNamingRankZero) {
  MemoryStore store;
  ASSERT_TRUE(PublishFingerprint(store, 0, Fp()).ok());  // rank 0 arrived, then was lost
  auto v = AgreeOnFingerprints(store, 1, 2, Fp(), 200ms);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDeadlineExceeded) << v.status().ToString();
  EXPECT_TRUE(Has(v.status().message(), "rank 0 gave no verdict")) << v.status().ToString();
}

TEST(Fingerprint, ASigtermWhileWaitingForTheVerdictEndsTheWaitAtOnce) {
  ResetStopForTest();
  MemoryStore store;
  ASSERT_TRUE(PublishFingerprint(store, 0, Fp()).ok());
  auto waiting = std::async(std::launch::async,
                            [&store] { return AgreeOnFingerprints(store, 1, 2, Fp(), 600s); });
  for (int i = 0; i < 20000 && store.waiters() == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_GT(store.waiters(), 0) << "rank 1 never waited for the verdict";
  RequestStop(SIGTERM);
  ASSERT_EQ(waiting.wait_for(20s), std::future_status::ready) << "still waiting after SIGTERM";
  auto v = waiting.get();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kCancelled) << v.status().ToString();
  ResetStopForTest();
}

}  // namespace
}  // namespace ringtrain::rendezvous
