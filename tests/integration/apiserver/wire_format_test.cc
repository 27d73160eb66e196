// The fake API server's answers, byte for byte where the transcripts in
// tests/fakes/apiserver/transcripts/ fix them (Status bodies, watch lines, framing), checked over
// raw HTTP/1.1.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/time_format.h"
#include "tests/integration/apiserver/fixtures.h"
#include "tests/integration/apiserver/raw_http.h"

namespace ringtrain::fake::testing {
namespace {

using nlohmann::json;

constexpr char kTj[] = "/apis/ringtrain.dev/v1alpha1/namespaces/default/trainingjobs";
constexpr char kPods[] = "/api/v1/namespaces/default/pods";

json Job(const std::string& name, json spec, json labels = json::object()) {
  return {{"apiVersion", "ringtrain.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", labels}}},
          {"spec", spec}};
}

json Pod(const std::string& name, json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"spec",
           {{"restartPolicy", "Never"},
            {"containers", {{{"name", "trainer"}, {"image", "busybox:1.36"}}}}}}};
}

class WireFormatTest : public FakeApiServerTest {
 protected:
  void SetUp() override {
    FakeApiServerTest::SetUp();
    conn_ = std::make_unique<RawConnection>(server_->port());
  }
  void InstallCrd() {
    json crd = LoadManifest("manifests/crd/trainingjobs.ringtrain.dev.yaml");
    auto r =
        conn_->Do("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd.dump());
    ASSERT_EQ(r.code, 201) << r.body;
  }
  json CreateJob(const std::string& name, json spec, json labels = json::object()) {
    auto r = conn_->Do("POST", kTj, Job(name, spec, labels).dump());
    EXPECT_EQ(r.code, 201) << r.body;
    return json::parse(r.body);
  }

  std::unique_ptr<RawConnection> conn_;
};

TEST_F(WireFormatTest, GroupVersionIsPlain404UntilTheCrdIsEstablished) {
  auto r = conn_->Do("GET", "/apis/ringtrain.dev/v1alpha1");
  EXPECT_EQ(r.code, 404);
  EXPECT_EQ(r.headers["content-type"], "text/plain; charset=utf-8");
  EXPECT_EQ(r.body, "404 page not found\n");

  InstallCrd();
  r = conn_->Do("GET",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                "trainingjobs.ringtrain.dev");
  ASSERT_EQ(r.code, 200);
  json crd = json::parse(r.body);
  ASSERT_EQ(crd["status"]["conditions"].size(), 2u);
  EXPECT_EQ(crd["status"]["conditions"][0]["type"], "NamesAccepted");
  EXPECT_EQ(crd["status"]["conditions"][1]["type"], "Established");
  EXPECT_EQ(crd["status"]["conditions"][1]["status"], "True");
  EXPECT_EQ(crd["status"]["acceptedNames"]["listKind"], "TrainingJobList");

  r = conn_->Do("GET", "/apis/ringtrain.dev/v1alpha1");
  ASSERT_EQ(r.code, 200);
  EXPECT_NE(
      r.body.find(
          R"({"kind":"APIResourceList","apiVersion":"v1","groupVersion":"ringtrain.dev/v1alpha1","resources":[{"name":"trainingjobs","singularName":"trainingjob","namespaced":true,"kind":"TrainingJob","verbs":["delete","deletecollection","get","list","patch","create","update","watch"],"shortNames":["tj"])"),
      std::string::npos)
      << r.body;
  EXPECT_NE(
      r.body.find(
          R"({"name":"trainingjobs/status","singularName":"","namespaced":true,"kind":"TrainingJob","verbs":["get","patch","update"]})"),
      std::string::npos);

  r = conn_->Do("GET", kTj);
  ASSERT_EQ(r.code, 200);
  json list = json::parse(r.body);
  EXPECT_EQ(list["kind"], "TrainingJobList");
  EXPECT_EQ(list["metadata"]["continue"], "");

  r = conn_->Do("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                LoadManifest("manifests/crd/trainingjobs.ringtrain.dev.yaml").dump());
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(json::parse(r.body)["reason"], "AlreadyExists");
}

TEST_F(WireFormatTest, DiscoveryDocuments) {
  auto r = conn_->Do("GET", "/api");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(r.body.rfind(R"({"kind":"APIVersions","versions":["v1"],)", 0), 0u) << r.body;
  EXPECT_EQ(r.body.back(), '\n');
  r = conn_->Do("GET", "/apis/coordination.k8s.io/v1");
  ASSERT_EQ(r.code, 200);
  EXPECT_NE(
      r.body.find(R"("name":"leases","singularName":"lease","namespaced":true,"kind":"Lease")"),
      std::string::npos);
  r = conn_->Do("GET", "/version");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["gitVersion"], "v1.28.7");
  EXPECT_NE(r.body.back(), '\n');  // /version is indented and has no trailing newline
  // A body over 2 KiB is chunked, a smaller one has Content-Length.
  r = conn_->Do("GET", "/api/v1");
  EXPECT_TRUE(r.chunked);
  r = conn_->Do("GET", "/apis/coordination.k8s.io/v1");
  EXPECT_FALSE(r.chunked);
  EXPECT_EQ(r.headers["content-length"], std::to_string(r.body.size()));
}

TEST_F(WireFormatTest, CreateFillsServerFieldsAndSchemaDefaults) {
  InstallCrd();
  json job = CreateJob("demo", {{"replicas", 2}});
  EXPECT_EQ(job["metadata"]["generation"], 1);
  EXPECT_EQ(job["metadata"]["uid"].get<std::string>().size(), 36u);
  EXPECT_FALSE(job["metadata"]["creationTimestamp"].get<std::string>().empty());
  std::int64_t rv = std::stoll(job["metadata"]["resourceVersion"].get<std::string>());
  EXPECT_GT(rv, 0);
  EXPECT_EQ(job["spec"]["runPolicy"]["backoffLimit"], 3);
  EXPECT_EQ(job["spec"]["runPolicy"]["cleanPodPolicy"], "Running");
  EXPECT_EQ(job["spec"]["runPolicy"]["progressDeadlineSeconds"], 300);
  EXPECT_EQ(job["spec"]["runPolicy"]["suspend"], false);
  EXPECT_EQ(job["spec"]["backend"], "auto");
  EXPECT_EQ(job["spec"]["train"]["optimizer"], "adam");
  EXPECT_EQ(job["spec"]["checkpoint"]["everySteps"], 500);
  EXPECT_FALSE(job.contains("status"));

  json second = CreateJob("demo-2", {{"replicas", 1}});
  EXPECT_GT(std::stoll(second["metadata"]["resourceVersion"].get<std::string>()), rv);

  auto r = conn_->Do("POST", kTj,
                     json({{"apiVersion", "ringtrain.dev/v1alpha1"},
                           {"kind", "TrainingJob"},
                           {"metadata", {{"generateName", "gen-"}}},
                           {"spec", {{"replicas", 1}}}})
                         .dump());
  ASSERT_EQ(r.code, 201);
  std::string name = json::parse(r.body)["metadata"]["name"];
  EXPECT_EQ(name.rfind("gen-", 0), 0u);
  EXPECT_EQ(name.size(), 9u);
}

// t2-04: the exact 422 bodies.
TEST_F(WireFormatTest, SchemaViolationsAre422WithCauses) {
  InstallCrd();
  auto r = conn_->Do(
      "POST", kTj,
      Job("bad-zero", {{"replicas", 0}, {"image", "ghcr.io/ringtrain/trainer:0.1"}}).dump());
  EXPECT_EQ(r.code, 422);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"TrainingJob.ringtrain.dev \"bad-zero\" is invalid: spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1","reason":"Invalid","details":{"name":"bad-zero","group":"ringtrain.dev","kind":"TrainingJob","causes":[{"reason":"FieldValueInvalid","message":"Invalid value: 0: spec.replicas in body should be greater than or equal to 1","field":"spec.replicas"}]},"code":422})"
      "\n");

  r = conn_->Do("POST", kTj,
                Job("bad-missing", {{"image", "ghcr.io/ringtrain/trainer:0.1"}}).dump());
  EXPECT_EQ(r.code, 422);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"TrainingJob.ringtrain.dev \"bad-missing\" is invalid: spec.replicas: Required value","reason":"Invalid","details":{"name":"bad-missing","group":"ringtrain.dev","kind":"TrainingJob","causes":[{"reason":"FieldValueRequired","message":"Required value","field":"spec.replicas"}]},"code":422})"
      "\n");

  r = conn_->Do("POST", kTj, Job("bad-type", {{"replicas", "two"}, {"image", 7}}).dump());
  EXPECT_EQ(r.code, 422);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"TrainingJob.ringtrain.dev \"bad-type\" is invalid: [spec.image: Invalid value: \"integer\": spec.image in body must be of type string: \"integer\", spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"]","reason":"Invalid","details":{"name":"bad-type","group":"ringtrain.dev","kind":"TrainingJob","causes":[{"reason":"FieldValueTypeInvalid","message":"Invalid value: \"integer\": spec.image in body must be of type string: \"integer\"","field":"spec.image"},{"reason":"FieldValueTypeInvalid","message":"Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"","field":"spec.replicas"}]},"code":422})"
      "\n");

  r = conn_->Do(
      "POST", kTj,
      Job("bad-enum", {{"replicas", 1}, {"backend", "mpi"}, {"gpusPerReplica", 17}}).dump());
  EXPECT_EQ(r.code, 422);
  json st = json::parse(r.body);
  ASSERT_EQ(st["details"]["causes"].size(), 2u);
  EXPECT_EQ(st["details"]["causes"][0]["reason"], "FieldValueNotSupported");
  EXPECT_EQ(st["details"]["causes"][0]["message"],
            R"(Unsupported value: "mpi": supported values: "auto", "nccl", "tcp")");
  EXPECT_EQ(st["details"]["causes"][1]["message"],
            "Invalid value: 17: spec.gpusPerReplica in body should be less than or equal to 16");

  // Unknown fields: pruned with a Warning header, or 400 with fieldValidation=Strict.
  r = conn_->Do("POST", kTj, Job("unknown-field", {{"replicas", 1}, {"bogus", 1}}).dump());
  EXPECT_EQ(r.code, 201);
  EXPECT_EQ(r.headers["warning"], R"(299 - "unknown field \"spec.bogus\"")");
  EXPECT_FALSE(json::parse(r.body)["spec"].contains("bogus"));
  r = conn_->Do("POST", std::string(kTj) + "?fieldValidation=Strict",
                Job("strict", {{"replicas", 1}, {"bogus", 1}}).dump());
  EXPECT_EQ(r.code, 400);
  EXPECT_EQ(json::parse(r.body)["message"],
            "TrainingJob in version \"v1alpha1\" cannot be handled as a TrainingJob: strict "
            "decoding error: unknown field \"spec.bogus\"");

  json wrong_ns = Job("wrong-ns", {{"replicas", 1}});
  wrong_ns["metadata"]["namespace"] = "kube-system";
  r = conn_->Do("POST", kTj, wrong_ns.dump());
  EXPECT_EQ(r.code, 400);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the namespace of the provided object does not match the namespace sent on the request","reason":"BadRequest","code":400})"
      "\n");

  CreateJob("demo", {{"replicas", 1}});
  r = conn_->Do("POST", kTj, Job("demo", {{"replicas", 1}}).dump());
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"trainingjobs.ringtrain.dev \"demo\" already exists","reason":"AlreadyExists","details":{"name":"demo","group":"ringtrain.dev","kind":"trainingjobs"},"code":409})"
      "\n");
}

