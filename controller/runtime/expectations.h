// Expectations (controller-runtime / Kubeflow style): the creates and deletes a reconcile issued
// and the status it wrote, per job, kept until the informer cache shows them. While any is
// unmet the job is not planned again, so a stale cache never creates a duplicate pod or plans
// from a status older than the one already written. Unmet expectations expire after a timeout.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "common/clock.h"

namespace ringtrain::op {

class Expectations {
 public:
  // An expectation not met within `timeout` (on `clock`, which must outlive this) is dropped.
  explicit Expectations(Duration timeout = Duration(30'000), const Clock* clock = &SystemClock())
      : timeout_(timeout), clock_(clock) {}

  void ExpectCreate(const std::string& key, const std::string& name);
  void ExpectDelete(const std::string& key, const std::string& name);
  // A create or delete that failed at the API: nothing will show up in the cache.
  void Lower(const std::string& key, const std::string& name);
  // The resourceVersion our status write produced; met when the cache's is at least as new.
  void ExpectJobVersion(const std::string& key, const std::string& resource_version);

  // `present`: pod name → terminating, as the cache shows the job's pods now.
  // `job_version`: the cached job's resourceVersion.
  bool Satisfied(const std::string& key, const std::map<std::string, bool>& present,
                 const std::string& job_version);
  void Clear(const std::string& key);

 private:
  struct Entry {
    std::set<std::string> creates;
    std::set<std::string> deletes;
    std::string job_version;
    SteadyTime since{};
  };
  const Duration timeout_;
  const Clock* clock_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace ringtrain::op
