#!/usr/bin/env python3
"""One rank of a Gloo all-reduce benchmark (torch.distributed, gloo backend): the peer that
bench/netns_allreduce.sh measures the TCP ring against. Prints, on rank 0, the same line as
allreduce_bench --rank: size_bytes seconds_per_op busbw_gbit_s cpu_ns_per_byte, with
busbw = 2(n-1)/n * bytes / time and cpu = getrusage user+sys of this process / bytes."""
import argparse
import resource
import time

import torch
import torch.distributed as dist


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="HOST:PORT of rank 0")
    p.add_argument("--sizes", default="1048576,4194304,67108864,268435456")
    p.add_argument("--iters", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank,
                            world_size=a.world)
    for nbytes in (int(s) for s in a.sizes.split(",")):
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        iters = a.iters or max(5, min(20, (512 << 20) // nbytes))
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        c0, t0 = cpu_seconds(), time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
            t.div_(a.world)  # the average, as the ring's kAverage
        dist.barrier()
        sec = (time.perf_counter() - t0) / iters
        cpu = cpu_seconds() - c0
        busbw = nbytes / sec * 2 * (a.world - 1) / a.world
        if a.rank == 0:
            print(f"{nbytes} {sec:.6f} {busbw * 8 / 1e9:.4f} {cpu * 1e9 / (nbytes * iters):.3f}",
                  flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