// t2-06: optimistic concurrency on a custom resource and on a Pod.
TEST_F(WireFormatTest, OptimisticConcurrency) {
  InstallCrd();
  json job = CreateJob("demo", {{"replicas", 2}});
  std::string stale = job["metadata"]["resourceVersion"];
  job["spec"]["replicas"] = 3;
  auto r = conn_->Do("PUT", std::string(kTj) + "/demo", job.dump());
  ASSERT_EQ(r.code, 200) << r.body;
  json updated = json::parse(r.body);
  EXPECT_EQ(updated["metadata"]["generation"], 2);

  job["spec"]["replicas"] = 4;  // still carries the stale resourceVersion
  r = conn_->Do("PUT", std::string(kTj) + "/demo", job.dump());
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on trainingjobs.ringtrain.dev \"demo\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"demo","group":"ringtrain.dev","kind":"trainingjobs"},"code":409})"
      "\n");

  for (const char* rv : {"", "0"}) {
    json no_rv = updated;
    if (*rv == '\0') {
      no_rv["metadata"].erase("resourceVersion");
    } else {
      no_rv["metadata"]["resourceVersion"] = rv;
    }
    r = conn_->Do("PUT", std::string(kTj) + "/demo", no_rv.dump());
    EXPECT_EQ(r.code, 422);
    EXPECT_EQ(
        r.body,
        R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"trainingjobs.ringtrain.dev \"demo\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update","reason":"Invalid","details":{"name":"demo","group":"ringtrain.dev","kind":"trainingjobs","causes":[{"reason":"FieldValueInvalid","message":"Invalid value: 0x0: must be specified for an update","field":"metadata.resourceVersion"}]},"code":422})"
        "\n");
  }
  json bad_rv = updated;
  bad_rv["metadata"]["resourceVersion"] = "abc";
  r = conn_->Do("PUT", std::string(kTj) + "/demo", bad_rv.dump());
  EXPECT_EQ(r.code, 500);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"strconv.ParseUint: parsing \"abc\": invalid syntax","code":500})"
      "\n");

  // An effectively empty update keeps the resourceVersion.
  r = conn_->Do("PUT", std::string(kTj) + "/demo", updated.dump());
  EXPECT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["metadata"]["resourceVersion"],
            updated["metadata"]["resourceVersion"]);

  // Pods: no resourceVersion is an unconditional update; a stale one is a 409.
  r = conn_->Do("POST", kPods, Pod("occ-pod").dump());
  ASSERT_EQ(r.code, 201) << r.body;
  json pod = json::parse(r.body);
  std::string pod_rv = pod["metadata"]["resourceVersion"];
  pod["metadata"].erase("resourceVersion");
  pod["metadata"]["labels"] = {{"a", "b"}};
  r = conn_->Do("PUT", std::string(kPods) + "/occ-pod", pod.dump());
  EXPECT_EQ(r.code, 200) << r.body;
  pod["metadata"]["resourceVersion"] = pod_rv;
  r = conn_->Do("PUT", std::string(kPods) + "/occ-pod", pod.dump());
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on pods \"occ-pod\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"occ-pod","kind":"pods"},"code":409})"
      "\n");
}

