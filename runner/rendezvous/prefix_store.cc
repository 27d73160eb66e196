#include "runner/rendezvous/prefix_store.h"

namespace ringtrain::rendezvous {

Status PrefixStore::Set(const std::string& key, const std::string& value) {
  return store_.Set(Key(key), value);
}

StatusOr<std::string> PrefixStore::Get(const std::string& key, Duration timeout) {
  return store_.Get(Key(key), timeout);
}

StatusOr<std::int64_t> PrefixStore::Add(const std::string& key, std::int64_t delta) {
  return store_.Add(Key(key), delta);
}

StatusOr<std::string> PrefixStore::CompareSet(const std::string& key, const std::string& expected,
                                              const std::string& desired) {
  return store_.CompareSet(Key(key), expected, desired);
}

StatusOr<std::string> PrefixStore::CompareSetWithin(const std::string& key,
                                                    const std::string& expected,
                                                    const std::string& desired, Duration timeout) {
  return store_.CompareSetWithin(Key(key), expected, desired, timeout);
}

// Missing keys in a timeout message keep their prefix: the full key is what an operator greps
// for in the store, and it says which attempt was waiting.
Status PrefixStore::Wait(const std::vector<std::string>& keys, Duration timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const auto& k : keys) prefixed.push_back(Key(k));
  return store_.Wait(prefixed, timeout);
}

}  // namespace ringtrain::rendezvous
