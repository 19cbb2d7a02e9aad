"""A pool of fixed-size KV blocks of one tier, with ref counts and a prefix cache.

Free blocks wait in LRU order (least recently freed first). A block freed while it holds a
full, hashed block of tokens stays findable through the prefix cache until it is reused:
`allocate` evicts from the LRU end, `acquire` takes a cached block back off the free list.

    free queue (LRU -> MRU):  [7] [2*] [9*] [4]      * = still cached (hash -> block)
    allocate()  -> 7          (plain free block)
    allocate()  -> 2          (evicts hash of 2 from the cache)
    find_cached(h9, toks)     -> 9, then acquire(9) takes it off the queue with ref 1
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from runtime.identity_cache import IdentityCache


def chain_hash(parent: int | None, tokens: tuple[int, ...]) -> int:
    """Hash of a full block given its parent's hash (None: the first block), the same in every process.

    Python's hash of ints and tuples of ints takes no salt (PYTHONHASHSEED salts str and bytes only), but
    `hash(None)` is its address before Python 3.12: the first block hashes its tokens alone."""
    return hash(tokens if parent is None else (parent, tokens))


def prompt_blocks(prompt: tuple[int, ...], block_size: int) -> tuple[list[int], list[tuple[int, ...]]]:
    """The chained hashes and the tokens of a prompt's full blocks, as `chain_hash` gives them from the first
    block; computed once per prompt tuple (`IdentityCache`): hashing them again was a tenth of a simulated replay."""
    def compute() -> tuple[list[int], list[tuple[int, ...]]]:
        hashes: list[int] = []
        tokens: list[tuple[int, ...]] = []
        parent: int | None = None
        for i in range(len(prompt) // block_size):
            block = prompt[i * block_size : (i + 1) * block_size]
            parent = chain_hash(parent, block)
            hashes.append(parent)
            tokens.append(block)
        return hashes, tokens

    return _PROMPT_BLOCKS.get(prompt, block_size, compute)


_PROMPT_BLOCKS: IdentityCache[tuple[list[int], list[tuple[int, ...]]]] = IdentityCache(1 << 14)  # a window's prompts


@dataclass(frozen=True, slots=True)
class BlockMeta:
    """One block's state, as read by checks and tests (`BlockPool.meta`); the pool keeps it in three lists."""

    ref_count: int = 0
    hash: int | None = None  # set once the block is full and registered in the prefix cache
    tokens: tuple[int, ...] | None = None  # re-checked on a cache hit (hash collisions)


class BlockPool:
    """Blocks `0..num_blocks-1` of one tier; this class only counts, the tensors live in the executor.

    A block's state is three parallel lists (ref count, hash, tokens), not an object a block: a pool is
    built again at every engine reset (every replay of a simulated trial), and [0] * n costs microseconds
    where n objects cost tens of milliseconds."""

    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.refs: list[int] = [0] * num_blocks
        self.hashes: list[int | None] = [None] * num_blocks
        self.tokens: list[tuple[int, ...] | None] = [None] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}  # hash -> block id

    @property
    def meta(self) -> list[BlockMeta]:
        """Every block's state, a copy (for checks and tests: the hot paths read the lists)."""
        return [BlockMeta(*m) for m in zip(self.refs, self.hashes, self.tokens)]

    @property
    def num_free(self) -> int:
        """Blocks allocatable now (plain free plus evictable cached ones)."""
        return len(self.free_queue)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free_queue)

    @property
    def num_cached(self) -> int:
        return len(self.cached)

    def allocate(self) -> int:
        """Take the least recently freed block (evicting its cache entry); ref count becomes 1."""
        return self.allocate_many(1)[0]

    def allocate_many(self, n: int) -> list[int]:
        """`n` blocks, as `n` calls of `allocate` take them (one loop: a prompt takes hundreds at once).
        Precondition: `n <= num_free`."""
        pop, refs, hashes, cached = self.free_queue.popitem, self.refs, self.hashes, self.cached
        block_ids = []
        for _ in range(n):
            block_id = pop(False)[0]  # the LRU end (last=False, passed by position: cheaper)
            block_hash = hashes[block_id]
            if block_hash is not None:
                del cached[block_hash]
                hashes[block_id] = self.tokens[block_id] = None
            refs[block_id] = 1
            block_ids.append(block_id)
        return block_ids

    def find_cached(self, block_hash: int, tokens: tuple[int, ...]) -> int | None:
        """The cached block holding exactly `tokens` under `block_hash`, if any (no side effects)."""
        block_id = self.cached.get(block_hash)
        if block_id is None or self.tokens[block_id] != tokens:
            return None
        return block_id

    def acquire(self, block_id: int) -> None:
        """Add a reference (a cache hit or a fork); a free cached block leaves the free queue."""
        if self.refs[block_id] == 0:
            del self.free_queue[block_id]
        self.refs[block_id] += 1

    def release(self, block_id: int) -> None:
        """Drop a reference; at zero the block joins the MRU end of the free queue, still cached."""
        self.release_many((block_id,))

    def release_many(self, block_ids: Iterable[int]) -> None:
        """`release` each block, in order (one loop: a finished request frees hundreds at once)."""
        refs, free_queue = self.refs, self.free_queue
        for block_id in block_ids:
            count = refs[block_id]
            assert count > 0, f"block {block_id} released with ref count 0"
            refs[block_id] = count - 1
            if count == 1:
                free_queue[block_id] = None

    def register_many(self, blocks: Iterable[tuple[int, int, tuple[int, ...]]]) -> None:
        """Make each full block (block id, hash, tokens) findable by hash, in order (one loop: a prompt fills
        hundreds at once); a hash already cached keeps its first block, a block its first hash."""
        if not self.enable_caching:
            return
        hashes, tokens_of, cached = self.hashes, self.tokens, self.cached
        for block_id, block_hash, tokens in blocks:
            if hashes[block_id] is None and block_hash not in cached:
                hashes[block_id], tokens_of[block_id] = block_hash, tokens
                cached[block_hash] = block_id

    def ref_count(self, block_id: int) -> int:
        return self.refs[block_id]
