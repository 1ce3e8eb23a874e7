"""Chapters 12 and 16: the KV cache, growing, allocated ahead, or rolling over a window.

A layer's cache holds the keys and values of the tokens it has seen, so that each new token
projects only its own key and value (chapter 12). A model that attends within a sliding window
(chapter 16: Mistral, Gemma) never looks further back than ``window`` tokens, so its cache needs
no more: ``KVCache(window=w)`` holds the last ``w - 1`` tokens between two steps (``w`` with the
new token, during a step) and evicts the older ones, and its memory stays constant however long
the generation. StreamingLLM (Xiao et al. 2023) keeps the first ``sinks`` tokens too:
``KVCache(window=w, sinks=s)``, ``s + w - 1`` tokens between two steps.
"""

from __future__ import annotations

import torch

from ._checks import check_kv_append, check_kv_new, check_kv_options, check_kv_room

__all__ = ["KVCache", "StateCache"]


class KVCache:
    """The keys and values one attention layer has computed so far, for a batch of sequences.

    ``k`` and ``v`` have shape ``(B, n_kv_heads, T_cached, d_head)`` (None while empty);
    :meth:`update` appends the new tokens' keys and values along the token axis and
    returns everything the new tokens attend to. A GPT keeps one ``KVCache`` per layer:
    ``[KVCache() for _ in model.blocks]``. Causal attention makes this exact: a token's
    key and value depend only on the tokens up to it, so they never change once computed.

    Memory: ``2 B n_kv_heads T_cached d_head`` numbers per layer (:attr:`nbytes`).
    ``KVCache()`` grows with ``torch.cat``, which copies the whole cache at every step: the
    shortest code. ``KVCache(max_tokens=T_max)`` allocates the memory for ``T_max`` tokens
    at the first update, as serving systems do, and writes each step's keys and values into
    it in place: no copy, and ``k``, ``v`` are views of its first ``T_cached`` rows.
    ``GPT.generate`` uses that form.

    Chapter 16: ``KVCache(window=w)`` is a rolling cache. After each update it keeps what the next
    token needs, the last ``w - 1`` tokens (with the next token itself, a window of ``w``), and
    evicts the older ones, as ``transformers``' sliding-window cache does
    (``DynamicSlidingWindowLayer`` keeps ``sliding_window - 1``); :attr:`nbytes` between two steps
    is then :func:`attnlib.kv_cache_bytes`'s count for a sliding layer. Mistral's paper writes the
    same window into a ring of ``w`` slots, in place, at position ``i mod w``; this cache copies the
    kept rows at each step instead (shorter code, the same keys). The tokens
    of one update are returned whole, however many: a prompt or a chunk longer than ``w`` attends
    to what it needs before the eviction. ``KVCache(window=w, sinks=s)`` keeps the first ``s``
    tokens as well (StreamingLLM, Xiao et al. 2023): a new token attends to at most ``s + w``.
    :attr:`positions` are the held tokens' positions in the sequence, :attr:`seen` how many
    tokens have passed through.

    A layer with a ``sliding_window`` never attends further back than its window, so a rolling
    cache of at least that window is exact: every token keeps its own position. On a
    full-attention layer a rolling cache is StreamingLLM's approximation. Where its RoPE positions
    come from is the caller's choice, not the cache's: by default every key is rotated at its own
    position before it is cached; ``MultiHeadAttention.forward(..., positions="in_cache")`` counts
    them **within the cache**, as the paper does (section 3.2): keys are cached before the rotation
    and rotated by their index in the cache at every step, so positions stay below ``s + w``
    however long the generation (``GPT.generate(..., cache_window=w)`` asks for it).

    Args:
        max_tokens: room to allocate ahead (chapter 12); ``None`` (default): grow.
        window: a new token attends to the last ``window`` tokens only (the cache keeps
            ``window - 1``); ``None`` (default): keep every token.
        sinks: with a ``window``, also keep the first ``sinks`` tokens (default 0).

    Example:
        >>> cache = KVCache()
        >>> k, v = cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # 3 tokens
        >>> k, v = cache.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))    # 1 more
        >>> len(cache), tuple(k.shape), cache.nbytes                  # 2 * 1*2*4*4 floats of 4 bytes
        (4, (1, 2, 4, 4), 256)
        >>> ahead = KVCache(max_tokens=8)                             # room for 8 tokens, allocated once
        >>> k, v = ahead.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
        >>> k, v = ahead.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
        >>> len(ahead), tuple(k.shape), torch.equal(k, cache.k)
        (4, (1, 2, 4, 4), True)
        >>> rolling = KVCache(window=3, sinks=1)                      # token 0, then windows of 3
        >>> k, v = rolling.update(torch.zeros(1, 2, 6, 4), torch.zeros(1, 2, 6, 4))   # 6 tokens at once
        >>> tuple(k.shape), len(rolling), rolling.positions.tolist(), rolling.seen   # all 6 returned
        ((1, 2, 6, 4), 3, [0, 4, 5], 6)
        >>> k, v = rolling.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))  # token 6 sees 0, 4, 5, 6
        >>> tuple(k.shape), rolling.positions.tolist()
        ((1, 2, 4, 4), [0, 5, 6])
    """

    def __init__(self, max_tokens: int | None = None, *, window: int | None = None, sinks: int = 0):
        self.max_tokens, self.window, self.sinks = check_kv_options(max_tokens, window, sinks)
        self.k: torch.Tensor | None = None  # (B, n_kv_heads, T_cached, d_head)
        self.v: torch.Tensor | None = None  # (B, n_kv_heads, T_cached, d_head)
        self.seen = 0  # tokens appended so far: the position of the next one
        self._positions: torch.Tensor | None = None  # (T_cached,) with a window: each held token's position
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, n_kv_heads, max_tokens, d_head) each

    def __len__(self) -> int:
        """The number of cached tokens, ``T_cached``."""
        return 0 if self.k is None else self.k.shape[2]

    @property
    def positions(self) -> torch.Tensor:
        """The positions in the sequence of the held tokens, ``(T_cached,)``: ``0 .. T_cached - 1``
        without a window; the first ``sinks`` and the last ``window - 1`` positions with one."""
        if self._positions is not None:
            return self._positions
        return torch.arange(len(self), device=None if self.k is None else self.k.device)

    @property
    def nbytes(self) -> int:
        """Bytes of the cached keys and values (``T_cached`` tokens; a ``max_tokens`` cache
        has allocated room for ``max_tokens``)."""
        return 0 if self.k is None else self.k.nbytes + self.v.nbytes

    def __repr__(self) -> str:
        rolling = "" if self.window is None else f", window={self.window}, sinks={self.sinks}, seen={self.seen}"
        shapes = f"k and v of shape {None if self.k is None else tuple(self.k.shape)}"
        return f"KVCache(T_cached={len(self)}, {shapes}{rolling})"

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new tokens' keys and values; return all of them, then evict (with a window).

        Args:
            k_new, v_new: shape ``(B, n_kv_heads, T_new, d_head)``, the same ``B``,
                ``n_kv_heads``, ``d_head``, dtype and device as what is cached. (``v_new`` may
                have another last width, ``d_v``: values need not be as wide as keys.)

        Returns:
            ``(k, v)``, each ``(B, n_kv_heads, T_cached + T_new, d_head)``: the cached tokens first,
            what the new tokens attend to. A rolling cache then keeps only its sinks and its window.
        """
        check_kv_new(k_new, v_new)
        if self.k is not None:
            check_kv_append(self, k_new, v_new)  # the same B, n_kv_heads, widths, dtype and device as cached
        T, T_new = len(self), k_new.shape[2]
        if self.window is not None:
            return self._roll(k_new, v_new)
        self.seen += T_new
        if self.max_tokens is None:  # grow: copy what is cached and the new rows into new tensors
            self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=2)  # (B, H, T + T_new, D)
            self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=2)
            return self.k, self.v
        check_kv_room(self, T_new)  # T + T_new <= max_tokens
        if self._buffers is None:  # the first update allocates room for max_tokens tokens
            B, H = k_new.shape[:2]
            self._buffers = tuple(t.new_empty(B, H, self.max_tokens, t.shape[3]) for t in (k_new, v_new))
        k_buf, v_buf = self._buffers
        k_buf[:, :, T : T + T_new] = k_new  # write the new rows in place: (B, H, T_new, D)
        v_buf[:, :, T : T + T_new] = v_new
        self.k, self.v = k_buf[:, :, : T + T_new], v_buf[:, :, : T + T_new]  # views: (B, H, T + T_new, D)
        return self.k, self.v

    def _roll(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rolling update: return the held tokens and the new ones, keep the sinks and the window."""
        T_new = k_new.shape[2]
        new_positions = torch.arange(self.seen, self.seen + T_new, device=k_new.device)  # (T_new,)
        k = k_new if self.k is None else torch.cat([self.k, k_new], dim=2)  # (B, H, T + T_new, D)
        v = v_new if self.v is None else torch.cat([self.v, v_new], dim=2)
        positions = new_positions if self._positions is None else torch.cat([self._positions, new_positions])
        self.seen += T_new
        # what the next token needs: the sinks, and the last window - 1 tokens (with itself, window)
        keep = (positions < self.sinks) | (positions > self.seen - self.window)  # (T + T_new,)
        # indexing copies the kept rows: the evicted ones' memory is freed, nbytes counts what is held
        self.k, self.v, self._positions = k[:, :, keep], v[:, :, keep], positions[keep]
        return k, v


