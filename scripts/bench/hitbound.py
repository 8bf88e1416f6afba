#!/usr/bin/env python3
"""What any eviction policy could reach on hitratio.py's stream: item-level
simulations at a given capacity (items held), no server involved.

  lru      item-level LRU (memcached's policy, without slab effects)
  lfu      LFU with the full history of every key ever seen (not buildable
           in bounded memory; an upper bound for frequency-based policies)
  belady   Belady's offline optimum (knows the future)

Run it at the item counts the servers hold in hitratio.py (its curr_items)
to see how far a better policy, rather than more items, can move the miss
ratio.

    scripts/bench/hitbound.py --capacity 220735 298544 [--scan 0.2]
"""

import argparse
import heapq
from collections import OrderedDict

from hitratio import stream


def lru(keys, cap):
    cache = OrderedDict()
    misses = 0
    for k in keys:
        if k in cache:
            cache.move_to_end(k)
            continue
        misses += 1
        cache[k] = True
        if len(cache) > cap:
            cache.popitem(last=False)
    return misses


def lfu(keys, cap):
    count, held, heap = {}, set(), []
    misses = 0
    for t, k in enumerate(keys):
        c = count.get(k, 0) + 1
        count[k] = c
        heapq.heappush(heap, (c, t, k))
        if k in held:
            continue
        misses += 1
        if len(held) >= cap:
            while True:
                cc, _, victim = heapq.heappop(heap)
                if victim in held and count[victim] == cc:
                    held.discard(victim)
                    break
        held.add(k)
    return misses


def belady(keys, cap):
    n = len(keys)
    next_use, last = [0] * n, {}
    for i in range(n - 1, -1, -1):
        next_use[i] = last.get(keys[i], n + i)
        last[keys[i]] = i
    held, heap = {}, []
    misses = 0
    for i, k in enumerate(keys):
        if k not in held:
            misses += 1
            if len(held) >= cap:
                while True:
                    nu, victim = heapq.heappop(heap)
                    if held.get(victim) == -nu:
                        del held[victim]
                        break
        held[k] = next_use[i]
        heapq.heappush(heap, (-next_use[i], k))
    return misses


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--capacity", type=int, nargs="+", required=True)
    p.add_argument("--requests", type=int, default=3_000_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--alpha", type=float, default=0.99)
    p.add_argument("--scan", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policies", nargs="+", default=["lru", "lfu", "belady"])
    args = p.parse_args()
    args.warmup = 0
    keys = stream(args)
    print(f"compulsory misses: {len(set(keys)) / len(keys):.4f}")
    for cap in args.capacity:
        for name in args.policies:
            ratio = globals()[name](keys, cap) / len(keys)
            print(f"capacity {cap:8d} {name:7s} miss_ratio={ratio:.4f}", flush=True)


if __name__ == "__main__":
    main()
