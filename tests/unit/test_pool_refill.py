"""The warm pool's refill policy, without Docker: a pool whose pairs are made by a stand-in
(`_make` blocks until the test lets it finish) and removed by nobody. How many pairs it makes,
how many at once, and when a claim waits for one rather than start cold."""

import threading
import time
from pathlib import Path

import pytest

from assure import spec
from assure.run import pool
from assure.sandbox import uids
from assure.sandbox.docker.images import ImageSet

EXAMPLES = Path(__file__).resolve().parents[2] / "specs" / "examples"

IMAGES = ImageSet(
    "assure-base:b", "assure-agent:a", "assure-gateway:g", "assure-egress:e"
)  # a shape names its agent image


class HeldPool(pool.WarmPool):
    """Pairs appear when `go` is set; `making` is how many _make calls are under way now."""

    def __init__(self, *args, **kwargs):
        self.go = threading.Event()
        self.discarded = []
        self.making = self.most_at_once = 0
        self.count = threading.Lock()
        super().__init__(*args, **kwargs)

    def _make(self, spec, shape, number):
        with self.count:
            self.making += 1
            self.most_at_once = max(self.most_at_once, self.making)
        self.go.wait(10)
        with self.count:
            self.making -= 1
        (self.dir / f"pair-{number}").mkdir()
        return pool.Pair(
            self.dir / f"pair-{number}",
            shape,
            f"gw{number}",
            f"ag{number}",
            f"vol{number}",
            time.time(),
            self.pool_id,
            uids.Lease(60600, 60600),
        )

    def discard(self, pair):
        self.discarded.append(pair.root.name)


@pytest.fixture
def benign():
    return spec.load(EXAMPLES / "benign.yaml")


@pytest.fixture
def make(tmp_path):
    made = []

    def make(size, makers=2):
        p = HeldPool(None, IMAGES, tmp_path / "runs", pool.Settings(size), makers=makers)
        made.append(p)
        return p

    yield make
    for p in made:
        p.go.set()
        p.close()


def settle(p: HeldPool, seconds: float = 1.5) -> None:
    """Long enough for refill threads to start every pair they would (their poll is 0.5 s)."""
    time.sleep(seconds)


def test_no_more_pairs_are_made_than_claims_to_come(make, benign):
    p = make(size=4)
    p.go.set()
    p.want([benign])
    assert p.wait_full(10)
    settle(p)
    assert p._made == 1  # size 4, but one claim to come
    assert p.claim(benign) is not None
    settle(p)
    assert p._made == 1  # and none after it was claimed


def test_pairs_are_made_side_by_side_up_to_the_makers(make, benign):
    p = make(size=4, makers=2)
    p.want([benign] * 4)
    settle(p)
    assert (p.making, p.most_at_once) == (2, 2)  # two at once, never more
    p.go.set()
    assert p.wait_full(10) and p._made == 4


def test_a_claim_waits_for_the_pair_being_made_for_it(make, benign):
    p = make(size=1)
    p.want([benign])
    settle(p)
    assert p.making == 1
    got = []
    waiter = threading.Thread(target=lambda: got.append(p.claim(benign, wait=10)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()  # no pair yet: it waits rather than start cold
    p.go.set()
    waiter.join(10)
    assert got and got[0] is not None and got[0].root.name == "pair-1"


def test_a_claim_with_nothing_on_its_way_starts_cold_at_once(make, benign):
    p = make(size=1)
    begun = time.monotonic()
    assert p.claim(benign, wait=10) is None  # never announced: no pair is made for it
    assert time.monotonic() - begun < 1
    settle(p)
    assert p._made == 0


def test_a_claim_gives_up_waiting_after_its_bound(make, benign):
    p = make(size=1)
    p.want([benign, benign])
    settle(p)
    begun = time.monotonic()
    assert p.claim(benign, wait=0.5) is None  # the pair is still being made
    assert 0.4 < time.monotonic() - begun < 3


def test_a_pair_claimed_but_never_taken_is_removed_on_close(make, benign, tmp_path):
    """Ctrl-C between the claim and the attempt's `take` leaves the pair in the pool's folder:
    close() removes it; a pair the attempt took (its folder renamed away) is the attempt's."""
    p = make(size=2)
    p.go.set()
    p.want([benign, benign])
    assert p.wait_full(10)
    taken, interrupted = p.claim(benign), p.claim(benign)
    taken.root.rename(tmp_path / "attempt-1")
    p.close()
    assert p.discarded == [interrupted.root.name]


def test_hits_misses_and_cold_starts_are_counted(make, benign, tmp_path):
    """Issue 27 item 6: what the suite's summary and the end of its output say of the pool."""
    import dataclasses

    p = make(size=1)
    p.want([benign, benign, benign])
    settle(p)
    assert p.claim(benign, wait=0.2) is None  # being made, not in time: a miss
    p.go.set()
    assert p.wait_full(10)
    hit = p.claim(benign)
    assert hit is not None
    p.started_cold()  # a retry: the pool does not serve it
    cold = dataclasses.replace(benign, sandbox=dataclasses.replace(benign.sandbox, runtime="runsc"))
    assert pool.ineligible(cold) and p.claim(cold) is None  # a spec it cannot pool
    assert p.stats() == {"hits": 1, "misses": 1, "cold_starts": 3}
    p.give_back(hit)  # its attempt could not take it: cold after all
    assert p.stats() == {"hits": 0, "misses": 1, "cold_starts": 4}


def test_a_suite_runs_pool_starts_add_up_in_its_summary_and_merge(tmp_path):
    from assure.records import summary
    from assure.run import suite as suite_mod
    from tests.unit.test_summary import shards

    s = suite_mod.Suite("p", tmp_path / "p.yaml", "", (spec.load(EXAMPLES / "benign.yaml"),), False)
    record = suite_mod.SuiteRun.create(tmp_path / "suites", s)
    record.count_pool({"hits": 2, "misses": 1, "cold_starts": 1})
    record.count_pool({"hits": 1, "misses": 0, "cold_starts": 2})  # a continued suite run's
    again = suite_mod.SuiteRun(record.path, s)
    doc = summary.suite_document(s, again.path, tmp_path / "runs")
    assert doc["pool"] == {"hits": 3, "misses": 1, "cold_starts": 3} and summary.problems(doc) == []
    one, two = shards(doc, 2)  # the one spec in shard 1; shard 2's pool ran, for nothing
    two["pool"] = {"hits": 1, "misses": 1, "cold_starts": 1}
    merged = summary.merge([("1.json", one), ("2.json", two)])
    assert merged["pool"] == {"hits": 4, "misses": 2, "cold_starts": 4}
