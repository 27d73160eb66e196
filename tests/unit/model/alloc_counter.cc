#include "tests/unit/model/alloc_counter.h"

#include <cstdlib>
#include <new>

// Kept out of the tests' translation units: GCC would otherwise inline these replacements at
// every std::vector and flag the malloc/free pair as a new/delete mismatch.
namespace {
thread_local bool counting = false;
thread_local long count = 0;
thread_local std::size_t bytes = 0;
}  // namespace

void* operator new(std::size_t size) {
  if (counting) {
    ++count;
    bytes += size;
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace ringtrain::model {

void StartCountingAllocations() {
  count = 0;
  bytes = 0;
  counting = true;
}

long StopCountingAllocations() {
  counting = false;
  return count;
}

std::size_t CountedAllocationBytes() { return bytes; }

}  // namespace ringtrain::model
