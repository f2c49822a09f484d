"""The KV block pool: who holds which block, and which freed blocks still hold a reusable prefix.

Full blocks are keyed by a chained hash (parent hash, block tokens), so equal prefixes share blocks by
reference count. A freed block that holds a hashed prefix stays findable (LRU order) until its slot is
needed, which is what lets a conversation's next turn skip recomputing its history.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from .sequence import Sequence

_ROOT_HASH = 0x5EED_B10C


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need at least one block of at least one token, got {num_blocks} x {block_size}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self._block_key: list[tuple[int, tuple[int, ...]] | None] = [None] * num_blocks
        self._block_hash: list[int | None] = [None] * num_blocks
        self._hash_to_block: dict[int, int] = {}
        self._free_plain: deque[int] = deque(range(num_blocks))
        self._free_cached: OrderedDict[int, None] = OrderedDict()  # oldest first: evicted first

    # --- queries -------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation may take: never used, or cached but held by nobody."""
        return len(self._free_plain) + len(self._free_cached)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._hash_to_block)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def max_new_tokens(self, seq: Sequence) -> int:
        """How many more tokens `seq` could compute with its own blocks plus every free one."""
        capacity = (len(seq.block_table) + self.num_free_blocks) * self.block_size
        return capacity - seq.num_computed_tokens

    # --- prefix cache --------------------------------------------------------------------------
    def _ensure_hashes(self, seq: Sequence, num_blocks: int) -> None:
        hashes = seq.block_hashes
        bs = self.block_size
        while len(hashes) < num_blocks:
            i = len(hashes)
            parent = hashes[-1] if hashes else _ROOT_HASH
            hashes.append(hash((parent, tuple(seq.token_slice(i * bs, (i + 1) * bs)))))

    def _key(self, seq: Sequence, i: int) -> tuple[int, tuple[int, ...]]:
        parent = seq.block_hashes[i - 1] if i else _ROOT_HASH
        return parent, tuple(seq.token_slice(i * self.block_size, (i + 1) * self.block_size))

    def match_prefix(self, seq: Sequence) -> int:
        """Claim cached blocks for the longest cached prefix of a block-less `seq`; return tokens covered.

        At least one token is always left to compute, since sampling needs its logits.
        """
        if seq.block_table:
            raise RuntimeError(f"{seq.request_id}: prefix match on a sequence that already holds blocks")
        if not self.enable_prefix_caching:
            return 0
        eligible = (seq.num_tokens - 1) // self.block_size
        self._ensure_hashes(seq, eligible)
        for i in range(eligible):
            block = self._hash_to_block.get(seq.block_hashes[i])
            if block is None or self._block_key[block] != self._key(seq, i):
                break
            if self.ref_counts[block] == 0:
                del self._free_cached[block]
            self.ref_counts[block] += 1
            seq.block_table.append(block)
        hit = len(seq.block_table)
        seq.num_committed_blocks = hit
        seq.num_computed_tokens = hit * self.block_size
        return seq.num_computed_tokens

    def commit(self, seq: Sequence) -> None:
        """Publish the blocks `seq` has just filled, once their KV is really written."""
        if not self.enable_prefix_caching:
            return
        full = seq.num_computed_tokens // self.block_size
        if full <= seq.num_committed_blocks:
            return
        self._ensure_hashes(seq, full)
        for i in range(seq.num_committed_blocks, full):
            h = seq.block_hashes[i]
            block = seq.block_table[i]
            if h not in self._hash_to_block and self._block_hash[block] is None:
                self._hash_to_block[h] = block
                self._block_hash[block] = h
                self._block_key[block] = self._key(seq, i)
        seq.num_committed_blocks = full

    # --- allocation ------------------------------------------------------------------------------
    def _take_free_block(self) -> int:
        if self._free_plain:
            block = self._free_plain.popleft()
        else:
            block, _ = self._free_cached.popitem(last=False)
            h = self._block_hash[block]
            if h is not None and self._hash_to_block.get(h) == block:
                del self._hash_to_block[h]
            self._block_hash[block] = None
            self._block_key[block] = None
        self.ref_counts[block] = 1
        return block

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow `seq`'s block table to hold `num_new_tokens` more tokens; False (and no change) if full."""
        needed = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if needed <= 0:
            return True
        if needed > self.num_free_blocks:
            return False
        seq.block_table.extend(self._take_free_block() for _ in range(needed))
        return True

    def free(self, seq: Sequence) -> None:
        """Drop `seq`'s hold on its blocks; hashed ones stay reusable, tail blocks are evicted first."""
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] < 0:
                raise RuntimeError(f"block {block} freed more often than it was taken")
            if self.ref_counts[block] == 0:
                if self._block_hash[block] is not None:
                    self._free_cached[block] = None
                else:
                    self._free_plain.append(block)
        seq.block_table = []
        seq.num_committed_blocks = 0
        seq.num_computed_tokens = 0
