#!/usr/bin/env python3
"""The fewest misses any cache could have on a dumped stream: Belady's
optimum (evict the item needed furthest in the future; admit nothing needed
later than everything held), counted over the stream's second half as
equalrss.py and hitreplay count, for caches of N items (every item the same
size, as in equalrss.py's streams).

    scripts/bench/equalrss.py --dump-dir /tmp/eq ...     # the streams
    scripts/bench/optimum.py /tmp/eq/6m-scan.keys 283964 220736

Prints, per capacity, the optimum's misses and miss ratio and the
compulsory misses (keys first seen in the counted half: no cache avoids
them). A 6M-request stream takes about a minute.
"""
import argparse
import heapq

NEVER = 1 << 62


def optimum(seq, capacity, counted_from):
    """Belady's misses over `seq[counted_from:]` for `capacity` items."""
    next_use = [NEVER] * len(seq)
    seen = {}
    for i in range(len(seq) - 1, -1, -1):
        next_use[i] = seen.get(seq[i], NEVER)
        seen[seq[i]] = i
    held = {}  # key -> its next use
    heap = []  # (-next use, key), stale entries skipped lazily
    misses = 0
    for i, k in enumerate(seq):
        if k in held:
            held[k] = next_use[i]
            heapq.heappush(heap, (-next_use[i], k))
            continue
        misses += i >= counted_from
        if next_use[i] == NEVER:
            continue
        if len(held) >= capacity:
            while held.get(heap[0][1]) != -heap[0][0]:
                heapq.heappop(heap)
            if -heap[0][0] <= next_use[i]:
                continue  # everything held is needed sooner: do not admit
            del held[heapq.heappop(heap)[1]]
        held[k] = next_use[i]
        heapq.heappush(heap, (-next_use[i], k))
    return misses


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stream", help="one key a line (equalrss.py --dump-dir)")
    parser.add_argument("capacity", type=int, nargs="+", help="items the cache holds")
    args = parser.parse_args()
    ids = {}
    with open(args.stream) as f:
        seq = [ids.setdefault(k, len(ids)) for k in f.read().split()]
    half = len(seq) // 2
    first = set(seq[:half])
    compulsory = len(set(seq[half:]) - first)
    counted = len(seq) - half
    print(f"{args.stream}: {len(seq):,} requests, {len(ids):,} keys; compulsory misses {compulsory:,} "
          f"({compulsory / counted:.4f})", flush=True)
    for capacity in args.capacity:
        m = optimum(seq, capacity, half)
        print(f"  {capacity:,} items: optimum {m:,} misses ({m / counted:.4f})", flush=True)


if __name__ == "__main__":
    main()
