// What a local rank gets of its pod's runner container: env (values, the fieldRefs a local
// rank has, the valueFrom kinds it has not: refused naming the variable, or taken from
// ringtrain's environment), workingDir, Kubernetes' $(VAR) expansion, and the termination
// message with FallbackToLogsOnError's limits.
#include "controller/executors/local/local_container.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace ringtrain::executors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::set<std::string> kOurs = {"RINGTRAIN_RANK", "RINGTRAIN_TOKEN", "POD_IP"};

api::JobSpec WithRunner(const std::string& runner_json) {
  api::JobSpec spec;
  spec.pod_template_json = R"j({"spec":{"containers":[)j" + runner_json + "]}}";
  return spec;
}

TEST(ExpandVarRefs, FollowsKubernetes) {
  const EnvMap vars = {{"A", "1"}, {"B", "two"}, {"EMPTY", ""}};
  EXPECT_EQ(ExpandVarRefs("$(A)-$(B)", vars), "1-two");
  EXPECT_EQ(ExpandVarRefs("x$(EMPTY)y", vars), "xy");
  EXPECT_EQ(ExpandVarRefs("$(MISSING)", vars), "$(MISSING)");  // kept as written
  EXPECT_EQ(ExpandVarRefs("$$(A)", vars), "$(A)");             // $$ escapes
  EXPECT_EQ(ExpandVarRefs("$$$(A)", vars), "$1");
  EXPECT_EQ(ExpandVarRefs("$A ${A} $", vars), "$A ${A} $");  // shell syntax is not ours
  EXPECT_EQ(ExpandVarRefs("$(A", vars), "$(A");
  EXPECT_EQ(ExpandVarRefs("$()", vars), "$()");
  EXPECT_EQ(ExpandVarRefs("", vars), "");
}

TEST(LocalContainer, NoTemplateIsNothing) {
  auto c = LocalContainerFromSpec(api::JobSpec{}, {}, "/cwd", kOurs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->working_dir, "");
  EXPECT_TRUE(c->env.empty());
  EXPECT_TRUE(c->notes.empty());
}

TEST(LocalContainer, WorkingDirRelativeToWhereRunRuns) {
  auto abs = LocalContainerFromSpec(WithRunner(R"j({"name":"runner","workingDir":"/app"})j"), {},
                                    "/cwd", kOurs);
  ASSERT_TRUE(abs.ok()) << abs.status().ToString();
  EXPECT_EQ(abs->working_dir, "/app");
  auto rel = LocalContainerFromSpec(WithRunner(R"j({"name":"runner","workingDir":"sub/dir"})j"), {},
                                    "/cwd", kOurs);
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  EXPECT_EQ(rel->working_dir, "/cwd/sub/dir");
  // Another container's workingDir is not the runner's.
  auto other = LocalContainerFromSpec(WithRunner(R"j({"name":"sidecar","workingDir":"/x"})j"), {},
                                      "/cwd", kOurs);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->working_dir, "");
  EXPECT_THAT(other->notes, ElementsAre(HasSubstr("\"sidecar\" does not run")));
}

TEST(LocalContainer, ASecretThatIsNotExportedIsRefusedNamingTheVariable) {
  const api::JobSpec spec = WithRunner(R"j({"name":"runner","env":[
      {"name":"A","value":"a"},
      {"name":"API_KEY","valueFrom":{"secretKeyRef":{"name":"creds","key":"api"}}}]})j");
  auto c = LocalContainerFromSpec(spec, {}, "/cwd", kOurs);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "spec.template.spec.containers[runner].env[1] (API_KEY): "
            "valueFrom.secretKeyRef (secret \"creds\", key \"api\") is not available under "
            "`ringtrain run` (no cluster): export API_KEY before `ringtrain run`, or give it a "
            "value");
}

TEST(LocalContainer, ClusterOnlyValuesComeFromRingtrainsEnvironmentOrStayUnsetWhenOptional) {
  const api::JobSpec spec = WithRunner(R"j({"name":"runner","env":[
      {"name":"API_KEY","valueFrom":{"secretKeyRef":{"name":"creds","key":"api"}}},
      {"name":"MODE","valueFrom":{"configMapKeyRef":{"name":"cm","key":"mode","optional":true}}},
      {"name":"CPU","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu"}}},
      {"name":"UID","valueFrom":{"fieldRef":{"fieldPath":"metadata.uid"}}}]})j");
  auto c =
      LocalContainerFromSpec(spec, {{"API_KEY", "k$(X)"}, {"CPU", "2"}, {"UID", "u"}}, "/", kOurs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->env.size(), 3u);
  EXPECT_EQ(c->env[0].name, "API_KEY");
  EXPECT_EQ(c->env[0].value, "k$(X)");
  EXPECT_TRUE(c->env[0].literal);  // never expanded: it is the value, not a template
  EXPECT_EQ(c->env[1].name, "CPU");
  EXPECT_EQ(c->env[2].name, "UID");
  EXPECT_THAT(c->notes,
              ElementsAre(HasSubstr("API_KEY: valueFrom.secretKeyRef"),
                          HasSubstr("MODE: valueFrom.configMapKeyRef"), HasSubstr("CPU"),
                          HasSubstr("UID: valueFrom.fieldRef (fieldPath \"metadata.uid\")")));
  EXPECT_THAT(c->notes[1], HasSubstr("optional: left unset"));
}