// t2-05: the status subresource.
TEST_F(WireFormatTest, StatusSubresourceSplitsSpecAndStatus) {
  InstallCrd();
  json job = CreateJob("demo", {{"replicas", 2}}, {{"app.kubernetes.io/name", "ringtrain"}});
  std::string rv0 = job["metadata"]["resourceVersion"];

  json with_status = job;
  with_status["status"] = {{"phase", "Running"}, {"restarts", 0}};
  with_status["spec"]["replicas"] = 99;                    // ignored on /status
  with_status["metadata"]["labels"]["extra"] = "ignored";  // ignored on /status
  auto r = conn_->Do("PUT", std::string(kTj) + "/demo/status", with_status.dump());
  ASSERT_EQ(r.code, 200) << r.body;
  json after = json::parse(r.body);
  EXPECT_EQ(after["status"]["phase"], "Running");
  EXPECT_EQ(after["spec"]["replicas"], 2);
  EXPECT_FALSE(after["metadata"]["labels"].contains("extra"));
  EXPECT_EQ(after["metadata"]["generation"], 1);
  EXPECT_GT(std::stoll(after["metadata"]["resourceVersion"].get<std::string>()), std::stoll(rv0));

  // The status schema is enforced on /status too.
  r = conn_->Do("PATCH", std::string(kTj) + "/demo/status", R"({"status":{"phase":"Exploded"}})",
                "application/merge-patch+json");
  EXPECT_EQ(r.code, 422);
  // The last evaluation (status.progress.testAccuracy, testMSE) is kept, not pruned, within its
  // range.
  r = conn_->Do("PATCH", std::string(kTj) + "/demo/status",
                R"({"status":{"progress":{"step":938,"testAccuracy":0.8945,"testMSE":0.0123}}})",
                "application/merge-patch+json");
  ASSERT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["status"]["progress"]["testAccuracy"], 0.8945);
  EXPECT_EQ(json::parse(r.body)["status"]["progress"]["testMSE"], 0.0123);
  r = conn_->Do("PATCH", std::string(kTj) + "/demo/status",
                R"({"status":{"progress":{"step":938,"testAccuracy":1.5}}})",
                "application/merge-patch+json");
  EXPECT_EQ(r.code, 422);
  EXPECT_NE(r.body.find("status.progress.testAccuracy"), std::string::npos) << r.body;

  // A merge patch replaces whole lists (conditions included).
  r = conn_->Do("PATCH", std::string(kTj) + "/demo/status",
                R"({"status":{"conditions":[{"type":"Created","status":"True"}]}})",
                "application/merge-patch+json");
  ASSERT_EQ(r.code, 200);
  r = conn_->Do("PATCH", std::string(kTj) + "/demo/status",
                R"({"status":{"conditions":[{"type":"Complete","status":"True"}]}})",
                "application/merge-patch+json");
  ASSERT_EQ(r.code, 200);
  after = json::parse(r.body);
  ASSERT_EQ(after["status"]["conditions"].size(), 1u);
  EXPECT_EQ(after["status"]["conditions"][0]["type"], "Complete");

  // A stale resourceVersion inside a patch is a precondition: 409.
  r = conn_->Do("PATCH", std::string(kTj) + "/demo/status",
                R"({"metadata":{"resourceVersion":")" + rv0 + R"("},"status":{"phase":"Failed"}})",
                "application/merge-patch+json");
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(json::parse(r.body)["reason"], "Conflict");

  // The main resource ignores .status; a spec change bumps generation.
  json current = after;
  current["spec"]["replicas"] = 3;
  current["status"]["phase"] = "Succeeded";
  r = conn_->Do("PUT", std::string(kTj) + "/demo", current.dump());
  ASSERT_EQ(r.code, 200);
  after = json::parse(r.body);
  EXPECT_EQ(after["spec"]["replicas"], 3);
  EXPECT_EQ(after["status"]["phase"], "Running");
  EXPECT_EQ(after["metadata"]["generation"], 2);

  // A merge patch of only .status on the main resource changes nothing: same resourceVersion.
  r = conn_->Do("PATCH", std::string(kTj) + "/demo", R"({"status":{"phase":"Failed"}})",
                "application/merge-patch+json");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["metadata"]["resourceVersion"],
            after["metadata"]["resourceVersion"]);

  // Custom resources take no strategic-merge patch.
  r = conn_->Do("PATCH", std::string(kTj) + "/demo", R"({"spec":{"replicas":4}})",
                "application/strategic-merge-patch+json");
  EXPECT_EQ(r.code, 415);
}