class StateCache:
    """Chapter 20: what a recurrent layer (:class:`~attnlib.recurrent.GatedDeltaNet`) keeps between steps: its
    state, of one size however many tokens it has read, where a :class:`KVCache` grows by a key and a value
    per token. ``update(state, T_new)`` stores the layer's new state after ``T_new`` more tokens.

    Example:
        >>> cache = StateCache()
        >>> _ = cache.update((torch.zeros(2, 3), torch.zeros(2, 4, 4)), T_new=5)
        >>> cache.seen, cache.nbytes                     # (6 + 32) float32 numbers, after 5 tokens or 5,000
        (5, 152)
    """

    window, sinks = None, 0  # never rolling: the state already summarises every token

    def __init__(self):
        self.state = None  # the layer's state (a tuple of tensors), None before the first token
        self.seen = 0  # tokens read so far

    def __len__(self) -> int:
        return self.seen

    def __repr__(self) -> str:
        return f"StateCache(seen={self.seen}, nbytes={self.nbytes})"

    @property
    def nbytes(self) -> int:
        """Bytes of the state: the same after any number of tokens."""
        return 0 if self.state is None else sum(t.nbytes for t in self.state)

    def update(self, state, T_new: int):
        """Keep the layer's ``state`` after ``T_new`` more tokens; return it."""
        self.state, self.seen = state, self.seen + T_new
        return state
