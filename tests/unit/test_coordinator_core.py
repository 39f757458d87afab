"""Coordinator state machine: leases, expiry, exactly-once completion, exports, restart."""

from __future__ import annotations

import json

import pytest

from elasticctr.coordinator import Coordinator, PartitionSpec
from elasticctr.coordinator.core import split_tasks, state_for_restart
from elasticctr.errors import EctlError

pytestmark = pytest.mark.fast


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def spec(pid: str, *sizes: int) -> PartitionSpec:
    return PartitionSpec(pid, tuple((f"file:///d/{pid}/part-{i}", s) for i, s in enumerate(sizes)))


def drain(coord: Coordinator, trainer: str, samples: int = 10) -> list[str]:
    """Lease and complete tasks until the trainer gets something else; return task ids."""
    ids = []
    while True:
        got = coord.lease(trainer)
        if got["kind"] != "task":
            return ids
        ids.append(got["task"]["id"])
        assert coord.complete(got["lease"], trainer, samples)["accepted"]


def test_split_by_file_and_byte_range():
    tasks = split_tasks(spec("20200401/00", 250, 0, 100), task_bytes=100)
    assert [(t.url.rsplit("/", 1)[1], t.start, t.end) for t in tasks] == [
        ("part-0", 0, 100),
        ("part-0", 100, 200),
        ("part-0", 200, 250),
        ("part-2", 0, 100),
    ]


def test_every_task_done_once_then_export_then_finished():
    coord = Coordinator(task_bytes=100)
    coord.add_partition(spec("20200401/00", 100, 100))
    coord.close_input()
    assert len(drain(coord, "0")) == 2
    export = coord.lease("0")
    assert export.pop("state")  # a checkpoint export carries the coordinator's state
    timeline = export.pop("timeline")
    assert set(timeline) == {"data_found_at", "trained_at"}
    assert export == {"kind": "export", "partition": "20200401/00", "checkpoint": True}
    assert coord.lease("0") == {
        **export,
        "state": coord.lease("0")["state"],
        "timeline": timeline,
    }  # asked again before confirming: the same export
    assert coord.lease("1")["kind"] == "wait"  # nobody else gets it
    coord.exported("20200401/00", "0", "20200401/00", checkpoint=True)
    assert coord.lease("0") == {"kind": "finished"}
    progress = coord.progress()
    assert progress["tasks_done"] == 2 and progress["samples"] == 20
    assert progress["finished"]


def test_expired_lease_is_requeued_and_trained_once_more():
    clock = Clock()
    coord = Coordinator(lease_seconds=10, task_bytes=100, clock=clock)
    coord.add_partition(spec("20200401/00", 100))
    first = coord.lease("1")
    assert first["kind"] == "task"
    clock.now = 11  # trainer 1 died silently
    second = coord.lease("2")
    assert second["task"]["id"] == first["task"]["id"]
    assert second["task"]["attempts"] == 2
    # The dead trainer's late completion is rejected; the live one counts.
    assert not coord.complete(first["lease"], "1", 99)["accepted"]
    assert coord.complete(second["lease"], "2", 10)["accepted"]
    assert coord.progress()["samples"] == 10
    assert coord.progress()["tasks_retried"] == 1


def test_heartbeat_keeps_lease_and_stale_heartbeat_is_refused():
    clock = Clock()
    coord = Coordinator(lease_seconds=10, task_bytes=100, clock=clock)
    coord.add_partition(spec("20200401/00", 100))
    got = coord.lease("1")
    for t in (8, 16, 24):
        clock.now = t
        assert coord.heartbeat(got["lease"], "1")
    clock.now = 40
    coord.lease("2")  # expiry runs on any call
    assert not coord.heartbeat(got["lease"], "1")


def test_leave_requeues_immediately():
    coord = Coordinator(task_bytes=100)
    coord.add_partition(spec("20200401/00", 100))
    got = coord.lease("1")
    assert coord.leave("1") == 1
    again = coord.lease("2")
    assert again["task"]["id"] == got["task"]["id"]