TEST_F(WireFormatTest, TableOutputUsesPrinterColumns) {
  InstallCrd();
  CreateJob("demo", {{"replicas", 2}});
  ASSERT_TRUE(
      server_
          ->PatchStatus(
              {"ringtrain.dev", "trainingjobs"}, "default", "demo",
              {{"phase", "Running"},
               {"restarts", 1},
               {"conditions",
                {{{"type", "Created"}, {"status", "True"}, {"reason", "Created"}},
                 {{"type", "PodsReady"}, {"status", "False"}, {"reason", "Unschedulable"}}}},
               {"progress", {{"step", 120}, {"samplesPerSecond", 2048.5}}}})
          .ok());
  CreateJob("demo-b", {{"replicas", 1}});
  auto r = conn_->Do("GET", kTj, "", "",
                     {"Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json"});
  ASSERT_EQ(r.code, 200) << r.body;
  json table = json::parse(r.body);
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["apiVersion"], "meta.k8s.io/v1");
  std::vector<std::string> names;
  for (const auto& c : table["columnDefinitions"]) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"Name", "Phase", "Replicas", "Restarts", "Step",
                                             "Samples/s", "Accuracy", "Pods", "Age"}));
  // As the real v1.28 server describes a filter column (recorded 2026-11-26).
  EXPECT_EQ(table["columnDefinitions"][7]["description"],
            "Custom resource definition column (in JSONPath format): "
            ".status.conditions[?(@.type==\"PodsReady\")].reason");
  EXPECT_EQ(table["columnDefinitions"][1]["description"],
            "Custom resource definition column (in JSONPath format): .status.phase");
  ASSERT_EQ(table["rows"].size(), 2u);
  json cells = table["rows"][0]["cells"];
  EXPECT_EQ(cells[0], "demo");
  EXPECT_EQ(cells[1], "Running");
  EXPECT_EQ(cells[2], 2);
  EXPECT_EQ(cells[3], 1);
  EXPECT_EQ(cells[4], 120);
  EXPECT_EQ(cells[5], 2048.5);
  EXPECT_EQ(cells[6], nullptr);          // no evaluation yet
  EXPECT_EQ(cells[7], "Unschedulable");  // the filter's first match
  EXPECT_TRUE(cells[8].is_string());
  EXPECT_EQ(table["rows"][1]["cells"][1], nullptr);  // demo-b has no status yet
  EXPECT_EQ(table["rows"][1]["cells"][7], nullptr);  // no match: null, as the real server
  EXPECT_EQ(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

TEST_F(WireFormatTest, LabelSelectorsAndPaging) {
  InstallCrd();
  CreateJob("demo", {{"replicas", 1}},
            {{"app.kubernetes.io/name", "ringtrain"}, {"ringtrain.dev/job", "demo"}});
  CreateJob("demo-b", {{"replicas", 1}},
            {{"app.kubernetes.io/name", "ringtrain"}, {"ringtrain.dev/job", "demo-b"}});
  CreateJob("other", {{"replicas", 1}}, {{"app.kubernetes.io/name", "something-else"}});
  auto names = [&](const std::string& query) {
    auto r = conn_->Do("GET", std::string(kTj) + "?" + query);
    EXPECT_EQ(r.code, 200) << query << ": " << r.body;
    std::vector<std::string> out;
    json list = json::parse(r.body);
    for (const auto& i : list["items"]) out.push_back(i["metadata"]["name"]);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names("labelSelector=app.kubernetes.io%2Fname%3Dringtrain"), (V{"demo", "demo-b"}));
  EXPECT_EQ(names("labelSelector=ringtrain.dev%2Fjob%20in%20(demo%2Cnope)%2C!missing-label"),
            (V{"demo"}));
  EXPECT_EQ(names("labelSelector=app.kubernetes.io%2Fname!%3Dringtrain"), (V{"other"}));
  EXPECT_EQ(names("labelSelector=ringtrain.dev%2Fjob%20notin%20(demo)"), (V{"demo-b", "other"}));
  EXPECT_EQ(names("labelSelector=ringtrain.dev%2Fjob"), (V{"demo", "demo-b"}));
  EXPECT_EQ(names("labelSelector=!ringtrain.dev%2Fjob"), (V{"other"}));
  EXPECT_EQ(names("fieldSelector=metadata.name%3Ddemo-b"), (V{"demo-b"}));

  auto r = conn_->Do("GET", std::string(kTj) + "?labelSelector=a%3D%3D%3Db");
  EXPECT_EQ(r.code, 400);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"unable to parse requirement: found '=', expected: identifier","reason":"BadRequest","code":400})"
      "\n");

  r = conn_->Do("GET", std::string(kTj) + "?limit=1");
  json page = json::parse(r.body);
  EXPECT_EQ(page["items"].size(), 1u);
  EXPECT_EQ(page["metadata"]["remainingItemCount"], 2);
  std::string cont = page["metadata"]["continue"];
  ASSERT_FALSE(cont.empty());
  EXPECT_EQ(names("limit=2&continue=" + cont), (V{"demo-b", "other"}));
  r = conn_->Do("GET", std::string(kTj) + "?limit=1&continue=not-a-token");
  EXPECT_EQ(r.code, 400);
  server_->ForceCompaction();
  r = conn_->Do("GET", std::string(kTj) + "?limit=1&continue=" + cont);
  EXPECT_EQ(r.code, 410);
  EXPECT_EQ(json::parse(r.body)["reason"], "Expired");
}