TEST(LocalContainer, EnvFromIsRefusedUnlessOptional) {
  auto refused = LocalContainerFromSpec(
      WithRunner(R"j({"name":"runner","envFrom":[{"configMapRef":{"name":"settings"}}]})j"), {},
      "/", kOurs);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("containers[runner].envFrom[0]: configMapRef \"settings\" is not "
                        "available under `ringtrain run`"));
  auto optional = LocalContainerFromSpec(
      WithRunner(R"j({"name":"runner","envFrom":[{"secretRef":{"name":"s","optional":true}}]})j"),
      {}, "/", kOurs);
  ASSERT_TRUE(optional.ok()) << optional.status().ToString();
  EXPECT_THAT(optional->notes, ElementsAre(HasSubstr("secretRef \"s\"")));
}

// The pod builder puts our entries first and drops the template's of the same name: a
// template's RINGTRAIN_TOKEN from a Secret is never resolved, so it is never refused either.
TEST(LocalContainer, OurVariablesWinOverTheTemplates) {
  const api::JobSpec spec = WithRunner(R"j({"name":"runner","env":[
      {"name":"RINGTRAIN_TOKEN","valueFrom":{"secretKeyRef":{"name":"t","key":"t"}}},
      {"name":"RINGTRAIN_RANK","value":"99"}]})j");
  auto c = LocalContainerFromSpec(spec, {}, "/", kOurs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->env.empty());
  EXPECT_THAT(c->notes, ElementsAre(HasSubstr("RINGTRAIN_TOKEN is set by ringtrain"),
                                    HasSubstr("RINGTRAIN_RANK is set by ringtrain")));
}