def test_a_restarted_trainer_asking_again_requeues_its_lost_lease_at_once():
    """A trainer holds one task at a time: asking again means the attempt holding the
    lease is gone (its process crashed and restarted in place) — no lease-period wait."""
    clock = Clock()
    coord = Coordinator(lease_seconds=120, task_bytes=100, clock=clock)
    coord.add_partition(spec("20200401/00", 100, 100))
    lost = coord.lease("0")
    clock.now = 1  # far inside the lease period
    again = coord.lease("0")  # the restarted process
    assert again["task"]["id"] == lost["task"]["id"]
    assert again["task"]["attempts"] == 2
    # The crashed attempt's completion (had it got that far) cannot count.
    assert not coord.complete(lost["lease"], "0", 99)["accepted"]
    assert coord.complete(again["lease"], "0", 10)["accepted"]
    # Another trainer's lease is not touched by trainer 0's request.
    other = coord.lease("1")
    assert other["kind"] == "task"
    coord.lease("0")
    assert coord.complete(other["lease"], "1", 10)["accepted"]
    assert coord.progress()["samples"] == 20


def test_window_limits_partitions_in_flight_and_exports_in_order():
    coord = Coordinator(task_bytes=100, window=1, checkpoint_every=2)
    coord.add_partition(spec("20200401/00", 100, 100))
    coord.add_partition(spec("20200401/01", 100))
    a = coord.lease("0")
    b = coord.lease("1")
    assert {a["task"]["partition"], b["task"]["partition"]} == {"20200401/00"}
    assert coord.lease("2")["kind"] == "wait"  # hour 01 waits for hour 00 (window=1)
    coord.complete(a["lease"], "0", 1)
    coord.complete(b["lease"], "1", 1)
    # trainer "1" is not the chief: it gets hour 01's task, "0" gets the export
    assert coord.lease("1")["task"]["partition"] == "20200401/01"
    assert coord.lease("0")["partition"] == "20200401/00"


def test_out_of_order_partition_rejected():
    coord = Coordinator()
    coord.add_partition(spec("20200401/05", 1))
    with pytest.raises(EctlError, match="time order"):
        coord.add_partition(spec("20200401/04", 1))


def test_restart_resumes_from_snapshot():
    saved: list[str] = []
    coord = Coordinator(task_bytes=100, save=saved.append)
    coord.add_partition(spec("20200401/00", 100))
    coord.add_partition(spec("20200401/01", 100, 100))
    drain(coord, "0")
    export = coord.lease("0")
    coord.exported(export["partition"], "0", export["partition"], checkpoint=True)
    got = coord.lease("0")
    coord.complete(got["lease"], "0", 7)  # one task of hour 01 done, one not

    fresh = Coordinator(task_bytes=100)
    fresh.restore(saved[-1])
    fresh.add_partition(spec("20200401/00", 100))
    fresh.add_partition(spec("20200401/01", 100, 100))
    remaining = drain(fresh, "0")
    assert len(remaining) == 1
    assert fresh.lease("0")["partition"] == "20200401/01"
    assert fresh.progress()["partitions"][0]["exported"]


def test_chief_death_hands_export_to_next_trainer():
    clock = Clock()
    coord = Coordinator(lease_seconds=10, task_bytes=100, clock=clock)
    coord.add_partition(spec("20200401/00", 100))
    held = coord.lease("1")  # trainer 1 takes the only task
    assert coord.lease("0")["kind"] == "wait"
    clock.now = 5
    assert coord.heartbeat(held["lease"], "1")
    coord.complete(held["lease"], "1", 5)
    assert coord.lease("0")["kind"] == "export"  # trainer 0 is the chief ...
    clock.now = 30  # ... and dies before confirming
    handed = coord.lease("1")
    assert (handed["kind"], handed["partition"], handed["checkpoint"]) == (
        "export",
        "20200401/00",
        True,
    )