// t2-09 and 09: watch streams are chunked, one JSON event per chunk and line.
TEST_F(WireFormatTest, WatchStreamsEventsThenBookmarkThenEndsCleanly) {
  auto r = conn_->Do("GET", std::string(kPods) + "?labelSelector=ringtrain.dev%2Fjob%3Dwatchdemo");
  std::string list_rv = json::parse(r.body)["metadata"]["resourceVersion"];
  RawConnection watch(server_->port());
  watch.Send("GET", std::string(kPods) +
                        "?watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion=" +
                        list_rv + "&labelSelector=ringtrain.dev%2Fjob%3Dwatchdemo");
  RawResponse head = watch.ReadHead();
  EXPECT_EQ(head.code, 200);
  EXPECT_EQ(head.headers["transfer-encoding"], "chunked");
  EXPECT_EQ(head.headers["content-type"], "application/json");

  // An unrelated pod must not show up.
  ASSERT_EQ(conn_->Do("POST", kPods, Pod("unrelated").dump()).code, 201);
  ASSERT_EQ(
      conn_->Do("POST", kPods, Pod("watch-pod-0", {{"ringtrain.dev/job", "watchdemo"}}).dump())
          .code,
      201);
  r = conn_->Do("PATCH", std::string(kPods) + "/watch-pod-0/status",
                R"({"status":{"phase":"Running"}})", "application/merge-patch+json");
  ASSERT_EQ(r.code, 200) << r.body;
  r = conn_->Do("DELETE", std::string(kPods) + "/watch-pod-0");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["kind"], "Pod");

  std::vector<std::string> types;
  std::vector<std::int64_t> rvs;
  bool ended = false;
  while (auto chunk = watch.NextChunk(std::chrono::seconds(6))) {
    if (chunk->empty()) {
      ended = true;
      break;
    }
    ASSERT_EQ(chunk->back(), '\n');
    ASSERT_EQ(chunk->find('\n'), chunk->size() - 1) << "one event per chunk";
    ASSERT_EQ(chunk->rfind("{\"type\":\"", 0), 0u) << *chunk;
    json ev = json::parse(*chunk);
    types.push_back(ev["type"]);
    rvs.push_back(std::stoll(ev["object"]["metadata"]["resourceVersion"].get<std::string>()));
    if (ev["type"] == "BOOKMARK") {
      EXPECT_EQ(ev["object"]["kind"], "Pod");
      EXPECT_FALSE(ev["object"]["metadata"].contains("name"));
    } else {
      EXPECT_EQ(ev["object"]["metadata"]["name"], "watch-pod-0");
    }
  }
  EXPECT_TRUE(ended) << "timeoutSeconds ends the stream with a zero-length chunk";
  // Events in order, then BOOKMARKs (every bookmark_interval, and ~2 s before the deadline)
  // carrying the last event's resourceVersion.
  ASSERT_GE(types.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(types.begin(), types.begin() + 4),
            (std::vector<std::string>{"ADDED", "MODIFIED", "MODIFIED", "DELETED"}));
  for (std::size_t i = 4; i < types.size(); ++i) {
    EXPECT_EQ(types[i], "BOOKMARK");
    EXPECT_EQ(rvs[i], rvs[3]);
  }
  EXPECT_TRUE(std::is_sorted(rvs.begin(), rvs.end()));
  // The connection stays usable after a clean end.
  EXPECT_EQ(watch.Do("GET", "/version").code, 200);
}

TEST_F(WireFormatTest, WatchWithoutResourceVersionStartsWithSyntheticAdds) {
  ASSERT_EQ(conn_->Do("POST", kPods, Pod("existing-0").dump()).code, 201);
  ASSERT_EQ(conn_->Do("POST", kPods, Pod("existing-1").dump()).code, 201);
  RawConnection watch(server_->port());
  watch.Send("GET", std::string(kPods) + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=1");
  ASSERT_EQ(watch.ReadHead().code, 200);
  std::vector<std::string> events;
  while (auto chunk = watch.NextChunk(std::chrono::seconds(4))) {
    if (chunk->empty()) break;
    json ev = json::parse(*chunk);
    events.push_back(ev["type"].get<std::string>() + " " +
                     ev["object"]["metadata"]["name"].get<std::string>());
  }
  // No BOOKMARK without a resourceVersion, as the real server.
  EXPECT_EQ(events, (std::vector<std::string>{"ADDED existing-0", "ADDED existing-1"}));
}

// 08: a watch from a compacted resourceVersion gets 200 and one ERROR event with 410 Expired.
TEST_F(WireFormatTest, WatchFromCompactedResourceVersionIsExpired) {
  ASSERT_EQ(conn_->Do("POST", kPods, Pod("p").dump()).code, 201);
  server_->ForceCompaction();
  std::int64_t compacted = server_->CurrentResourceVersion();
  RawConnection watch(server_->port());
  watch.Send("GET", std::string(kPods) + "?watch=1&resourceVersion=1");
  RawResponse head = watch.ReadHead();
  EXPECT_EQ(head.code, 200);
  auto chunk = watch.NextChunk(std::chrono::seconds(2));
  ASSERT_TRUE(chunk.has_value());
  EXPECT_EQ(
      *chunk,
      R"x({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 ()x" +
          std::to_string(compacted) +
          R"x()","reason":"Expired","code":410}})x"
          "\n");
  auto end = watch.NextChunk(std::chrono::seconds(2));
  ASSERT_TRUE(end.has_value());
  EXPECT_TRUE(end->empty());
  // From the current resourceVersion the watch is fine.
  RawConnection ok(server_->port());
  ok.Send("GET", std::string(kPods) +
                     "?watch=1&timeoutSeconds=1&resourceVersion=" + std::to_string(compacted));
  EXPECT_EQ(ok.ReadHead().code, 200);
  auto first = ok.NextChunk(std::chrono::seconds(3));
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(first->empty());
}

