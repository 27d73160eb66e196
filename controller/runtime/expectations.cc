#include "controller/runtime/expectations.h"

#include <spdlog/spdlog.h>

#include <charconv>

namespace ringtrain::op {
namespace {

// resourceVersions are opaque strings; the API server's are integers, which is what lets us
// tell "older" from "newer". Anything else counts as caught up as soon as it differs.
bool AtLeast(const std::string& cached, const std::string& expected) {
  std::int64_t a = 0, b = 0;
  auto ra = std::from_chars(cached.data(), cached.data() + cached.size(), a);
  auto rb = std::from_chars(expected.data(), expected.data() + expected.size(), b);
  if (ra.ec != std::errc() || rb.ec != std::errc()) return cached == expected;
  return a >= b;
}

}  // namespace

void Expectations::ExpectCreate(const std::string& key, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[key];
  e.creates.insert(name);
  e.deletes.erase(name);
  e.since = clock_->SteadyNow();
}

void Expectations::ExpectDelete(const std::string& key, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[key];
  e.deletes.insert(name);
  e.creates.erase(name);
  e.since = clock_->SteadyNow();
}

void Expectations::Lower(const std::string& key, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  it->second.creates.erase(name);
  it->second.deletes.erase(name);
}

void Expectations::ExpectJobVersion(const std::string& key, const std::string& resource_version) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[key];
  e.job_version = resource_version;
  e.since = clock_->SteadyNow();
}

bool Expectations::Satisfied(const std::string& key, const std::map<std::string, bool>& present,
                             const std::string& job_version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return true;
  Entry& e = it->second;
  for (auto c = e.creates.begin(); c != e.creates.end();) {
    c = present.count(*c) ? e.creates.erase(c) : std::next(c);
  }
  for (auto d = e.deletes.begin(); d != e.deletes.end();) {
    auto p = present.find(*d);
    d = (p == present.end() || p->second) ? e.deletes.erase(d) : std::next(d);
  }
  if (!e.job_version.empty() && AtLeast(job_version, e.job_version)) e.job_version.clear();
  if (e.creates.empty() && e.deletes.empty() && e.job_version.empty()) {
    entries_.erase(it);
    return true;
  }
  if (clock_->SteadyNow() - e.since > timeout_) {
    spdlog::warn(
        "expectations of {} expired unmet ({} creates, {} deletes, status {}): "
        "planning from the cache as it is",
        key, e.creates.size(), e.deletes.size(), e.job_version);
    entries_.erase(it);
    return true;
  }
  return false;
}

void Expectations::Clear(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(key);
}

}  // namespace ringtrain::op
