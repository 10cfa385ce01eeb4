"""The torch implementation of ``KernelOps``: the CPU path of the engine and the reference for the kernels.

Attention gathers each sequence's blocks through its block table into a padded ``[num_seqs, max_seq_len]``
view (``index_select`` of whole blocks) and runs one batched, masked softmax in fp32, with the two products in
the cache's dtype. Padding costs some wasted work on ragged batches, but it
keeps the whole step to a handful of large tensor operations, which is what a CPU needs. Two measures keep the
waste small: a mixed batch attends its decodes and its longer chunks as two groups (padding 31 decodes to a
256-token chunk would do 256 times their work), and the query heads sharing a KV head are folded into the
matrix rows, so gathered keys and values are never copied once per query head. Decodes (one new token per
sequence) take a shorter road: one ``scaled_dot_product_attention`` call over the gathered blocks.

A batch-1 decode step is ~45 small ops per layer, so what is the same for every layer of one forward pass is
worked out once and kept for the next layers, recognised by identity (the model passes the same ``positions``
and ``AttentionMetadata`` objects to all of them): the RoPE rows in the activations' dtype, and a decode batch's
flat block ids and padding mask. Query and key heads that sit side by side in the fused QKV projection's
output (the model's layout) are rotated as one tensor, a single stream's consecutive blocks are handed to SDPA
as one strided view, and casts to the dtype a tensor already has are skipped.
"""

from __future__ import annotations

import torch

from shoal.kernels.lora_metadata import LoRAMetadata
from shoal.kernels.metadata import AttentionMetadata