TEST_F(WireFormatTest, WatchFollowsSelectorTransitionsAndCustomResources) {
  InstallCrd();
  auto r = conn_->Do("GET", kTj);
  std::string rv = json::parse(r.body)["metadata"]["resourceVersion"];
  RawConnection watch(server_->port());
  watch.Send("GET", std::string(kTj) + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + rv +
                        "&labelSelector=team%3Da");
  ASSERT_EQ(watch.ReadHead().code, 200);
  CreateJob("j", {{"replicas", 1}}, {{"team", "a"}});
  r = conn_->Do("PATCH", std::string(kTj) + "/j", R"({"metadata":{"labels":{"team":"b"}}})",
                "application/merge-patch+json");
  ASSERT_EQ(r.code, 200);
  r = conn_->Do("PATCH", std::string(kTj) + "/j", R"({"metadata":{"labels":{"team":"a"}}})",
                "application/merge-patch+json");
  ASSERT_EQ(r.code, 200);
  r = conn_->Do("DELETE", std::string(kTj) + "/j");
  ASSERT_EQ(r.code, 200);
  json st = json::parse(r.body);
  EXPECT_EQ(st["kind"], "Status");
  EXPECT_EQ(st["status"], "Success");
  EXPECT_EQ(st["details"]["kind"], "trainingjobs");
  std::vector<std::string> types;
  while (types.size() < 5) {
    auto chunk = watch.NextChunk(std::chrono::seconds(3));
    ASSERT_TRUE(chunk.has_value()) << "got only " << types.size() << " events";
    json ev = json::parse(*chunk);
    types.push_back(ev["type"]);
    if (ev["type"] == "BOOKMARK") {
      EXPECT_EQ(
          chunk->rfind(
              R"({"type":"BOOKMARK","object":{"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob","metadata":{"resourceVersion":")",
              0),
          0u)
          << *chunk;
    }
  }
  EXPECT_EQ(types, (std::vector<std::string>{"ADDED", "DELETED", "ADDED", "DELETED", "BOOKMARK"}));
  server_->CloseAllWatches();
  auto end = watch.NextChunk(std::chrono::seconds(2));
  ASSERT_TRUE(end.has_value());
  EXPECT_TRUE(end->empty());
}

TEST_F(WireFormatTest, PodsDefaultsDeletesAndStrategicMerge) {
  auto r = conn_->Do("POST", kPods, Pod("p0").dump());
  ASSERT_EQ(r.code, 201);
  json pod = json::parse(r.body);
  EXPECT_EQ(pod["status"]["phase"], "Pending");
  EXPECT_EQ(pod["spec"]["containers"][0]["terminationMessagePath"], "/dev/termination-log");
  EXPECT_EQ(pod["spec"]["schedulerName"], "default-scheduler");

  r = conn_->Do(
      "PATCH", std::string(kPods) + "/p0/status",
      R"({"status":{"conditions":[{"type":"Ready","status":"False"},{"type":"PodScheduled","status":"True"}]}})",
      "application/strategic-merge-patch+json");
  ASSERT_EQ(r.code, 200);
  r = conn_->Do("PATCH", std::string(kPods) + "/p0/status",
                R"({"status":{"conditions":[{"type":"Ready","status":"True"}]}})",
                "application/strategic-merge-patch+json");
  ASSERT_EQ(r.code, 200);
  json conditions = json::parse(r.body)["status"]["conditions"];
  ASSERT_EQ(conditions.size(), 2u) << conditions;
  EXPECT_EQ(conditions[0]["status"], "True");

  r = conn_->Do("GET", std::string(kPods) + "/does-not-exist");
  EXPECT_EQ(r.code, 404);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"does-not-exist\" not found","reason":"NotFound","details":{"name":"does-not-exist","kind":"pods"},"code":404})"
      "\n");
  r = conn_->Do("DELETE", std::string(kPods) + "/p0",
                R"({"preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}})");
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(json::parse(r.body)["details"]["kind"], "Pod");
  r = conn_->Do("DELETE", std::string(kPods) + "/p0", R"({"propagationPolicy":"Background"})");
  EXPECT_EQ(r.code, 200);
  EXPECT_FALSE(json::parse(r.body)["metadata"]["deletionTimestamp"].is_null());
  r = conn_->Do("DELETE", std::string(kPods) + "/p0");
  EXPECT_EQ(r.code, 404);
}

// A pod bound to a node is deleted with the grace asked for (DeleteOptions.gracePeriodSeconds),
// else its own terminationGracePeriodSeconds (30 by default), and a deletionTimestamp that far
// ahead; an unbound one, or one that has ended, with none: as t4-03-pod-delete-grace.txt and
// t4-04-ended-pod-delete.txt recorded.
TEST_F(WireFormatTest, ADeletedPodOnANodeGetsTheGraceAskedForElseItsOwn) {
  for (const char* name : {"short", "own", "unbound"}) {
    json pod = Pod(name);
    if (std::string(name) != "unbound") pod["spec"]["nodeName"] = "node-0";
    ASSERT_EQ(conn_->Do("POST", kPods, pod.dump()).code, 201);
  }
  const auto at = std::chrono::system_clock::now();
  auto r = conn_->Do(
      "DELETE", std::string(kPods) + "/short",
      R"({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background","gracePeriodSeconds":1})");
  ASSERT_EQ(r.code, 200);
  json m = json::parse(r.body)["metadata"];
  EXPECT_EQ(m["deletionGracePeriodSeconds"], 1) << r.body;
  auto when = ParseRfc3339(m["deletionTimestamp"].get<std::string>());
  ASSERT_TRUE(when.has_value());
  EXPECT_GE(*when, std::chrono::floor<std::chrono::seconds>(at) + std::chrono::seconds(1));
  r = conn_->Do("DELETE", std::string(kPods) + "/own",
                R"({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"})");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["metadata"]["deletionGracePeriodSeconds"], 30) << r.body;
  r = conn_->Do("DELETE", std::string(kPods) + "/unbound", R"({"gracePeriodSeconds":5})");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["metadata"]["deletionGracePeriodSeconds"], 0) << r.body;
  // One that has ended goes at once too (t4-04-ended-pod-delete.txt).
  json done = Pod("done");
  done["spec"]["nodeName"] = "node-0";
  ASSERT_EQ(conn_->Do("POST", kPods, done.dump()).code, 201);
  ASSERT_EQ(conn_
                ->Do("PATCH", std::string(kPods) + "/done/status",
                     R"({"status":{"phase":"Succeeded"}})", "application/merge-patch+json")
                .code,
            200);
  r = conn_->Do("DELETE", std::string(kPods) + "/done", R"({"gracePeriodSeconds":5})");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["metadata"]["deletionGracePeriodSeconds"], 0) << r.body;
}

