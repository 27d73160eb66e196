// Test-only count of the calling thread's heap allocations, to hold the step loop to "construct
// once, run hot". Linking it replaces the global operator new for the whole test binary.
#pragma once

namespace ringtrain::model {

void StartCountingAllocations();
// Returns the operator-new calls this thread made since StartCountingAllocations.
long StopCountingAllocations();

}  // namespace ringtrain::model