def test_a_chief_that_leaves_mid_export_hands_the_export_on_at_once():
    """The chief is preempted while it exports (SIGTERM -> leave): the export goes to the
    next trainer on its next request, not never. Until 2026-12-02 `leave` dropped the
    trainer but kept the export claimed in its name; the lease-period expiry only releases
    exports of trainers it still knows, so the hour stayed unexported until a trainer of
    the same name came back (tests/e2e/test_preemption.py hung on it with trainer 2 alone)."""
    clock = Clock()
    coord = Coordinator(lease_seconds=120, task_bytes=100, clock=clock)
    coord.add_partition(spec("20200401/00", 100))
    coord.add_partition(spec("20200401/01", 100))
    held = coord.lease("2")
    coord.complete(held["lease"], "2", 5)
    assert coord.lease("0")["kind"] == "export"  # trainer 0 is the chief
    coord.leave("0")
    clock.now = 1  # far inside the lease period
    handed = coord.lease("2")
    assert (handed["kind"], handed["partition"]) == ("export", "20200401/00")
    coord.exported("20200401/00", "2", "20200401/00", checkpoint=handed["checkpoint"])
    assert coord.lease("2")["kind"] == "task"


def test_bad_inputs():
    with pytest.raises(EctlError):
        Coordinator(lease_seconds=0)
    coord = Coordinator()
    with pytest.raises(EctlError, match="not valid JSON"):
        coord.restore("{broken")
    with pytest.raises(EctlError, match="unknown partition"):
        coord.exported("20990101/00", "0", "v", checkpoint=False)
    with pytest.raises(EctlError, match="samples"):
        coord.complete("x", "0", -1)


def test_checkpoint_export_drains_leases_and_carries_the_state():
    coord = Coordinator(task_bytes=100, window=2)
    coord.add_partition(spec("20200401/00", 100))
    coord.add_partition(spec("20200401/01", 100, 100))
    a = coord.lease("0")
    b = coord.lease("1")  # hour 01's first task (window 2)
    assert (a["task"]["partition"], b["task"]["partition"]) == ("20200401/00", "20200401/01")
    coord.complete(a["lease"], "0", 10)
    # Hour 00 is complete and due for a checkpoint: no new task, the chief waits for b
    # (trainer "1" still trains b; asking again would give b up: a trainer that asks
    # holds no task).
    assert coord.lease("2")["kind"] == "wait"
    assert coord.lease("0")["kind"] == "wait"
    assert coord.progress()["draining"]
    coord.complete(b["lease"], "1", 7)
    export = coord.lease("0")
    assert export["kind"] == "export" and export["checkpoint"]
    state = json.loads(export["state"])
    assert sorted(state["done"]) == sorted([a["task"]["id"], b["task"]["id"]])
    assert state["exported"] == ["20200401/00"]
    assert coord.lease("1")["kind"] == "wait"  # still draining until confirmed
    coord.exported("20200401/00", "0", "20200401/00", checkpoint=True)
    assert coord.lease("1")["kind"] == "task"


def test_no_drain_between_checkpoints():
    coord = Coordinator(task_bytes=100, window=2, checkpoint_every=2)
    coord.add_partition(spec("20200401/00", 100))
    coord.add_partition(spec("20200401/01", 100, 100))
    a = coord.lease("0")
    coord.lease("1")
    coord.complete(a["lease"], "0", 10)
    assert coord.lease("1")["kind"] == "task"  # not a checkpoint export: keep training
    export = coord.lease("0")
    assert set(export.pop("timeline")) == {"data_found_at", "trained_at"}
    assert export == {"kind": "export", "partition": "20200401/00", "checkpoint": False}