// A scheduler's binding, then a bound pod's graceful delete until its kubelet's delete with grace
// 0, byte for byte as t4-05-binding-graceful-delete.txt recorded.
TEST_F(WireFormatTest, ABoundPodStaysTerminatingUntilItsKubeletDeletesItWithGraceZero) {
  auto r = conn_->Do("POST", kPods, Pod("bindme").dump());
  ASSERT_EQ(r.code, 201);
  const std::string uid = json::parse(r.body)["metadata"]["uid"];
  const std::string path = std::string(kPods) + "/bindme";
  const std::string binding =
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"bindme","namespace":"default"},"target":{"apiVersion":"v1","kind":"Node","name":"container-kubelet"}})";
  r = conn_->Do("POST", path + "/binding", binding);
  EXPECT_EQ(r.code, 201);
  EXPECT_EQ(r.body,
            R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201})"
            "\n");
  r = conn_->Do("POST", path + "/binding", binding);
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on pods/binding \"bindme\": pod bindme is already assigned to node \"container-kubelet\"","reason":"Conflict","details":{"name":"bindme","kind":"pods/binding"},"code":409})"
      "\n");
  r = conn_->Do(
      "POST", std::string(kPods) + "/nosuch/binding",
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"nosuch"},"target":{"name":"n"}})");
  EXPECT_EQ(r.code, 404);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"nosuch\" not found","reason":"NotFound","details":{"name":"nosuch","kind":"pods"},"code":404})"
      "\n");
  ASSERT_EQ(conn_->Do("POST", kPods, Pod("unbound").dump()).code, 201);
  const std::string unbound = std::string(kPods) + "/unbound/binding";
  r = conn_->Do(
      "POST", unbound,
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"unbound"},"target":{"kind":"Node"}})");
  EXPECT_EQ(r.code, 500);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"target.name: Required value","code":500})"
      "\n");
  r = conn_->Do(
      "POST", unbound,
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"unbound"},"target":{"kind":"Pod","name":"n"}})");
  EXPECT_EQ(r.code, 500);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"target.kind: Unsupported value: \"Pod\": supported values: \"Node\", \"\u003cempty\u003e\"","code":500})"
      "\n");
  r = conn_->Do(
      "POST", unbound,
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"other"},"target":{"name":"n"}})");
  EXPECT_EQ(r.code, 400);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"name in URL does not match name in Binding object","reason":"BadRequest","code":400})"
      "\n");
  // A pod being deleted (unbound, held by a finalizer) is bound nowhere.
  json held = Pod("held");
  held["metadata"]["finalizers"] = {"example.com/hold"};
  ASSERT_EQ(conn_->Do("POST", kPods, held.dump()).code, 201);
  ASSERT_EQ(conn_->Do("DELETE", std::string(kPods) + "/held").code, 200);
  r = conn_->Do(
      "POST", std::string(kPods) + "/held/binding",
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"held"},"target":{"name":"n"}})");
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on pods/binding \"held\": pod held is being deleted, cannot be assigned to a host","reason":"Conflict","details":{"name":"held","kind":"pods/binding"},"code":409})"
      "\n");
  r = conn_->Do("GET", std::string(kPods) + "/unbound/binding");
  EXPECT_EQ(r.code, 405);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server does not allow this method on the requested resource","reason":"MethodNotAllowed","details":{},"code":405})"
      "\n");

  r = conn_->Do("GET", path);
  ASSERT_EQ(r.code, 200);
  json pod = json::parse(r.body);
  EXPECT_EQ(pod["spec"]["nodeName"], "container-kubelet");
  ASSERT_EQ(pod["status"]["conditions"].size(), 1u) << r.body;
  EXPECT_EQ(pod["status"]["conditions"][0]["type"], "PodScheduled");
  EXPECT_EQ(pod["status"]["conditions"][0]["status"], "True");
  EXPECT_TRUE(pod["status"]["conditions"][0]["lastProbeTime"].is_null());

  // Its own 30 s; the pod stays, terminating.
  r = conn_->Do("DELETE", path, R"({"kind":"DeleteOptions","apiVersion":"v1"})");
  ASSERT_EQ(r.code, 200);
  json m = json::parse(r.body)["metadata"];
  EXPECT_EQ(m["deletionGracePeriodSeconds"], 30);
  const std::string rv = m["resourceVersion"];
  ASSERT_EQ(conn_->Do("GET", path).code, 200);
  // Again without a grace, or with one not shorter: unchanged.
  for (const char* opts : {R"({})", R"({"gracePeriodSeconds":30})"}) {
    r = conn_->Do("DELETE", path, opts);
    ASSERT_EQ(r.code, 200);
    EXPECT_EQ(json::parse(r.body)["metadata"]["resourceVersion"], rv) << opts;
    EXPECT_EQ(json::parse(r.body)["metadata"]["deletionGracePeriodSeconds"], 30) << opts;
  }
  // A shorter one moves it, counted from the first delete.
  const auto first = ParseRfc3339(m["deletionTimestamp"].get<std::string>());
  ASSERT_TRUE(first.has_value());
  r = conn_->Do("DELETE", path, R"({"gracePeriodSeconds":10})");
  ASSERT_EQ(r.code, 200);
  m = json::parse(r.body)["metadata"];
  EXPECT_EQ(m["deletionGracePeriodSeconds"], 10);
  EXPECT_NE(m["resourceVersion"], rv);
  EXPECT_EQ(m["deletionTimestamp"], FormatRfc3339(*first - std::chrono::seconds(20)));
  // Status and label patches while it terminates keep it (its kubelet reports the end).
  ASSERT_EQ(conn_
                ->Do("PATCH", path + "/status", R"({"status":{"phase":"Failed"}})",
                     "application/merge-patch+json")
                .code,
            200);
  ASSERT_EQ(conn_
                ->Do("PATCH", path, R"({"metadata":{"labels":{"x":"y"}}})",
                     "application/merge-patch+json")
                .code,
            200);
  r = conn_->Do("GET", path);
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["status"]["phase"], "Failed");
  r = conn_->Do("DELETE", path, R"({"gracePeriodSeconds":20})");
  EXPECT_EQ(json::parse(r.body)["metadata"]["deletionGracePeriodSeconds"], 10);
  // The kubelet's final delete: a wrong uid is refused, its own removes the pod.
  r = conn_->Do(
      "DELETE", path,
      R"({"gracePeriodSeconds":0,"preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}})");
  EXPECT_EQ(r.code, 409);
  ASSERT_EQ(conn_->Do("GET", path).code, 200);
  r = conn_->Do(
      "DELETE", path,
      R"({"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0,"preconditions":{"uid":")" +
          uid + R"("}})");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["metadata"]["deletionGracePeriodSeconds"], 0);
  EXPECT_EQ(conn_->Do("GET", path).code, 404);
}

