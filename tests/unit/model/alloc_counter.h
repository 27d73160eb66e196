// Test-only count of the calling thread's heap allocations, to hold the step loop to "construct
// once, run hot". Linking it replaces the global operator new for the whole test binary.
#pragma once

#include <cstddef>

namespace ringtrain::model {

void StartCountingAllocations();
// Returns the operator-new calls this thread made since StartCountingAllocations.
long StopCountingAllocations();
// The bytes those calls asked for (what was freed meanwhile not taken off).
std::size_t CountedAllocationBytes();

}  // namespace ringtrain::model
