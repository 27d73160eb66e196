// The digest of what every rank of a gang must share (GangConfigDigest): the ranks of one job
// digest alike whatever is each rank's own (rank 0's result file, a testing aid, how fast it
// loads), and any change of what is trained or how the collectives run changes it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "controller/api/training_job.h"
#include "runner/train/config.h"

namespace ringtrain::train {
namespace {

TrainConfig Parsed(const std::vector<std::string>& args) {
  auto c = ParseTrainFlags(args);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : TrainConfig{};
}

std::vector<std::string> Plus(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(GangConfigDigest, TheRanksOfOneJobDigestAlike) {
  api::JobSpec spec;
  spec.train.batch_size_per_replica = 32;
  const std::vector<std::string> job = api::RunnerArgs(spec, "/ckpt");
  // What `ringtrain run` and the tests give one rank and not another.
  const TrainConfig rank0 = Parsed(Plus(
      job, {"--result-file", "/tmp/run/a0/result.json", "--step-sleep-ms", "20", "--loader-workers",
            "3", "--prefetch", "8", "--input", "host", "--cuda-graph", "off"}));
  const TrainConfig rank1 = Parsed(job);
  EXPECT_EQ(GangConfigDigest(rank0), GangConfigDigest(rank1)) << GangConfigString(rank0) << "\n"
                                                              << GangConfigString(rank1);
  // Only rank 0 reads and writes checkpoints.
  TrainConfig no_dir = rank1;
  no_dir.checkpoint_dir = "";
  EXPECT_EQ(GangConfigDigest(no_dir), GangConfigDigest(rank1));
  // Per-rank model fields the engines set.
  TrainConfig own = rank1;
  own.model.dropout_seed = 99;
  own.model.max_batch = 7;
  EXPECT_EQ(GangConfigDigest(own), GangConfigDigest(rank1));
  EXPECT_EQ(GangConfigDigest(rank1).size(), 16u);
}

TEST(GangConfigDigest, ChangesWithWhatEveryRankMustShare) {
  const std::string digest = GangConfigDigest(Parsed({}));
  const std::vector<std::vector<std::string>> changes = {
      {"--batch-size", "32"},
      {"--epochs", "3"},
      {"--seed", "7"},
      {"--model", "cnn"},
      {"--dataset", "/data/other"},
      {"--optimizer", "sgd"},
      {"--learning-rate", "0.01"},
      {"--momentum", "0.5"},
      {"--weight-decay", "0.0001"},
      {"--lr-scaling", "none"},
      {"--warmup-epochs", "2"},
      {"--lr-schedule", "constant"},
      {"--checkpoint-every", "7"},
      {"--bucket-cap-bytes", "1024"},
      {"--overlap=false"},
      {"--slice-gradients=false"},
      {"--max-steps", "10"},
      {"--eval-every-epoch=false"},
      {"--device", "cpu"},
      {"--backend", "tcp"},
      {"--precision", "tf32"},
  };
  for (const auto& change : changes) {
    const TrainConfig changed = Parsed(change);
    EXPECT_NE(GangConfigDigest(changed), digest) << change[0] << ": " << GangConfigString(changed);
  }
  EXPECT_EQ(GangConfigDigest(Parsed({})), digest) << "the digest is not deterministic";
}

// The fields rank 0 names when a configuration differs: one per setting, the line (and so the
// digest) made of them in their order.
TEST(GangConfigFields, NameWhatDiffersAndMakeTheLine) {
  const TrainConfig base = Parsed({});
  const TrainConfig other = Parsed({"--batch-size", "32", "--seed", "7"});
  const auto a = GangConfigFields(base);
  const auto b = GangConfigFields(other);
  ASSERT_EQ(a.size(), b.size());
  std::vector<std::string> differ;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    if (a[i].second != b[i].second) differ.push_back(a[i].first);
  }
  EXPECT_EQ(differ, (std::vector<std::string>{"batch_size", "seed"}));
  // The line as every release since the fingerprint has written it (the digest is its hash).
  EXPECT_EQ(GangConfigString(other),
            "model=mlp;input=1x28x28;classes=10;hidden=256;dataset={\"format\":\"idx\",\"train\":"
            "\"/usr/share/datasets/fashion-mnist\"};epochs=10;batch_size=32;learning_rate=0.001;"
            "lr_scaling=linear;warmup_epochs=1;lr_schedule=cosine;seed=7;optimizer=adam;"
            "momentum=0.9;beta1=0.9;beta2=0.999;eps=1e-08;weight_decay=0;checkpoint_every=500;"
            "bucket_cap_bytes=262144;overlap=true;slice_gradients=true;max_steps=-1;"
            "eval_every_epoch=true;device=auto;backend=auto;precision=fp32");
}

TEST(GangConfigDigest, TheResolvedModelIsCompared) {
  TrainConfig a;
  auto mlp = model::PresetSpec("mlp", {1, 28, 28}, 10, 256);
  auto wider = model::PresetSpec("mlp", {1, 28, 28}, 10, 512);
  ASSERT_TRUE(mlp.ok() && wider.ok());
  a.model_spec = *mlp;
  TrainConfig b = a;
  b.model_spec = *wider;
  EXPECT_NE(GangConfigDigest(a), GangConfigDigest(b));
  TrainConfig glorot = a;
  glorot.model_spec->init = model::Initializer::kGlorot;  // rank 0 broadcasts its weights
  EXPECT_EQ(GangConfigDigest(glorot), GangConfigDigest(a));
}

}  // namespace
}  // namespace ringtrain::train