TEST(LocalContainer, TheRunnersCommandAndArgsAreIgnoredAsInAPod) {
  auto c = LocalContainerFromSpec(
      WithRunner(R"j({"name":"runner","command":["x"],"args":["y"],"volumeMounts":[]})j"), {}, "/",
      kOurs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_THAT(c->notes, ElementsAre(HasSubstr("command and args are ignored"),
                                    HasSubstr("volumeMounts are not mounted locally")));
}

TEST(LocalContainer, MalformedEntriesNameTheirField) {
  auto no_name = LocalContainerFromSpec(WithRunner(R"j({"name":"runner","env":[{"value":"x"}]})j"),
                                        {}, "/", kOurs);
  ASSERT_FALSE(no_name.ok());
  EXPECT_THAT(no_name.status().message(), HasSubstr("containers[runner].env[0].name"));
  auto bad_from = LocalContainerFromSpec(
      WithRunner(R"j({"name":"runner","env":[{"name":"X","valueFrom":{"nope":{}}}]})j"), {}, "/",
      kOurs);
  ASSERT_FALSE(bad_from.ok());
  EXPECT_THAT(bad_from.status().message(), HasSubstr("env[0] (X).valueFrom"));
}

// `value: 3` is a number: refused naming it, never run as "".
TEST(LocalContainer, AValueThatIsNotAStringIsRefused) {
  auto number = LocalContainerFromSpec(
      WithRunner(R"j({"name":"runner","env":[{"name":"A","value":"a"},{"name":"N","value":3}]})j"),
      {}, "/", kOurs);
  ASSERT_FALSE(number.ok());
  EXPECT_THAT(number.status().message(),
              HasSubstr("spec.template.spec.containers[runner].env[1].value: must be a string"));
  auto unset = LocalContainerFromSpec(
      WithRunner(R"j({"name":"runner","env":[{"name":"N","value":null}]})j"), {}, "/", kOurs);
  ASSERT_TRUE(unset.ok()) << unset.status().ToString();
  ASSERT_EQ(unset->env.size(), 1u);
  EXPECT_EQ(unset->env[0].value, "");
}

TEST(LocalRankExec, EnvAndCommandAsInThePod) {
  const api::JobSpec spec = WithRunner(R"j({"name":"runner","env":[
      {"name":"TAG","value":"t-$(RINGTRAIN_RANK)"},
      {"name":"OUT","value":"$(TAG)/$(LATER)/$(HOME)"},
      {"name":"LATER","value":"l"},
      {"name":"PATH","value":"/opt/bin:$(PATH)"},
      {"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
      {"name":"NS","valueFrom":{"fieldRef":{"fieldPath":"metadata.namespace"}}},
      {"name":"IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}},
      {"name":"NODE","valueFrom":{"fieldRef":{"fieldPath":"spec.nodeName"}}},
      {"name":"SECRET","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]
})j");
  const EnvMap host = {{"HOME", "/root"}, {"PATH", "/usr/bin"}, {"SECRET", "$(TAG)"}};
  auto c = LocalContainerFromSpec(spec, host, "/", kOurs);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const LocalRankExec exec =
      LocalRankExecFor(*c, {"python3", "train.py", "--tag=$(TAG)", "$(HOME)", "$$(TAG)"}, host,
                       {{"RINGTRAIN_RANK", "1"}, {"POD_IP", "127.0.0.1"}}, {"job-a0-1", "ns", "h"});
  // Each value sees only the entries declared before it (our entries come first); the host's
  // environment is the image's: present, but not declared, so never expanded.
  EXPECT_EQ(exec.env.at("TAG"), "t-1");
  EXPECT_EQ(exec.env.at("OUT"), "t-1/$(LATER)/$(HOME)");
  EXPECT_EQ(exec.env.at("PATH"), "/opt/bin:$(PATH)");
  EXPECT_EQ(exec.env.at("HOME"), "/root");
  EXPECT_EQ(exec.env.at("POD"), "job-a0-1");
  EXPECT_EQ(exec.env.at("NS"), "ns");
  EXPECT_EQ(exec.env.at("IP"), "127.0.0.1");
  EXPECT_EQ(exec.env.at("NODE"), "h");
  EXPECT_EQ(exec.env.at("SECRET"), "$(TAG)");
  EXPECT_EQ(exec.env.at("RINGTRAIN_RANK"), "1");
  EXPECT_THAT(exec.argv, ElementsAre("python3", "train.py", "--tag=t-1", "$(HOME)", "$(TAG)"));
}

TEST(LocalRankExec, OurEntriesOverrideTheHostsAndTheTemplatesEnv) {
  const EnvMap host = {{"RINGTRAIN_RANK", "7"}, {"POD_IP", "10.0.0.1"}};
  const LocalRankExec exec =
      LocalRankExecFor(LocalContainer{}, {"sh"}, host,
                       {{"RINGTRAIN_RANK", "0"}, {"POD_IP", "127.0.0.1"}}, {"p", "ns", "h"});
  EXPECT_EQ(exec.env.at("RINGTRAIN_RANK"), "0");
  EXPECT_EQ(exec.env.at("POD_IP"), "127.0.0.1");
}

TEST(TerminationMessage, TheFileWinsUpTo4096Bytes) {
  EXPECT_EQ(TerminationMessage("bad data\n", "log", 3), "bad data");
  EXPECT_EQ(TerminationMessage("final status\n", "", 0), "final status");
  const std::string big(5000, 'x');
  EXPECT_EQ(TerminationMessage(big, "log", 1), std::string(4096, 'x'));
  EXPECT_EQ(TerminationMessage("two\nlines \n\n", "", 1), "two\nlines");
}

TEST(TerminationMessage, TheLogOnlyForAFailure) {
  EXPECT_EQ(TerminationMessage("", "to-the-log\n", 0), "");
  EXPECT_EQ(TerminationMessage("", "to-the-log\n", 3), "to-the-log");
  EXPECT_EQ(TerminationMessage("\n", "", 3), "");
}

TEST(TerminationMessage, TheLogsLast80Lines) {
  std::string log;
  for (int i = 1; i <= 100; ++i) log += "line-" + std::to_string(i) + "\n";
  std::string want;
  for (int i = 21; i <= 100; ++i) want += "line-" + std::to_string(i) + (i < 100 ? "\n" : "");
  EXPECT_EQ(TerminationMessage("", log, 1), want);
  // Without a final newline the last line counts all the same.
  log.pop_back();
  EXPECT_EQ(TerminationMessage("", log, 1), want);
}

TEST(TerminationMessage, OrTheLogsLast2048BytesWhenFewer) {
  std::string log;
  for (int i = 0; i < 60; ++i) log += std::string(99, 'a' + static_cast<char>(i % 26)) + "\n";
  const std::string msg = TerminationMessage("", log, 1);
  EXPECT_EQ(msg, log.substr(log.size() - 2048, 2047));
}

}  // namespace
}  // namespace ringtrain::executors
