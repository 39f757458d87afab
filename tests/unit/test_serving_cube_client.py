"""Serving's cube client (`serving.embeddings.CubeEmbeddings`) against in-process fake shards:
every shard asked before any answer is awaited, keep-alive reuse, a stale connection
retried, a failed lookup leaving no connection out of step, timeouts."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from elasticctr.cube.format import shard_of
from elasticctr.cube.protocol import encode_response
from elasticctr.serving.embeddings import CubeEmbeddings, CubeUnavailable

pytestmark = pytest.mark.fast

VERSION = "20261201/00"
DIM = 2


class FakeShard:
    """Answers `POST /v1/lookup` with rows [key, shard] (float32) of the pinned version.
    `gate`: hold every answer until it is set; `close_after`: close each connection after
    that many answers (a keep-alive connection the shard dropped); `garbage_after`: answer
    garbage (not HTTP) once that many requests were answered."""

    def __init__(
        self,
        shard: int,
        gate: asyncio.Event | None = None,
        close_after: int = 0,
        garbage_after: int = 0,
    ):
        self.shard, self.gate, self.close_after = shard, gate, close_after
        self.garbage_after = garbage_after
        self.received = asyncio.Event()
        self.connections = 0
        self.requests = 0
        self.open_writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.connections += 1
        self.open_writers.add(writer)
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = dict(
                    line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if line
                )
                body = await reader.readexactly(int(headers["Content-Length"]))
                self.requests += 1
                self.received.set()
                if self.gate is not None:
                    await self.gate.wait()
                if self.garbage_after and self.requests > self.garbage_after:
                    writer.write(b"garbage\r\n\r\n")
                    await writer.drain()
                    continue
                keys = np.frombuffer(body, "<u8")
                rows = np.stack([keys.astype(np.float32), np.full(keys.size, self.shard)], 1)
                payload = b"".join(encode_response(rows, 0, self.shard, headers["X-Cube-Version"]))
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
                )
                await writer.drain()
                answered += 1
                if self.close_after and answered >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_writers.discard(writer)
            writer.close()

    async def stop(self):
        self.server.close()
        for w in list(self.open_writers):
            w.close()


def _keys(n: int = 40) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.uint64) * np.uint64(7919)


def _check(rows: np.ndarray, keys: np.ndarray) -> None:
    np.testing.assert_array_equal(rows[:, 0], keys.astype(np.float32))
    np.testing.assert_array_equal(rows[:, 1], shard_of(keys, 2).astype(np.float32))


def test_every_shard_is_asked_before_any_answer_is_awaited():
    """Shard 0 answers only once shard 1 has received its request: a client that awaited
    shard 0 before asking shard 1 would time out."""

    async def main():
        gate = asyncio.Event()
        shards = [FakeShard(0, gate), FakeShard(1)]
        urls = [await s.start() for s in shards]
        cube = CubeEmbeddings(urls, timeout=2.0)
        keys = _keys()

        async def open_gate():
            await shards[1].received.wait()
            gate.set()

        opener = asyncio.get_running_loop().create_task(open_gate())
        _check(await cube.lookup(keys, VERSION, DIM), keys)
        await opener
        # keep-alive: later lookups (gate open) reuse the same connection per shard
        gate.clear()
        shards[1].received.clear()
        opener = asyncio.get_running_loop().create_task(open_gate())
        tasks = []
        loop = asyncio.get_running_loop()
        loop.set_task_factory(lambda lp, coro: tasks.append(coro) or asyncio.Task(coro, loop=lp))
        for _ in range(5):
            _check(await cube.lookup(keys, VERSION, DIM), keys)
        loop.set_task_factory(None)
        await opener
        assert tasks == []  # warm connections: no task per shard (the cheap path)
        assert [s.connections for s in shards] == [1, 1]
        assert [s.requests for s in shards] == [6, 6]
        cube.close()
        for s in shards:
            await s.stop()

    asyncio.run(main())


def test_a_connection_the_shard_closed_is_replaced():
    async def main():
        shards = [FakeShard(0, close_after=1), FakeShard(1, close_after=2)]
        urls = [await s.start() for s in shards]
        cube = CubeEmbeddings(urls, timeout=2.0)
        keys = _keys()
        for _ in range(6):
            _check(await cube.lookup(keys, VERSION, DIM), keys)
            await asyncio.sleep(0.01)  # (or not: a stale one is retried on a new one)
        for _ in range(6):
            _check(await cube.lookup(keys, VERSION, DIM), keys)
        assert shards[0].connections == 12 and shards[0].requests == 12
        assert shards[1].connections == 6
        cube.close()
        for s in shards:
            await s.stop()

    asyncio.run(main())


def test_a_failed_shard_leaves_no_connection_out_of_step():
    """Shard 0 answers garbage: the lookup fails (CubeUnavailable) and the request already
    written to shard 1 is abandoned with its connection, so a later lookup never reads
    that stale answer as its own."""

    async def main():
        gate = asyncio.Event()
        gate.set()
        shards = [FakeShard(0, garbage_after=1), FakeShard(1, gate)]
        urls = [await s.start() for s in shards]
        cube = CubeEmbeddings(urls, timeout=1.0)
        keys = _keys()
        _check(await cube.lookup(keys, VERSION, DIM), keys)  # both connections idle now
        gate.clear()
        shards[1].received.clear()
        with pytest.raises(CubeUnavailable, match="ValueError"):
            await cube.lookup(keys, VERSION, DIM)
        await shards[1].received.wait()
        assert cube.shards[1].replicas[0].idle == []  # abandoned: closed, not pooled
        gate.set()
        ones = keys[shard_of(keys, 2) == 1]  # only shard 1's keys, on a new connection
        rows = await cube.lookup(ones, VERSION, DIM)
        np.testing.assert_array_equal(rows[:, 0], ones.astype(np.float32))
        assert shards[1].connections == 2
        cube.close()
        for s in shards:
            await s.stop()

    asyncio.run(main())


def test_a_shard_down_at_the_first_lookup_fails_it_cleanly():
    """No connection yet (the first lookup): the shards are asked in parallel tasks; shard
    0 refuses connections, the lookup fails, shard 1's answer still lands on its own
    connection, which the next lookup reuses."""

    async def main():
        gate = asyncio.Event()
        shard1 = FakeShard(1, gate)
        url1 = await shard1.start()
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        dead = f"http://127.0.0.1:{probe.sockets[0].getsockname()[1]}"
        probe.close()
        await probe.wait_closed()
        cube = CubeEmbeddings([dead, url1], timeout=1.0)
        keys = _keys()
        with pytest.raises(CubeUnavailable, match="Errno|refused"):
            await cube.lookup(keys, VERSION, DIM)
        await shard1.received.wait()
        gate.set()
        for _ in range(50):
            if cube.shards[1].replicas[0].idle:
                break
            await asyncio.sleep(0.01)
        ones = keys[shard_of(keys, 2) == 1]
        rows = await cube.lookup(ones, VERSION, DIM)
        np.testing.assert_array_equal(rows[:, 0], ones.astype(np.float32))
        assert shard1.connections == 1 and shard1.requests == 2
        cube.close()
        await shard1.stop()

    asyncio.run(main())


def test_a_shard_that_does_not_answer_times_out():
    async def main():
        gate = asyncio.Event()  # never set
        shards = [FakeShard(0), FakeShard(1, gate)]
        urls = [await s.start() for s in shards]
        cube = CubeEmbeddings(urls, timeout=0.3)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(CubeUnavailable, match="TimeoutError"):
            await cube.lookup(_keys(), VERSION, DIM)
        assert 0.25 < loop.time() - t0 < 1.0  # one timeout for the lookup, not one per shard
        cube.close()
        gate.set()
        for s in shards:
            await s.stop()

    asyncio.run(main())
