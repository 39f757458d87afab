"""Batches (elasticctr.data.parser.SlotBatch) as the training program's feed.

The Python reader's path: the native pipeline (elasticctr.train.native) writes the same
inputs as Paddle MultiSlot text instead. Both give the one sparse table raw uint64
feasigns (as int64 bits), PAD_FEASIGN for an empty slot, and the data's show/click.
"""

from __future__ import annotations

import numpy as np

PAD_FEASIGN = 0
"""Reserved feasign: fills empty slots (sequence_pool needs >= 1 id per sequence); its
embedding is fixed at zero (padding_idx), so an empty slot still pools to zero."""
SHOW_VAR, CLICK_VAR = "ectl_show", "ectl_click"
"""The program's inputs of the data's show/click (the sparse table's statistics)."""


def pad_empty(ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Give every empty sequence one PAD_FEASIGN id; vectorised, order kept."""
    empty = lengths == 0
    if not empty.any():
        return ids, lengths
    new_lengths = np.where(empty, 1, lengths)
    old_off = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=old_off[1:])
    new_off = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=new_off[1:])
    out = np.full(int(new_off[-1]), PAD_FEASIGN, dtype=np.uint64)
    owner_start_new = np.repeat(new_off[:-1], lengths)
    owner_start_old = np.repeat(old_off[:-1], lengths)
    out[owner_start_new + (np.arange(ids.size) - owner_start_old)] = ids
    return out, new_lengths


def to_feed(batch, place) -> dict:
    """Slot-major batch → {'feasigns': LoDTensor, 'label': [n, 1]} without per-sample Python."""
    from paddle.base import core

    ids = np.concatenate(batch.ids) if len(batch.ids) > 1 else batch.ids[0]
    lengths = np.concatenate(batch.lengths).astype(np.int64)
    ids, lengths = pad_empty(np.asarray(ids, dtype=np.uint64), lengths)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tensor = core.LoDTensor()
    tensor.set(np.ascontiguousarray(ids, dtype=np.uint64).view(np.int64).reshape(-1, 1), place)
    tensor.set_lod([offsets.tolist()])
    # Sequences are slot-major: every slot repeats the samples' show/click in order.
    slots = len(batch.lengths)
    show = np.tile(np.asarray(batch.show, dtype=np.float32), slots).reshape(-1, 1)
    click = np.asarray(batch.click, dtype=np.float32)
    return {
        "feasigns": tensor,
        "label": click.reshape(-1, 1),
        SHOW_VAR: show,
        CLICK_VAR: np.tile(click, slots).reshape(-1, 1),
    }


def to_feed_slots(batch, place) -> dict:
    """Slot-wise batch → the per-slot graph's feed (one LoD tensor per slot)."""
    from paddle.base import core

    feed = {}
    for j, (ids, lengths) in enumerate(zip(batch.ids, batch.lengths, strict=True)):
        ids, lengths = pad_empty(np.asarray(ids, dtype=np.uint64), np.asarray(lengths, np.int64))
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tensor = core.LoDTensor()
        tensor.set(np.ascontiguousarray(ids).view(np.int64).reshape(-1, 1), place)
        tensor.set_lod([offsets.tolist()])
        feed[f"slot_{j}"] = tensor
    click = np.asarray(batch.click, dtype=np.float32).reshape(-1, 1)
    feed.update(
        {
            "label": click,
            SHOW_VAR: np.asarray(batch.show, np.float32).reshape(-1, 1),
            CLICK_VAR: click,
        }
    )
    return feed


def feed_of(net, batch, place) -> dict:
    """The feed of `batch` for `net` (an elasticctr.train.program.Net): per-slot or
    slot-major, as the net was built."""
    return to_feed_slots(batch, place) if net.per_slot else to_feed(batch, place)
