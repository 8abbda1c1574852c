"""The idempotency store: a done call answers with the original; pending means in doubt; it
survives reopening; and a later attempt learns nothing from it but what duplicate-effect
safety needs (a live call it repeats exactly)."""

from assure.gateway.idempotency import LEGACY, Call, Store, derive_key


def live(key="k", binding="b", attempt=1):
    return Call(key, binding, attempt, shared=True)


def sandbox(key="k", binding="b", attempt=1):
    return Call(key, binding, attempt, shared=False)


def test_first_claim_then_duplicate_gets_the_original_answer(tmp_path):
    store = Store(str(tmp_path / "idem.sqlite"))
    assert store.claim(sandbox("k1"), action_id="a1") is None
    store.complete(sandbox("k1"), 200, {"result": {"rows": 1}})
    prior = store.claim(sandbox("k1"), action_id="a2")
    assert (prior.state, prior.action_id, prior.status, prior.answer) == (
        "done",
        "a1",
        200,
        {"result": {"rows": 1}},
    )


def test_a_live_call_outlives_the_process_and_the_attempt(tmp_path):
    path = str(tmp_path / "idem.sqlite")
    first = Store(path)
    first.claim(live(), action_id="a1")
    first.complete(live(), 200, {"result": 1})
    first.close()
    prior = Store(path).claim(live(attempt=2), action_id="a9")
    assert prior.attempt == 1 and prior.answer == {"result": 1}


def test_a_sandbox_key_belongs_to_its_attempt_alone(tmp_path):
    """Attempt 2 cannot tell a key attempt 1 used (done, pending, or for another call) from a fresh
    one."""
    store = Store(str(tmp_path / "idem.sqlite"))
    for key in ("done", "pending", "other"):
        store.claim(sandbox(key), action_id="a1")
    store.complete(sandbox("done"), 200, {"result": 1})
    assert store.claim(sandbox("done", attempt=2), action_id="a2") is None
    assert store.claim(sandbox("pending", attempt=2), action_id="a3") is None
    assert store.claim(sandbox("other", "another call", attempt=2), action_id="a4") is None
    assert (
        store.claim(sandbox("done", attempt=1), action_id="a5").action_id == "a1"
    )  # still attempt 1's


def test_a_live_key_answers_a_later_attempt_for_its_identical_call_only(tmp_path):
    store = Store(str(tmp_path / "idem.sqlite"))
    store.claim(live("k", "pay 5"), action_id="a1")
    store.complete(live("k", "pay 5"), 200, {"result": "paid"})
    assert (
        store.claim(live("k", "pay 5", attempt=2), action_id="a2").action_id == "a1"
    )  # no second effect
    assert (
        store.claim(live("k", "pay 7", attempt=3), action_id="a3") is None
    )  # another call: a fresh key


def test_what_a_later_attempt_gets_for_a_key_never_depends_on_an_earlier_one(tmp_path):
    """Attempt 1 used key `used` for `pay 5`, never `fresh`. Attempt 2 makes the same two calls
    under each key, in either order: the kind of answer (fresh/replay: None or a Prior; bound to
    another call: its binding) is the same for both keys."""
    store = Store(str(tmp_path / "idem.sqlite"))
    store.claim(live("used", "pay 5"), action_id="a1")
    store.complete(live("used", "pay 5"), 200, {"result": "paid"})

    def kinds(key, order, attempt):
        out = []
        for binding in order:
            prior = store.claim(live(key, binding, attempt), action_id="a")
            out.append("ok" if prior is None or prior.binding == binding else "409")
        return out

    for attempt, order in ((2, ("pay 5", "pay 7")), (3, ("pay 7", "pay 5"))):
        assert kinds("used", order, attempt) == kinds("fresh", order, attempt) == ["ok", "409"]


def test_within_an_attempt_a_key_is_bound_to_its_first_call(tmp_path):
    store = Store(str(tmp_path / "idem.sqlite"))
    store.claim(live("k", "pay 5"), action_id="a1")
    assert store.claim(live("k", "pay 7"), action_id="a2").binding == "pay 5"
    assert store.claim(sandbox("k", "write x"), action_id="a3").binding == "pay 5"


