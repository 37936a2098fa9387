#!/usr/bin/env python3
"""PCG32 and the epoch permutation of common/base/rng.h; prints the order for n = 10, seed 42."""
M = 2**64 - 1
def pcg32(seed, seq):  # rng_init(seed, seq), then rng_next() forever
    inc = (seq << 1 | 1) & M
    s = (inc + seed) * 6364136223846793005 + inc & M  # state = 0, step, state += seed, step
    while True:
        old, s = s, (s * 6364136223846793005 + inc) & M
        x, rot = ((old >> 18 ^ old) >> 27) & 0xFFFFFFFF, old >> 59
        yield (x >> rot | x << (-rot & 31)) & 0xFFFFFFFF
def permutation(n, seed):  # rng_permutation(perm, n, seed): stream 2, Fisher-Yates from the end
    g, p = pcg32(seed, 2), list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1; r = next(g)
        while r < (2**32 - bound) % bound: r = next(g)  # rng_below: reject to stay unbiased
        j = r % bound; p[i], p[j] = p[j], p[i]
    return p
print(*permutation(10, 42))
