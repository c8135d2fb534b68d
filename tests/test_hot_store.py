"""Behaviour of the session runtime store: LRU with write-back, flushing, recovery, and distrust of its files."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import unless_it_waits_on
from hot_store_writer import KEYS as WRITER_KEYS
from hot_store_writer import pad_for
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.hot import store as store_module
from agentledger.hot.store import SessionRuntimeStore

WRITER = Path(__file__).with_name("hot_store_writer.py")


@dataclass
class Tally:
    items: list[int] = field(default_factory=list)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def open_store(state_dir: Path, **kwargs) -> SessionRuntimeStore[Tally]:
    kwargs.setdefault("flush_interval_s", 3600.0)  # nothing reaches disk unless a test asks
    return SessionRuntimeStore(state_dir, create=Tally, dump=lambda t: {"items": t.items},
                               load=lambda d: Tally(list(d["items"])), **kwargs)


def append(value: int):
    return lambda t: t.items.append(value)


def session_file(state_dir: Path, key: str) -> Path:
    return state_dir / "sessions" / (hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest() + ".json")


def on_disk(state_dir: Path, key: str) -> dict | None:
    path = session_file(state_dir, key)
    return json.loads(path.read_bytes()) if path.exists() else None


def plant(state_dir: Path, key: str, content: bytes) -> Path:
    path = session_file(state_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def record(key: str, items: list[int], *, updated_at: float = 1.0, position: int | None = None) -> bytes:
    return json.dumps({"key": key, "created_at": 1.0, "updated_at": updated_at, "position": position,
                       "state": {"items": items}}).encode()


def quarantined_files(state_dir: Path) -> list[Path]:
    return sorted((state_dir / "sessions").glob("*.corrupt-*"))


# -- LRU -------------------------------------------------------------------


def test_lru_evicts_least_recently_used_and_writes_it_back_at_the_next_flush(tmp_path):
    evicted = []
    clock = FakeClock()
    store = open_store(tmp_path, max_entries=2, clock=clock,
                       on_evict=lambda k, s: evicted.append((k, list(s.items))))
    store.update("a", append(1))
    store.update("b", append(2))
    assert store.get("a").items == [1]  # a is now the most recently used
    store.update("c", append(3))
    assert evicted == [("b", [2])]
    assert store.size() == 2
    assert store.keys() == {"a", "b", "c"}
    store.maybe_flush()  # before the interval: only what was evicted is written
    assert on_disk(tmp_path, "b")["state"] == {"items": [2]}
    assert on_disk(tmp_path, "a") is None  # still dirty in memory, not written yet


def test_get_of_evicted_key_reloads_it_and_counts_as_a_use(tmp_path):
    evicted = []
    store = open_store(tmp_path, max_entries=2, on_evict=lambda k, s: evicted.append(k))
    store.update("a", append(1), position=7)
    store.update("b", append(2))
    store.update("c", append(3))  # evicts a
    assert store.get("a").items == [1]  # reloading a evicts b, the least recently used now
    assert store.position("a") == 7
    assert evicted == ["a", "b"]
    store.update("d", append(4))  # a was just used, so c goes
    assert evicted == ["a", "b", "c"]
    assert store.get("b").items == [2] and store.get("c").items == [3]


def test_peek_reads_memory_only_and_is_not_a_use(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path, max_entries=2, ttl_s=10.0, clock=clock)
    store.update("a", append(1))
    store.update("b", append(2))
    clock.now += 11
    assert store.peek("a").items == [1]
    store.update("c", append(3))  # a is still the least recently used
    assert store.peek("a") is None and store.get("a").items == [1]
    assert store.peek("nope") is None and store.size() == 2


def test_has_and_position_of_unknown_keys(tmp_path):
    store = open_store(tmp_path)
    assert store.get("nope") is None
    assert not store.has("nope")
    assert store.position("nope") is None
    assert store.size() == 0  # looking does not create
    store.update("k", append(1), position=3)
    store.update("k", append(2))  # no position: the last one stands
    assert store.position("k") == 3
    assert store.has("k")


def test_get_or_create_makes_one_state_that_persists(tmp_path):
    store = open_store(tmp_path, max_entries=1)
    fresh = store.get_or_create("a")
    assert fresh == Tally()
    assert store.get_or_create("a") is fresh
    store.get_or_create("b")  # evicts a, which must not vanish for having never been updated
    assert store.has("a") and store.get("a") == Tally()


def session_files(state_dir: Path) -> list[Path]:
    return sorted((state_dir / "sessions").glob("*.json"))


def test_without_write_back_an_evicted_entry_leaves_no_file_behind(tmp_path):
    store = open_store(tmp_path, max_entries=2, flush_interval_s=0, write_back=False)
    for n, key in enumerate("abcde"):
        store.update(key, append(n))
    assert set(session_files(tmp_path)) == {session_file(tmp_path, "d"), session_file(tmp_path, "e")}
    assert store.keys() == {"d", "e"}
    assert store.get("a") is None  # the caller rebuilds it


def test_without_write_back_files_beyond_max_entries_are_deleted_at_start(tmp_path):
    store = open_store(tmp_path, max_entries=10, flush_interval_s=0, write_back=False)
    for n, key in enumerate("abcde"):
        store.update(key, append(n))
    assert len(session_files(tmp_path)) == 5
    again = open_store(tmp_path, max_entries=2, write_back=False)
    assert again.keys() == {"d", "e"}  # the newest
    assert len(session_files(tmp_path)) == 2
    assert open_store(tmp_path, max_entries=2, write_back=True).keys() == {"d", "e"}


# -- flushing --------------------------------------------------------------


def test_nothing_is_written_before_the_flush_interval(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path, flush_interval_s=5.0, clock=clock)
    store.update("s", append(1), position=1)
    store.maybe_flush()
    clock.now += 4.9
    store.maybe_flush()
    assert on_disk(tmp_path, "s") is None
    clock.now += 0.1
    store.maybe_flush()
    assert on_disk(tmp_path, "s")["state"] == {"items": [1]}

    clock.now += 1
    store.update("s", append(2), position=2)
    store.maybe_flush()  # 1 s after the last flush: too soon
    assert on_disk(tmp_path, "s")["position"] == 1
    clock.now += 4
    store.maybe_flush()
    assert on_disk(tmp_path, "s")["position"] == 2
    assert on_disk(tmp_path, "s")["state"] == {"items": [1, 2]}


def test_flush_interval_zero_writes_every_update(tmp_path):
    store = open_store(tmp_path, flush_interval_s=0)
    for i in range(5):
        store.update("s", append(i), position=i)
        assert on_disk(tmp_path, "s")["state"] == {"items": list(range(i + 1))}
        assert on_disk(tmp_path, "s")["position"] == i


def test_flush_writes_one_key_and_close_writes_all(tmp_path):
    store = open_store(tmp_path)
    for key in "abc":
        store.update(key, append(ord(key)))
    store.flush("b")
    assert [on_disk(tmp_path, k) is not None for k in "abc"] == [False, True, False]
    store.close()
    assert [on_disk(tmp_path, k)["state"]["items"] for k in "abc"] == [[97], [98], [99]]


def test_a_removed_directory_is_made_again_by_the_next_write(tmp_path):
    store = open_store(tmp_path / "hot", flush_interval_s=0)
    store.update("a", append(1))
    shutil.rmtree(tmp_path / "hot")
    store.update("b", append(2))
    assert on_disk(tmp_path / "hot", "b")["state"] == {"items": [2]}
    assert stat.S_IMODE((tmp_path / "hot" / "sessions").stat().st_mode) == 0o700
    assert store.get("a").items == [1]


class SlowDisk:
    """Holds every session file write until released, as a stalled disk would."""

    def __init__(self, monkeypatch):
        self.writing = threading.Event()
        self.release = threading.Event()
        real = store_module._write_atomically

        def write(directory, name, data):
            self.writing.set()
            assert self.release.wait(10)
            real(directory, name, data)

        monkeypatch.setattr(store_module, "_write_atomically", write)


def in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_a_slow_flush_holds_up_no_reader_and_no_update(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    store.update("a", append(1), position=1)
    store.update("b", append(2))
    disk = SlowDisk(monkeypatch)
    flushing = in_thread(store.flush_all)
    assert disk.writing.wait(5)
    meanwhile = in_thread(lambda: (store.get("a"), store.update("a", append(3), position=2), store.get("b")))
    meanwhile.join(2)
    assert not meanwhile.is_alive()  # answered while the disk still held the flush
    disk.release.set()
    flushing.join(5)
    assert on_disk(tmp_path, "a")["state"] == {"items": [1]}  # what the flush took
    store.flush_all()
    assert (on_disk(tmp_path, "a")["state"], on_disk(tmp_path, "a")["position"]) == ({"items": [1, 3]}, 2)


def test_a_key_deleted_during_a_flush_does_not_come_back(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    store.update("a", append(1))
    disk = SlowDisk(monkeypatch)
    flushing = in_thread(store.flush_all)
    assert disk.writing.wait(5)
    deleting = in_thread(lambda: store.delete("a"))
    disk.release.set()
    flushing.join(5)
    deleting.join(5)
    assert on_disk(tmp_path, "a") is None
    assert not store.has("a")
    assert not open_store(tmp_path).has("a")  # nor after a restart


def test_ttl_evicts_idle_entries_and_writes_them_back(tmp_path):
    clock = FakeClock()
    evicted = []
    store = open_store(tmp_path, ttl_s=10.0, clock=clock, on_evict=lambda k, s: evicted.append(k))
    store.update("idle", append(1))
    store.update("busy", append(2))
    clock.now += 6
    store.get("busy")
    clock.now += 6
    store.maybe_flush()
    assert evicted == ["idle"]
    assert store.size() == 1
    assert on_disk(tmp_path, "idle")["state"] == {"items": [1]}
    assert store.get("idle").items == [1]  # and back on demand


def test_ttl_zero_never_evicts(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path, clock=clock)
    store.update("s", append(1))
    clock.now += 10**9
    store.maybe_flush()
    assert store.size() == 1


def test_a_failing_mutator_falls_back_to_the_last_flushed_state(tmp_path):
    store = open_store(tmp_path)
    store.update("s", append(1), position=1)
    store.flush("s")
    store.update("s", append(2), position=2)

    def half_done(t: Tally) -> None:
        t.items.append(3)
        raise RuntimeError("bad event")

    with pytest.raises(RuntimeError):
        store.update("s", half_done, position=3)
    assert store.get("s").items == [1]
    assert store.position("s") == 1  # state and position still agree: replay from 1


def test_delete_removes_memory_and_file(tmp_path):
    store = open_store(tmp_path, flush_interval_s=0)
    store.update("gone", append(1))
    store.update("kept", append(2))
    assert session_file(tmp_path, "gone").exists()
    store.delete("gone")
    store.delete("never-existed")
    assert not session_file(tmp_path, "gone").exists()
    assert not store.has("gone") and store.get("gone") is None
    assert store.keys() == {"kept"}
    store.close()
    assert open_store(tmp_path).keys() == {"kept"}


# -- recovery --------------------------------------------------------------


def test_recovery_loads_newest_first_up_to_max_entries(tmp_path):
    store = open_store(tmp_path)
    for i, key in enumerate(["s0", "s1", "s2", "s3", "s4"]):
        store.update(key, append(i), position=100 + i)
        time.sleep(0.002)  # distinct updated_at
    store.update("s1", append(11), position=111)  # now the newest
    store.close()

    recovered = []
    evicted = []
    again = open_store(tmp_path, max_entries=3, on_recover=lambda k, s: recovered.append((k, list(s.items))),
                       on_evict=lambda k, s: evicted.append(k))
    assert recovered == [("s1", [1, 11]), ("s4", [4]), ("s3", [3])]
    assert again.size() == 3
    assert again.keys() == {"s0", "s1", "s2", "s3", "s4"}
    assert again.quarantined == 0
    assert again.position("s1") == 111
    assert again.position("s0") == 100  # from disk, on demand: evicts the oldest recovered
    assert evicted == ["s3"]
    assert again.get("s2").items == [2]


def test_recovery_breaks_ties_by_modification_time(tmp_path):
    for i, key in enumerate(["old", "new"]):
        path = plant(tmp_path, key, record(key, [i], updated_at=5.0))
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    recovered = []
    open_store(tmp_path, max_entries=1, on_recover=lambda k, s: recovered.append(k))
    assert recovered == ["new"]


def test_a_file_under_another_keys_name_is_refused_at_start(tmp_path):
    store = open_store(tmp_path, flush_interval_s=0)
    store.update("alice", append(1))
    # Tampering: alice's record copied over bob's name.
    bob = plant(tmp_path, "bob", session_file(tmp_path, "alice").read_bytes())
    again = open_store(tmp_path)
    assert again.quarantined == 1
    assert not bob.exists() and len(quarantined_files(tmp_path)) == 1
    assert again.get("bob") is None and not again.has("bob")
    assert again.get("alice").items == [1]


def test_a_file_under_another_keys_name_is_refused_on_demand(tmp_path):
    store = open_store(tmp_path, flush_interval_s=0, max_entries=1)
    store.update("bob", append(1))
    store.update("alice", append(2))  # bob now lives only on disk
    plant(tmp_path, "bob", record("alice", [666]))
    assert store.get("bob") is None  # never served alice's state as bob's
    assert store.quarantined == 1
    assert not store.has("bob")
    assert store.get_or_create("bob") == Tally()  # the caller rebuilds it


def test_a_hash_collision_is_refused_not_served(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "file_name", lambda key: "0" * 64 + ".json")  # every key collides
    store = open_store(tmp_path, flush_interval_s=0, max_entries=1)
    store.update("bob", append(1))
    store.update("alice", append(2))  # overwrites bob's file, and evicts bob
    assert store.get("bob") is None  # the file says alice: never served as bob
    assert store.quarantined == 1


@pytest.mark.parametrize("content", [
    b"",
    b"{\"key\": \"s\", \"created_at\": 1.0, \"upd",
    b"\xff\xfe garbage \x00",
    b"[]",
    b"null",
    b"[" * 100_000,
    json.dumps({"key": "s", "created_at": 1.0, "updated_at": 1.0, "state": {"items": []}}).encode(),
    json.dumps({"key": "s", "created_at": 1.0, "updated_at": 1.0, "position": None, "state": []}).encode(),
    json.dumps({"key": "s", "created_at": "x", "updated_at": 1.0, "position": None, "state": {}}).encode(),
    json.dumps({"key": "s", "created_at": 1.0, "updated_at": 1.0, "position": True, "state": {}}).encode(),
    b'{"key": "s", "created_at": 1.0, "updated_at": NaN, "position": null, "state": {}}',
    json.dumps({"key": 5, "created_at": 1.0, "updated_at": 1.0, "position": None, "state": {}}).encode(),
    record("s", []).replace(b'"items"', b'"other"'),  # valid file, but the caller's load rejects the state
], ids=["empty", "torn", "binary", "list", "null", "deep", "no-position", "state-list", "str-time", "bool-position",
        "nan-time", "int-key", "load-rejects"])
def test_corrupt_files_are_quarantined_counted_and_rebuilt(tmp_path, content):
    plant(tmp_path, "s", content)
    plant(tmp_path, "fine", record("fine", [1]))
    store = open_store(tmp_path)
    assert store.quarantined == 1
    [kept] = quarantined_files(tmp_path)
    assert kept.read_bytes() == content and kept.name.startswith(session_file(tmp_path, "s").name + ".corrupt-")
    assert not session_file(tmp_path, "s").exists()
    assert store.get("s") is None and not store.has("s")
    assert store.get("fine").items == [1]
    store.update("s", append(9))
    store.close()
    assert open_store(tmp_path).get("s").items == [9]


def test_a_fifo_under_a_sessions_name_is_quarantined_at_start_not_waited_on(tmp_path):
    plant(tmp_path, "fine", record("fine", [1]))
    fifo = session_file(tmp_path, "s")
    os.mkfifo(fifo)
    store = unless_it_waits_on(fifo, lambda: open_store(tmp_path))
    assert store.quarantined == 1 and not fifo.exists()
    assert store.get("s") is None and store.get("fine").items == [1]


def test_a_file_beyond_max_entries_is_checked_when_loaded(tmp_path):
    plant(tmp_path, "new", record("new", [1], updated_at=2.0))
    plant(tmp_path, "old", record("old", [1], updated_at=1.0).replace(b'"items"', b'"other"'))
    store = open_store(tmp_path, max_entries=1)
    assert store.quarantined == 0 and store.has("old")
    assert store.get("old") is None
    assert store.quarantined == 1 and not store.has("old")


def test_stray_temp_files_are_removed_at_start(tmp_path):
    store = open_store(tmp_path, flush_interval_s=0)
    store.update("s", append(1))
    sessions = tmp_path / "sessions"
    (sessions / ".tmp-deadbeef").write_bytes(b'{"key": "s", "crea')
    (sessions / f".tmp-{session_file(tmp_path, 's').name}.abc123").write_bytes(b"")
    again = open_store(tmp_path)
    assert sorted(p.name for p in sessions.iterdir()) == [session_file(tmp_path, "s").name]
    assert again.quarantined == 0
    assert again.get("s").items == [1]


# -- keys and files --------------------------------------------------------


@pytest.mark.parametrize("key", [
    "../../etc/passwd", "/etc/passwd", "a\x00b", "k" * 10_000, "", "..", "a/b\\c", "\ud800 lone surrogate",
    "ключ 🔑", ".tmp-x", "x.json.corrupt-1",
], ids=["traversal", "absolute", "nul", "10k", "empty", "dotdot", "slashes", "surrogate", "unicode", "tmp-like",
        "corrupt-like"])
def test_any_key_stays_inside_state_dir_and_round_trips(tmp_path, key):
    state_dir = tmp_path / "state"
    store = open_store(state_dir, flush_interval_s=0, max_entries=1)
    store.update(key, append(1), position=4)
    store.update("other", append(2))  # pushes key out to disk
    assert store.get(key).items == [1]
    store.close()
    everything = [p for p in tmp_path.rglob("*")]
    assert all(p.is_relative_to(state_dir) for p in everything)
    assert len(list((state_dir / "sessions").iterdir())) == 2
    again = open_store(state_dir)
    assert again.keys() == {key, "other"}
    assert again.get(key).items == [1] and again.position(key) == 4
    assert again.quarantined == 0


@pytest.mark.parametrize("umask", [0o000, 0o277], ids=["open", "strips-owner-bits"])
def test_files_are_0600_and_directories_0700_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        store = open_store(tmp_path / "state", flush_interval_s=0)
        store.update("s", append(1))
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(tmp_path / "state") == 0o700
    assert mode(tmp_path / "state" / "sessions") == 0o700
    assert mode(session_file(tmp_path / "state", "s")) == 0o600


def test_an_existing_sessions_dir_is_made_private_and_the_state_dir_left_alone(tmp_path):
    os.chmod(tmp_path, 0o755)
    (tmp_path / "sessions").mkdir()
    os.chmod(tmp_path / "sessions", 0o755)
    open_store(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "sessions").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o755


@pytest.mark.parametrize("stray", ["file", "symlink"])
def test_what_stands_where_the_sessions_dir_goes_is_refused_and_left_as_it_was(tmp_path, stray):
    # A stray file there was made 0700 before the store failed on it; a symlink's target would have been too.
    target = tmp_path / "elsewhere"
    if stray == "file":
        target.write_text("")
    else:
        target.mkdir()
    target.chmod(0o750)
    state = tmp_path / "state"
    state.mkdir()
    if stray == "file":
        target.rename(state / "sessions")
        target = state / "sessions"
    else:
        (state / "sessions").symlink_to(target)
    with pytest.raises(NotADirectoryError) as refused:
        open_store(state)
    assert refused.value.filename == str(state / "sessions")
    assert stat.S_IMODE(target.stat().st_mode) == 0o750


def test_readers_and_a_writer_on_threads(tmp_path):
    store = open_store(tmp_path, max_entries=3, flush_interval_s=0.001)
    keys = [f"s{i}" for i in range(8)]
    errors = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                for k, key in enumerate(keys):
                    state = store.get(key)
                    items = list(state.items) if state else []
                    assert items == list(range(k, k + len(keys) * len(items), len(keys)))
                    store.has(key)
                store.keys()
                assert store.size() <= 3
        except BaseException as e:  # reported on the main thread
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(400):
        store.update(keys[i % len(keys)], append(i), position=i)
        store.maybe_flush()
    done.set()
    for t in readers:
        t.join()
    assert errors == []
    store.close()
    again = open_store(tmp_path)
    for k, key in enumerate(keys):
        assert again.get(key).items == list(range(k, 400, len(keys)))


# -- against a model -------------------------------------------------------

KEY_POOL = ["a", "b", "c", "d", "../e", "f\x00g", ""]

operations = st.lists(st.one_of(
    st.tuples(st.just("update"), st.sampled_from(KEY_POOL), st.integers(0, 1000)),
    st.tuples(st.just("get"), st.sampled_from(KEY_POOL)),
    st.tuples(st.just("get_or_create"), st.sampled_from(KEY_POOL)),
    st.tuples(st.just("delete"), st.sampled_from(KEY_POOL)),
    st.tuples(st.just("flush"), st.sampled_from(KEY_POOL)),
    st.tuples(st.just("flush_all")),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 3.0, 20.0])),
    st.tuples(st.just("reopen")),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops=operations, max_entries=st.integers(1, 4))
def test_store_matches_a_dict_after_any_operations_and_a_reopen(ops, max_entries):
    model: dict[str, list[int]] = {}
    positions: dict[str, int] = {}
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp)
        reopen = lambda: open_store(state_dir, max_entries=max_entries, flush_interval_s=2.0, ttl_s=10.0,  # noqa: E731
                                    clock=clock)
        store = reopen()
        for op, *args in ops:
            if op == "update":
                key, value = args
                store.update(key, append(value), position=value)
                model.setdefault(key, []).append(value)
                positions[key] = value
            elif op == "get":
                state = store.get(args[0])
                assert (state.items if state else None) == model.get(args[0])
                assert store.position(args[0]) == positions.get(args[0])
            elif op == "get_or_create":
                assert store.get_or_create(args[0]).items == model.setdefault(args[0], [])
            elif op == "delete":
                store.delete(args[0])
                model.pop(args[0], None)
                positions.pop(args[0], None)
            elif op == "flush":
                store.flush(args[0])
            elif op == "flush_all":
                store.flush_all()
            elif op == "tick":
                clock.now += args[0]
                store.maybe_flush()
            else:
                store.close()
                store = reopen()
            assert store.size() <= max_entries
            assert store.keys() == set(model)
        store.close()
        again = reopen()
        assert again.quarantined == 0
        assert again.keys() == set(model)
        for key in KEY_POOL:
            state = again.get(key)
            assert (state.items if state else None) == model.get(key)
            assert again.position(key) == positions.get(key)


# -- kill -9 -----------------------------------------------------------------

FIELDS = {"key", "created_at", "updated_at", "position", "state"}


def check_files(state_dir: Path) -> dict[str, int]:
    """Every session file is whole and self-consistent; returns n per key index."""
    found = {}
    for path in (state_dir / "sessions").glob("*.json"):
        doc = json.loads(path.read_bytes())
        assert set(doc) == FIELDS
        assert doc["key"] in WRITER_KEYS
        assert path == session_file(state_dir, doc["key"])
        assert isinstance(doc["created_at"], float) and isinstance(doc["updated_at"], float)
        n = doc["state"]["n"]
        assert doc["state"]["pad"] == pad_for(n)
        assert doc["position"] == n
        found[WRITER_KEYS.index(doc["key"])] = n
    return found


def test_kill_9_mid_flush_never_leaves_a_partial_file(tmp_path):
    rng = random.Random(1234)
    state_dir = tmp_path / "state"
    iterations = int(os.environ.get("AGENTLEDGER_HOT_KILLS", "50"))
    for _ in range(iterations):
        writer = subprocess.Popen([sys.executable, str(WRITER), str(state_dir)], stdout=subprocess.PIPE, text=True)
        # Wait for its first write, so the kill lands while it is writing, not while Python starts.
        first = writer.stdout.readline()
        time.sleep(rng.uniform(0.005, 0.060))
        writer.send_signal(signal.SIGKILL)
        rest, _ = writer.communicate(timeout=30)
        assert first, "the writer died before writing"
        reported = {}
        # Only whole lines: the kill may land in the middle of one.
        for line in (first + rest).splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            index, n = map(int, line.split())
            reported[index] = n

        on_disk_n = check_files(state_dir)
        # What it reported was already renamed into place; at most one more update was not reported.
        for index, n in reported.items():
            assert n <= on_disk_n[index] <= n + 1

        store = SessionRuntimeStore(state_dir, create=dict, dump=dict, load=dict, max_entries=2)
        assert store.quarantined == 0
        assert not list((state_dir / "sessions").glob(".tmp-*"))
        assert store.keys() == {WRITER_KEYS[i] for i in on_disk_n}
        store.close()
    assert sum(on_disk_n.values()) >= iterations  # each run wrote at least once
