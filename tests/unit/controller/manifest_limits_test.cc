// Hostile manifests (issue 10, item 5): each reproduction used to abort the CLI (uncaught
// nlohmann::type_error), overflow the stack or take gigabytes. Each must now be a clear
// InvalidArgument naming the file and the field, and the process must survive to assert it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "controller/api/training_job.h"

namespace ringtrain::api {
namespace {

constexpr char kHead[] = "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\n";

std::string Job(const std::string& spec_lines) {
  return std::string(kHead) + "metadata:\n  name: demo\nspec:\n" + spec_lines;
}

// The error must be a clean rejection that names the file and says `expected`.
void ExpectRejected(const std::string& yaml, const std::string& expected) {
  auto job = ParseManifestYaml(yaml, "job.yaml");
  ASSERT_FALSE(job.ok()) << "accepted:\n" << yaml.substr(0, 200);
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << job.status().ToString();
  EXPECT_EQ(job.status().message().rfind("job.yaml: ", 0), 0u) << job.status().message();
  EXPECT_NE(job.status().message().find(expected), std::string::npos) << job.status().message();
  EXPECT_LT(job.status().message().size(), 400u) << "the error echoes too much";
}

TEST(ManifestLimits, NullOrNonStringApiVersionAndKind) {
  ExpectRejected("apiVersion:\nkind: TrainingJob\nmetadata: {name: a}\nspec: {}\n",
                 "apiVersion: required");
  ExpectRejected("apiVersion: [1, 2]\nkind: TrainingJob\nmetadata: {name: a}\nspec: {}\n",
                 "apiVersion: must be a string, got a list");
  ExpectRejected("apiVersion: ringtrain.dev/v1alpha1\nkind: 7\nmetadata: {name: a}\nspec: {}\n",
                 "kind: must be a string, got an integer");
  ExpectRejected("apiVersion: ringtrain.dev/v1alpha1\nmetadata: {name: a}\nspec: {}\n",
                 "kind: required");
}

TEST(ManifestLimits, NonUtf8BytesAreRejectedNotDumped) {
  ExpectRejected(Job("  backend: \"\xff\xfe\"\n"), "spec.backend: not valid UTF-8");
  ExpectRejected(Job("  replicas: \xc3\x28\n"), "spec.replicas: not valid UTF-8");
  ExpectRejected(Job("  template:\n    metadata: {labels: {a: \"\xed\xa0\x80\"}}\n"),
                 "spec.template.metadata.labels.a: not valid UTF-8");
  ExpectRejected(Job("  \xff: 1\n"), "spec: a key is not valid UTF-8");
}

TEST(ManifestLimits, SelfReferentialAliasIsACycleNotAStackOverflow) {
  ExpectRejected(std::string(kHead) + "metadata: {name: a}\nspec: {}\nx: &x [*x]\n",
                 "x[0]: an alias refers to a node that contains it");
  ExpectRejected(Job("  template: &t {a: *t}\n"), "spec.template.a: an alias refers");
}

TEST(ManifestLimits, BillionLaughsIsCappedByNodeCount) {
  std::string yaml = std::string(kHead) + "metadata: {name: a}\nspec:\n  template:\n";
  yaml += "    l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    std::string prev = "*l" + std::to_string(i - 1);
    yaml += "    l" + std::to_string(i) + ": &l" + std::to_string(i) + " [" + prev;
    for (int k = 1; k < 9; ++k) yaml += ", " + prev;
    yaml += "]\n";
  }
  ExpectRejected(yaml, "expands to more than");
}

TEST(ManifestLimits, AliasedLongScalarIsCappedBySize) {
  std::string big(200 * 1024, 'a');
  std::string yaml = Job("  template:\n    a: &a " + big + "\n    b: [");
  for (int i = 0; i < 40; ++i) yaml += std::string(i ? ", " : "") + "*a";
  yaml += "]\n";
  ExpectRejected(yaml, "expands to more than");
}

TEST(ManifestLimits, DeepNestingIsBounded) {
  std::string deep(100000, '[');
  ExpectRejected(Job("  template: {a: " + deep + "}\n"), "");
  std::string nested = Job("  template:\n    a: ");
  for (int i = 0; i < 100; ++i) nested += "[";
  for (int i = 0; i < 100; ++i) nested += "]";
  ExpectRejected(nested + "\n", "nested deeper than");
}

TEST(ManifestLimits, DuplicateKeysAreRejected) {
  ExpectRejected(Job("  replicas: 1\n  replicas: 2\n"), "spec.replicas: duplicate key");
  ExpectRejected(Job("  replicas: 1\n") + "spec: {}\n", "spec: duplicate key");
}

TEST(ManifestLimits, UnknownTopLevelFieldsAreRejected) {
  ExpectRejected(Job("  replicas: 1\n") + "specs: {replicas: 2}\n", "specs: unknown field");
  // The status of an exported object is accepted (and ignored), as kubectl apply does.
  auto job = ParseManifestYaml(Job("  replicas: 1\n") + "status: {phase: Running}\n", "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->status.phase, "");
}

TEST(ManifestLimits, ASecondDocumentIsRejected) {
  ExpectRejected(Job("  replicas: 1\n") + "---\n" + Job("  replicas: 2\n"),
                 "a second YAML document");
  // A trailing document separator alone is not a second job.
  auto job = ParseManifestYaml(Job("  replicas: 1\n") + "---\n", "job.yaml");
  EXPECT_TRUE(job.ok()) << job.status().ToString();
}

TEST(ManifestLimits, LongValuesAreTruncatedInErrors) {
  std::string long_value(100 * 1024, 'x');
  ExpectRejected(Job("  backend: " + long_value + "\n"), "spec.backend: must be one of");
  ExpectRejected(Job("  replicas: " + long_value + "\n"), "spec.replicas: must be an integer");
  ExpectRejected(std::string(kHead) + "metadata: {name: " + long_value + "}\nspec: {}\n",
                 "metadata.name");
  ExpectRejected("apiVersion: " + long_value + "\nkind: TrainingJob\nmetadata: {name: a}\n",
                 "apiVersion: must be ringtrain.dev/v1alpha1");
}

TEST(ManifestLimits, OversizedManifestIsRejected) {
  ExpectRejected(Job("  backend: " + std::string(10 * 1024 * 1024, 'x') + "\n"),
                 "larger than the limit");
  const std::string path = ::testing::TempDir() + "big-manifest.yaml";
  {
    std::ofstream out(path);
    out << Job("  image: " + std::string(2 * 1024 * 1024, 'x') + "\n");
  }
  auto job = LoadManifestFile(path);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find(path + ": larger than the limit"), std::string::npos)
      << job.status().message();
  std::remove(path.c_str());
  // A device that never ends is read up to the limit, not forever.
  auto zero = LoadManifestFile("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("/dev/zero: "), std::string::npos);
}

TEST(ManifestLimits, EmptyManifestIsNamed) {
  ExpectRejected("", "the manifest is empty");
  ExpectRejected("- 1\n- 2\n", "the document must be a map");
}

}  // namespace
}  // namespace ringtrain::api
