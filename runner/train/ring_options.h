// The TCP ring of a rank, from its environment: the one place where RINGTRAIN_BIND_ADDR, the
// advertised address and the timeouts become ring options, for the CPU and the GPU paths
// alike, so the two cannot drift (the GPU path once listened on 0.0.0.0 whatever the variable
// said). Must not open sockets.
#pragma once

#include <string>

#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/train/config.h"

namespace ringtrain::train {

comm::TcpCommOptions TcpRingOptions(const RankEnv& env, const std::string& advertise_host);

}  // namespace ringtrain::train