def test_restart_from_checkpoint_loads_first_then_trains_the_rest():
    coord = Coordinator(task_bytes=100)
    coord.add_partition(spec("20200401/00", 100))
    coord.add_partition(spec("20200401/01", 100, 100))
    drain(coord, "0")
    export = coord.lease("0")
    checkpoint_state = export["state"]
    coord.exported("20200401/00", "0", "20200401/00", checkpoint=True)
    drain(coord, "0")  # hour 01 trained too, then the pservers die: that work is lost

    restarted = Coordinator(task_bytes=100)
    assert json.loads(checkpoint_state)["checkpoint"] == "20200401/00"
    restarted.restore(state_for_restart(checkpoint_state))
    restarted.add_partition(spec("20200401/00", 100))
    restarted.add_partition(spec("20200401/01", 100, 100))
    assert restarted.progress()["load_pending"] == "20200401/00"
    assert restarted.lease("1") == {"kind": "load", "version": "20200401/00"}
    assert restarted.lease("0")["kind"] == "wait"  # nobody trains before the load
    assert restarted.lease("1")["kind"] == "load"  # asked again: the same load
    with pytest.raises(EctlError, match="required"):
        restarted.loaded("1", "20200331/23")
    restarted.loaded("1", "20200401/00")
    assert len(drain(restarted, "0")) == 2  # hour 01 again, hour 00 not
    assert restarted.lease("0")["partition"] == "20200401/01"
    assert restarted.progress()["partitions"][0]["exported"]


def test_a_dead_loader_hands_the_load_to_another_trainer():
    clock = Clock()
    coord = Coordinator(lease_seconds=10, clock=clock)
    coord.restore(state_for_restart(None))
    assert coord.progress()["load_pending"] is None and coord.progress()["tasks_done"] == 0
    coord.restore(
        state_for_restart(
            json.dumps(
                {"state_version": 1, "done": {}, "exported": [], "checkpoint": "20200401/00"}
            )
        )
    )
    assert coord.lease("0")["kind"] == "load"
    clock.now = 5
    assert coord.lease("1")["kind"] == "wait"
    clock.now = 12  # trainer 0 silent for a whole lease period
    assert coord.lease("1")["kind"] == "load"


def test_state_files_are_checked():
    with pytest.raises(EctlError, match="not valid JSON"):
        state_for_restart("{")
    with pytest.raises(EctlError, match="unsupported"):
        state_for_restart('{"state_version": 99}')
    with pytest.raises(EctlError, match="unsupported"):
        state_for_restart("[1, 2]")
    with pytest.raises(EctlError, match="lacks"):
        state_for_restart('{"state_version": 1, "done": []}')
    with pytest.raises(EctlError, match="does not name"):
        state_for_restart('{"state_version": 1, "done": {}, "exported": []}')


def test_restart_from_checkpoint_rewrites_the_state_file(tmp_path):
    from elasticctr.coordinator.runtime import restart_from_checkpoint

    state = tmp_path / "progress" / "coordinator.json"
    state.parent.mkdir()
    state.write_text('{"stale": true}')
    ckpt = tmp_path / "checkpoint"
    got = restart_from_checkpoint(str(ckpt), str(state))
    assert got["checkpoint"] is None and got["tasks_done"] == 0
    assert json.loads(state.read_text())["done"] == {}  # no checkpoint: nothing survives

    (ckpt / "ps").mkdir(parents=True)
    done = {"20200401/00#0.0": {"samples": 5, "trainer": "0", "attempts": 1}}
    snapshot = {"state_version": 1, "done": done, "exported": ["20200401/00"]}
    (ckpt / "ps" / "coordinator.json").write_text(
        json.dumps({**snapshot, "checkpoint": "20200401/00"})
    )
    got = restart_from_checkpoint(ckpt.as_uri(), state.as_uri())
    assert got == {
        "message": f"restarting from checkpoint 20200401/00 in {ckpt.as_uri()}",
        "checkpoint": "20200401/00",
        "tasks_done": 1,
    }
    coord = Coordinator(task_bytes=100)
    coord.restore(state.read_text())
    assert coord.progress()["load_pending"] == "20200401/00"

    (ckpt / "ps" / "coordinator.json").write_text("{truncated")
    before = state.read_text()
    with pytest.raises(EctlError, match="not valid JSON"):
        restart_from_checkpoint(str(ckpt), str(state))
    assert state.read_text() == before  # a corrupted checkpoint changes nothing
