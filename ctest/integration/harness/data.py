"""harness.data — deterministic bulk data for bodies, and its checksum."""

import hashlib
import struct


def pattern_blocks(total, block=1 << 20, seed=1):
    """Deterministic pseudo-random data in blocks: yields `total` bytes in pieces of `block`.

    Each block starts with its index so a reordered or repeated block changes the checksum.
    """
    import random
    rnd = random.Random(seed)
    base = rnd.randbytes(block)
    i = 0
    sent = 0
    while sent < total:
        n = min(block, total - sent)
        piece = (struct.pack(">Q", i) + base[8:])[:n]
        yield piece
        sent += n
        i += 1


def pattern_sha256(total, block=1 << 20, seed=1):
    h = hashlib.sha256()
    for p in pattern_blocks(total, block, seed):
        h.update(p)
    return h.hexdigest()