def test_a_pending_key_is_in_doubt_and_release_forgets_it(tmp_path):
    store = Store(str(tmp_path / "idem.sqlite"))
    store.claim(live(), action_id="a1")
    assert store.claim(live(), action_id="a2").state == "pending"
    store.release(live())
    assert store.claim(live(), action_id="a3") is None
    assert (
        store.claim(live(attempt=2), action_id="a4").state == "pending"
    )  # a live call in doubt is never re-run


def test_release_never_forgets_a_done_key(tmp_path):
    store = Store(str(tmp_path / "idem.sqlite"))
    store.claim(live(), action_id="a1")
    store.complete(live(), 200, {})
    store.release(live())
    assert store.claim(live(), action_id="a2").state == "done"


def test_derived_keys_ignore_argument_order_but_not_values():
    assert derive_key("g", "db.execute", {"db": "x", "sql": "s"}) == derive_key(
        "g", "db.execute", {"sql": "s", "db": "x"}
    )
    assert derive_key("g", "db.execute", {"db": "x", "sql": "s"}) != derive_key(
        "g", "db.execute", {"db": "x", "sql": "t"}
    )
    assert derive_key("g", "db.execute", {"db": "x"}) != derive_key("h", "db.execute", {"db": "x"})


def _old_store(path, *, bound):
    """A store of an older gateway: keyed by `key` alone; before bindings (`bound=False`) caller
    keys stored raw."""
    import sqlite3

    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE keys (key TEXT PRIMARY KEY, state TEXT NOT NULL CHECK (state IN ('pending',"
        " 'done')), action_id TEXT NOT NULL, attempt INTEGER NOT NULL, status INTEGER, answer TEXT,"
        " created_at REAL NOT NULL)"
    )
    if bound:
        db.execute("ALTER TABLE keys ADD COLUMN binding TEXT NOT NULL DEFAULT ''")
        db.execute(
            "INSERT INTO keys VALUES ('key:d', 'done', 'a1', 1, 200, '{\"result\": 1}', 0,"
            " 'http.request:x')"
        )
    else:
        db.execute("INSERT INTO keys VALUES ('key:K', 'done', 'a1', 1, 200, '{\"result\": 1}', 0)")
        db.execute(
            "INSERT INTO keys VALUES ('derived:abc', 'done', 'a2', 1, 200, '{\"result\": 2}', 0)"
        )
    db.commit()
    db.close()


def test_a_store_from_before_bindings_is_migrated_not_a_traceback(tmp_path):
    from assure.core.chain import sha256_hex

    path = str(tmp_path / "idem.sqlite")
    _old_store(path, bound=False)
    store = Store(path)
    prior = store.claim(
        live("key:" + sha256_hex(b"K"), "fs.write:d", attempt=2), action_id="a3"
    )  # the caller key, as it is looked up now
    assert (prior.state, prior.action_id, prior.binding, prior.answer) == (
        "done",
        "a1",
        LEGACY,
        {"result": 1},
    )
    assert (
        store.claim(live("derived:abc", "fs.write:d", attempt=2), action_id="a4").binding == LEGACY
    )
    assert store.claim(live("key:new", "fs.write:d", attempt=2), action_id="a5") is None
    store.close()
    assert (
        Store(path).claim(live("key:new", "x", attempt=2), action_id="a6").binding == "fs.write:d"
    )  # migrated once


def test_a_store_from_before_attempt_scopes_keeps_its_calls_as_live_ones(tmp_path):
    path = str(tmp_path / "idem.sqlite")
    _old_store(path, bound=True)
    store = Store(path)
    assert (
        store.claim(live("key:d", "http.request:x", attempt=3), action_id="a2").action_id == "a1"
    )  # never a second effect
    assert store.claim(live("key:d", "http.request:y", attempt=4), action_id="a3") is None