// A negative grace is 1; a DELETE of a collection leaves a bound pod terminating as its own
// DELETE does (t4-05-binding-graceful-delete.txt's last sections).
TEST_F(WireFormatTest, ANegativeGraceIsOneAndACollectionDeleteIsGracefulToo) {
  for (const char* name : {"neg", "coll"}) {
    json pod = Pod(name, {{"set", "c"}});
    pod["spec"]["nodeName"] = "node-0";
    ASSERT_EQ(conn_->Do("POST", kPods, pod.dump()).code, 201);
  }
  auto r = conn_->Do("DELETE", std::string(kPods) + "/neg",
                     R"({"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":-5})");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["metadata"]["deletionGracePeriodSeconds"], 1);
  r = conn_->Do("DELETE", std::string(kPods) + "?labelSelector=set%3Dc");
  ASSERT_EQ(r.code, 200);
  r = conn_->Do("GET", std::string(kPods) + "/coll");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(json::parse(r.body)["metadata"]["deletionGracePeriodSeconds"], 30) << r.body;
}

// A merge patch that carries metadata.uid (how the operator marks a pod it is about to delete,
// so the mark never lands on a namesake created since): the pod's own uid writes it; another is
// 422 Invalid, nothing written, byte for byte as t4-02-pod-merge-patch-uid.txt recorded.
TEST_F(WireFormatTest, AMergePatchWithAnotherUidIsInvalidNotAConflict) {
  auto r = conn_->Do("POST", kPods, Pod("demo-worker-0").dump());
  ASSERT_EQ(r.code, 201);
  const std::string uid = json::parse(r.body)["metadata"]["uid"];
  const std::string path = std::string(kPods) + "/demo-worker-0";
  r = conn_->Do(
      "PATCH", path,
      R"({"metadata":{"uid":"00000000-0000-0000-0000-000000000001","annotations":{"ringtrain.dev/deleted-by-operator":"released"}}})",
      "application/merge-patch+json");
  EXPECT_EQ(r.code, 422);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Pod \"demo-worker-0\" is invalid: metadata.uid: Invalid value: \"00000000-0000-0000-0000-000000000001\": field is immutable","reason":"Invalid","details":{"name":"demo-worker-0","kind":"Pod","causes":[{"reason":"FieldValueInvalid","message":"Invalid value: \"00000000-0000-0000-0000-000000000001\": field is immutable","field":"metadata.uid"},{"reason":"FieldValueInvalid","message":"Invalid value: \"00000000-0000-0000-0000-000000000001\": field is immutable","field":"metadata.uid"}]},"code":422})"
      "\n");
  r = conn_->Do("GET", path);
  ASSERT_EQ(r.code, 200);
  EXPECT_FALSE(json::parse(r.body)["metadata"].contains("annotations")) << r.body;

  r = conn_->Do(
      "PATCH", path,
      json{{"metadata",
            {{"uid", uid}, {"annotations", {{"ringtrain.dev/deleted-by-operator", "released"}}}}}}
          .dump(),
      "application/merge-patch+json");
  ASSERT_EQ(r.code, 200) << r.body;
  json pod = json::parse(r.body);
  EXPECT_EQ(pod["metadata"]["uid"], uid);
  EXPECT_EQ(pod["metadata"]["annotations"]["ringtrain.dev/deleted-by-operator"], "released");
  r = conn_->Do("PATCH", std::string(kPods) + "/demo-worker-9",
                json{{"metadata", {{"uid", uid}}}}.dump(), "application/merge-patch+json");
  EXPECT_EQ(r.code, 404);
}

TEST_F(WireFormatTest, HooksRestartAndInjectedFailures) {
  ASSERT_EQ(conn_->Do("POST", kPods, Pod("keep-me").dump()).code, 201);
  std::int64_t rv = server_->CurrentResourceVersion();
  int port = server_->port();
  ASSERT_TRUE(server_->Restart(/*keep_state=*/true).ok());
  EXPECT_EQ(server_->port(), port);
  RawConnection after(server_->port());
  EXPECT_EQ(after.Do("GET", std::string(kPods) + "/keep-me").code, 200);
  EXPECT_EQ(server_->CurrentResourceVersion(), rv);
  ASSERT_TRUE(server_->Restart(/*keep_state=*/false).ok());
  RawConnection fresh(server_->port());
  EXPECT_EQ(fresh.Do("GET", std::string(kPods) + "/keep-me").code, 404);
  EXPECT_GT(server_->CurrentResourceVersion(), rv);  // resourceVersions never go back

  server_->FailNextRequests("POST", "pods", 429, 1, 2);
  auto r = fresh.Do("POST", kPods, Pod("p").dump());
  EXPECT_EQ(r.code, 429);
  EXPECT_EQ(r.headers["retry-after"], "2");
  EXPECT_EQ(fresh.Do("POST", kPods, Pod("p").dump()).code, 201);
  EXPECT_EQ(server_->RequestCount("POST", "pods"), 3);  // counts survive restarts

  auto kubelet = server_->PatchStatus(
      {"", "pods"}, "default", "p",
      {{"phase", "Failed"},
       {"containerStatuses",
        {{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", 137}}}}}}}}});
  ASSERT_TRUE(kubelet.ok());
  EXPECT_EQ(
      fresh.Do("GET", std::string(kPods) + "/p").body.find("\"exitCode\":137") != std::string::npos,
      true);
}

}  // namespace
}  // namespace ringtrain::fake::testing
