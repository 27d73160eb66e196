#include "runner/train/ring_options.h"

namespace ringtrain::train {

comm::TcpCommOptions TcpRingOptions(const RankEnv& env, const std::string& advertise_host) {
  comm::TcpCommOptions o;
  o.rank = env.rank;
  o.size = env.world_size;
  o.bind_host = env.bind_addr;
  o.advertise_host = advertise_host;
  o.connect_timeout = env.rendezvous_timeout;
  o.collective_timeout = env.collective_timeout;
  return o;
}

}  // namespace ringtrain::train