class TorchOps:
    """Plain PyTorch, runs anywhere."""

    name = "torch"
    masks_sliding_window = True
    caps_attention_logits = True
    lora_by_token = False

    def __init__(self) -> None:
        self._rope: tuple[torch.Tensor, torch.Tensor, torch.dtype, torch.Tensor, torch.Tensor] | None = None
        self._decode: tuple[AttentionMetadata, int, torch.Tensor | slice, torch.Tensor | None] | None = None

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        slots = k_cache.shape[0] * k_cache.shape[1]
        k_cache.view(slots, *k_cache.shape[2:]).index_copy_(0, slot_mapping, _as(key, k_cache.dtype))
        v_cache.view(slots, *v_cache.shape[2:]).index_copy_(0, slot_mapping, _as(value, v_cache.dtype))

    def attention(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        sliding_window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        plain = sliding_window is None and softcap is None  # SDPA's decode shortcut neither masks nor caps
        if meta.max_query_len == 1 and plain:  # decodes only: query row s is sequence s
            blocks, mask = self._decode_inputs(meta, k_cache.shape[1])
            return _attend_decodes(query, k_cache, v_cache, blocks, mask, meta.max_seq_len, scale)
        out = torch.empty_like(query)
        if meta.num_seqs == 0:
            return out
        starts = meta.query_start_loc[:-1].long()
        query_lens = meta.query_start_loc[1:].long() - starts
        decode = query_lens == 1
        if plain and bool(decode.any()):
            # decodes padded to the longest chunk would multiply the work: attend them on their own
            rows = starts[decode]
            lens = meta.seq_lens[decode]
            max_s = int(lens.max())
            blocks, mask = _decode_layout(meta.block_tables[decode], lens, max_s, k_cache.shape[1])
            out[rows] = _attend_decodes(query[rows], k_cache, v_cache, blocks, mask, max_s, scale)
            chunks = ~decode
            rows, values = _padded_attention(
                query,
                k_cache,
                v_cache,
                starts[chunks],
                query_lens[chunks],
                meta.seq_lens[chunks].long(),
                meta.block_tables[chunks],
                meta.max_query_len,
                int(meta.seq_lens[chunks].max()),
                scale,
            )
        else:
            rows, values = _padded_attention(
                query,
                k_cache,
                v_cache,
                starts,
                query_lens,
                meta.seq_lens.long(),
                meta.block_tables,
                meta.max_query_len,
                meta.max_seq_len,
                scale,
                sliding_window,
                softcap,
            )
        out[rows] = values
        return out

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return weight * normed.to(x.dtype)

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        total = x + residual
        return self.rms_norm(total, weight, eps), total

    def rotary(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self._rope_rows(positions, cos_sin_cache, query.dtype)
        both = _side_by_side(query, key)
        if both is None:
            return _rotate(query, cos, sin), _rotate(key, cos, sin)
        rotated_query, rotated_key = _rotate(both, cos, sin).split((query.shape[1], key.shape[1]), dim=1)
        return rotated_query, rotated_key

    def rotary_write_kv(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> torch.Tensor:
        query, key = self.rotary(positions, query, key, cos_sin_cache)
        self.write_kv(key, value, k_cache, v_cache, slot_mapping)
        return query

    def _rope_rows(
        self, positions: torch.Tensor, cos_sin_cache: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and signed ``sin`` rows ``[T, 1, rot]`` in ``dtype``, once per forward pass (HF casts the table
        too): ``cat(cos, cos)`` and ``cat(-sin, sin)``, so that rotate-half is ``x * cos + swap_halves(x) * sin``."""
        kept = self._rope
        if kept is not None and kept[0] is positions and kept[1] is cos_sin_cache and kept[2] == dtype:
            return kept[3], kept[4]
        cos, sin = cos_sin_cache[positions.long()][:, None, :].to(dtype).chunk(2, dim=-1)
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)
        self._rope = (positions, cos_sin_cache, dtype, cos, sin)
        return cos, sin

    def _decode_inputs(
        self, meta: AttentionMetadata, block_size: int
    ) -> tuple[torch.Tensor | slice, torch.Tensor | None]:
        """A decode batch's flat block ids (padded to its longest sequence) and key mask, once per forward pass."""
        kept = self._decode
        if kept is not None and kept[0] is meta and kept[1] == block_size:
            return kept[2], kept[3]
        blocks, mask = _decode_layout(meta.block_tables, meta.seq_lens, meta.max_seq_len, block_size)
        self._decode = (meta, block_size, blocks, mask)
        return blocks, mask

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

    def grouped_matmul(self, rows: torch.Tensor, weight: torch.Tensor, counts: list[int]) -> torch.Tensor:
        out = rows.new_empty((rows.shape[0], weight.shape[1]))
        start = 0
        for expert, count in enumerate(counts):
            if count:  # one matmul per chosen expert; none for an expert nobody chose
                out[start : start + count] = torch.nn.functional.linear(rows[start : start + count], weight[expert])
                start += count
        return out

    def lora_shrink(self, x: torch.Tensor, a: torch.Tensor, meta: LoRAMetadata) -> torch.Tensor:
        t = torch.zeros((x.shape[0], a.shape[2]), dtype=torch.float32, device=x.device)
        for slot, rows in _slot_rows(meta):
            t[rows] = x[rows].float() @ a[:, slot].float()
        return t

    def lora_expand(
        self, y: torch.Tensor, t: torch.Tensor, b: torch.Tensor, meta: LoRAMetadata, part_sizes: tuple[int, ...]
    ) -> None:
        rank = b.shape[1] // len(part_sizes)
        for slot, rows in _slot_rows(meta):
            delta = torch.zeros((rows.numel(), y.shape[1]), dtype=torch.float32, device=y.device)
            start = 0
            for part, size in enumerate(part_sizes):  # each part's section of t into its slice of the output
                section = slice(part * rank, (part + 1) * rank)
                delta[:, start : start + size] = t[rows, section] @ b[slot, section, start : start + size].float()
                start += size
            y[rows] = (y[rows].float() + delta).to(y.dtype)


def _padded_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    starts: torch.Tensor,
    query_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_q: int,
    max_s: int,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of some sequences, padded to ``[num_seqs, max_q]`` queries and ``max_s`` keys (each query
    seeing only its last ``sliding_window`` positions when one is given; scores soft-capped to
    ``tanh(s / softcap) * softcap`` when ``softcap`` is).

    Returns the query rows it computed and their outputs. The group's query heads fold into the matrix rows
    (``[S, KVH, G * max_q, D]``), so keys and values are used as gathered, never copied once per query head.
    """
    num_heads, head_dim = query.shape[1:]
    num_kv_heads = k_cache.shape[2]
    num_seqs, group = seq_lens.shape[0], num_heads // num_kv_heads
    keys = _gather(k_cache, block_tables, max_s)  # [S, KVH, max_s, D]
    values = _gather(v_cache, block_tables, max_s)

    row = torch.arange(max_q, device=query.device)
    valid_q = row[None, :] < query_lens[:, None]  # [S, max_q]
    index = torch.where(valid_q, starts[:, None] + row[None, :], starts[:, None])
    q = query[index]  # [S, max_q, H, D]
    q = q.view(num_seqs, max_q, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(num_seqs, num_kv_heads, group * max_q, head_dim).to(keys.dtype)

    q_pos = seq_lens[:, None] - query_lens[:, None] + row[None, :]  # [S, max_q]
    k_pos = torch.arange(max_s, device=query.device)
    visible = (k_pos[None, None, :] <= q_pos[:, :, None]) & (k_pos[None, None, :] < seq_lens[:, None, None])
    if sliding_window is not None:
        visible &= k_pos[None, None, :] > q_pos[:, :, None] - sliding_window

    # Products in the cache's dtype (BLAS accumulates in fp32), softmax in fp32: what Hugging Face's eager
    # attention does, and several times faster on a CPU than upcasting the gathered cache.
    scores = torch.matmul(q, keys.transpose(-1, -2)).view(num_seqs, num_kv_heads, group, max_q, max_s)
    scores = scores.float().mul_(scale)
    if softcap is not None:
        scores = scores.div_(softcap).tanh_().mul_(softcap)
    scores = scores.masked_fill_(~visible[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(values.dtype).view(num_seqs, num_kv_heads, group * max_q, max_s)
    out = torch.matmul(probs, values).view(num_seqs, num_kv_heads, group, max_q, head_dim)
    out = out.permute(0, 3, 1, 2, 4).reshape(num_seqs, max_q, num_heads, head_dim)
    return index[valid_q], out[valid_q].to(query.dtype)


def _decode_layout(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, max_s: int, block_size: int
) -> tuple[torch.Tensor | slice, torch.Tensor | None]:
    """Decoding sequences' block ids, each padded to ``max_s`` tokens' worth, flat; and the mask hiding the
    padding, ``[S, 1, 1, max_s]`` (None for one sequence, which has none).

    One sequence whose blocks are consecutive (a single stream on a fresh cache) gets a ``slice`` instead of
    ids: its keys and values are then read where they lie, with no copy per layer."""
    blocks = block_tables[:, : (max_s + block_size - 1) // block_size].reshape(-1).long()
    if seq_lens.shape[0] == 1:
        first, last = int(blocks[0]), int(blocks[-1])
        if last - first + 1 == blocks.shape[0] and bool((blocks.diff() == 1).all()):
            return slice(first, last + 1), None
        return blocks, None
    keys = torch.arange(max_s, device=blocks.device)
    return blocks, (keys[None, :] < seq_lens[:, None])[:, None, None, :]


def _attend_decodes(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    blocks: torch.Tensor | slice,
    mask: torch.Tensor | None,
    max_s: int,
    scale: float,
) -> torch.Tensor:
    """One new token per sequence (``query`` ``[S, H, D]``): one SDPA call over each sequence's gathered blocks.

    ``blocks`` and ``mask`` come from ``_decode_layout``. torch's fused CPU attention reads the gathered cache in
    place (query heads grouped over KV heads, fp32 accumulation), where two bf16 matmuls would cost oneDNN a new
    primitive for every new context length: at batch 1 that was most of a decode step's attention.
    """
    num_seqs = query.shape[0]
    keys = _decode_keys(k_cache, blocks, num_seqs, max_s)  # [S, KVH, max_s, D]
    values = _decode_keys(v_cache, blocks, num_seqs, max_s)
    out = torch.nn.functional.scaled_dot_product_attention(
        _as(query, keys.dtype).unsqueeze(2), keys, values, attn_mask=mask, scale=scale, enable_gqa=True
    )
    return _as(out.squeeze(2), query.dtype)


def _decode_keys(cache: torch.Tensor, blocks: torch.Tensor | slice, num_seqs: int, max_s: int) -> torch.Tensor:
    """``[num_seqs, KV heads, max_s, D]`` for SDPA: one ``as_strided`` view of a contiguous cache's consecutive
    blocks (their tokens lie back to back), else the gathered blocks transposed."""
    if isinstance(blocks, slice) and cache.is_contiguous():
        _, token_stride, head_stride, _ = cache.stride()
        return cache.as_strided(
            (num_seqs, cache.shape[2], max_s, cache.shape[3]),
            (max_s * token_stride, head_stride, token_stride, 1),
            cache.storage_offset() + blocks.start * cache.stride(0),
        )
    return _gather_blocks(cache, blocks, num_seqs, max_s).transpose(1, 2)


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype``, without dispatching a no-op ``to`` when it already is (a few us per layer)."""
    return x if x.dtype == dtype else x.to(dtype)


def _gather(cache: torch.Tensor, block_tables: torch.Tensor, max_s: int) -> torch.Tensor:
    """The first ``max_s`` cached tokens of each sequence as ``[S, KV heads, max_s, D]``, contiguous."""
    return _gather_tokens(cache, block_tables, max_s).transpose(1, 2).contiguous()


def _gather_tokens(cache: torch.Tensor, block_tables: torch.Tensor, max_s: int) -> torch.Tensor:
    """The first ``max_s`` cached tokens of each sequence as ``[S, max_s, KV heads, D]`` (a fresh tensor's view)."""
    block_size = cache.shape[1]
    blocks = block_tables[:, : (max_s + block_size - 1) // block_size].reshape(-1).long()
    return _gather_blocks(cache, blocks, block_tables.shape[0], max_s)


def _gather_blocks(cache: torch.Tensor, blocks: torch.Tensor | slice, num_seqs: int, max_s: int) -> torch.Tensor:
    """``[num_seqs, max_s, KV heads, D]`` from flat block ids (``index_select`` of whole blocks: a memcpy each),
    or a view of the cache for a ``slice`` of consecutive blocks."""
    num_blocks, _, num_kv_heads, head_dim = cache.shape
    if isinstance(blocks, slice):
        return cache[blocks].view(num_seqs, -1, num_kv_heads, head_dim)[:, :max_s]
    gathered = torch.index_select(cache.view(num_blocks, -1), 0, blocks)
    return gathered.view(num_seqs, -1, num_kv_heads, head_dim)[:, :max_s]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first ``rotary_dim`` features (``cos``/``sin``: ``_rope_rows``' ``[T, 1, rot]``).

    ``x * cos + cat(x2, x1) * cat(-sin, sin)`` rounds each product and the sum as Hugging Face's
    ``x * cos + rotate_half(x) * sin`` does (``a + b * -s`` is ``a - b * s`` exactly), in four ops, not ten."""
    rot = cos.shape[-1]
    if rot != x.shape[-1]:
        return torch.cat((_rotate(x[..., :rot], cos, sin), x[..., rot:]), dim=-1)
    swapped = x.unflatten(-1, (2, rot // 2)).flip(-2).flatten(-2)  # a fresh tensor: cat(x2, x1)
    return (x * cos).add_(swapped.mul_(sin))


def _side_by_side(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
    """``[T, H + KVH, D]`` over both when the key's heads directly follow the query's in one buffer, else None."""
    tokens, heads, head_dim = query.shape
    if query.stride()[1:] != (head_dim, 1) or key.stride()[1:] != (head_dim, 1) or key.shape[2] != head_dim:
        return None
    if tokens > 1 and key.stride(0) != query.stride(0):
        return None
    if key.data_ptr() != query.data_ptr() + heads * head_dim * query.element_size():
        return None
    return query.as_strided((tokens, heads + key.shape[1], head_dim), query.stride())


def _slot_rows(meta: LoRAMetadata) -> list[tuple[int, torch.Tensor]]:
    """Each used slot with the indices of its tokens."""
    slots = meta.token_slots.long()
    found = [(slot, (slots == slot).nonzero().squeeze(1)) for slot in range(meta.num_slots)]
    return [(slot, rows) for slot, rows in found if rows.numel()]
