"""Token ids to text deltas, one token at a time, without broken characters, lost spaces or stop strings.

Each new token is decoded together with the few tokens before it (a short window, never the whole
history), and only the text past the window's previous decode is new. Text that ends in an incomplete
UTF-8 sequence waits for the next token. Text that may be the start of a stop string is held back until
it is decided, so a stop string never leaves the engine, not even in part.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_REPLACEMENT = "\ufffd"
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


@dataclass(frozen=True)
class TokenDecoder:
    """ids -> text (special tokens skipped), plus the byte-fallback token ids.

    A run of byte tokens renders as one string only if the whole run is valid UTF-8 (else each byte becomes
    U+FFFD), so text ending in a byte token may still change: it is held until a non-byte token follows.
    Special tokens count as byte tokens here, since they decode to nothing and do not end a run.
    """

    decode: Callable[[list[int]], str]
    byte_token_ids: frozenset[int] = frozenset()


def make_decoder(tokenizer: Any) -> TokenDecoder:
    """The fastest faithful decoder the tokenizer offers (the Rust backend when nothing else is applied)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", False):

        def decode(ids: list[int]) -> str:
            return backend.decode(ids, skip_special_tokens=True)
    else:

        def decode(ids: list[int]) -> str:
            return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    byte_ids = {i for t, i in tokenizer.get_vocab().items() if _BYTE_TOKEN.fullmatch(t)}
    if byte_ids:  # skipped special tokens vanish before byte runs are joined, so they must not end one
        byte_ids |= set(getattr(tokenizer, "all_special_ids", []))
    return TokenDecoder(decode, frozenset(byte_ids))


class IncrementalDetokenizer:
    """Feed output token ids one by one with `add`; call `flush` when the sequence ends.

    `text` is the concatenation of everything returned so far, and equals decoding all fed ids at once
    (cut before the first stop string, if any).
    """

    def __init__(self, decoder: TokenDecoder, stop: list[str] | None = None) -> None:
        self._decode = decoder.decode
        self._byte_ids = decoder.byte_token_ids
        self._stops = [s for s in (stop or []) if s]
        self._max_hold = max((len(s) for s in self._stops), default=1) - 1
        self._ids: list[int] = []
        self._prefix_offset = 0  # window start: decoding begins here so spaces come out right
        self._read_offset = 0  # ids up to here are already turned into text
        self._pending = ""  # decoded but held back: could be the start of a stop string
        self._pieces: list[str] = []
        self.stopped = False  # a stop string was found; nothing more will be emitted

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def add(self, token_id: int) -> str:
        """Take one new token; return the text that may be shown now (often "", never a partial char)."""
        if self.stopped:
            return ""
        self._ids.append(token_id)
        if token_id in self._byte_ids:
            return ""  # this byte run may still grow, and an invalid run renders differently
        window = self._ids[self._prefix_offset :]
        full = self._decode(window)
        if full.endswith(_REPLACEMENT):
            return ""  # an incomplete UTF-8 sequence: wait for its remaining bytes
        prefix = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new = full[len(prefix) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return self._emit(new, final=False)

    def flush(self) -> str:
        """The sequence ended: release any held-back text (and a trailing incomplete character)."""
        if self.stopped:
            return ""
        new = ""
        if self._read_offset < len(self._ids):
            full = self._decode(self._ids[self._prefix_offset :])
            prefix = self._decode(self._ids[self._prefix_offset : self._read_offset])
            new = full[len(prefix) :]
            self._prefix_offset = self._read_offset = len(self._ids)
        return self._emit(new, final=True)

    def _emit(self, new: str, final: bool) -> str:
        pending = self._pending + new
        if not pending:
            return ""
        if self._stops:
            cut = min((i for i in (pending.find(s) for s in self._stops) if i >= 0), default=-1)
            if cut >= 0:
                self.stopped = True
                return self._release(pending[:cut], "")
            if not final:
                hold = self._held_suffix(pending)
                return self._release(pending[: len(pending) - hold], pending[len(pending) - hold :])
        return self._release(pending, "")

    def _held_suffix(self, text: str) -> int:
        """Length of the longest suffix of `text` that some stop string starts with."""
        for k in range(min(len(text), self._max_hold), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self._stops):
                return k
        return 0

    def _release(self, out: str, keep: str) -> str:
        self._pending = keep
        if out:
            self._pieces.append(out)
        return out
