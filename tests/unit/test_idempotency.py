"""The idempotency store: a done key answers with the original; pending means in doubt; it survives reopening."""

from assure.gateway.idempotency import Store, derive_key


def test_first_claim_then_duplicate_gets_the_original_answer(tmp_path):
    store = Store(str(tmp_path / "idem.sqlite"))
    assert store.claim("k1", "b", action_id="a1", attempt=1) is None
    store.complete("k1", 200, {"result": {"rows": 1}})
    prior = store.claim("k1", "b", action_id="a2", attempt=1)
    assert (prior.state, prior.action_id, prior.status, prior.answer) == ("done", "a1", 200, {"result": {"rows": 1}})


def test_store_outlives_the_process_and_the_attempt(tmp_path):
    path = str(tmp_path / "idem.sqlite")
    first = Store(path)
    first.claim("k", "b", action_id="a1", attempt=1)
    first.complete("k", 200, {"result": 1})
    first.close()
    prior = Store(path).claim("k", "b", action_id="a9", attempt=2)
    assert prior.attempt == 1 and prior.answer == {"result": 1}


def test_a_pending_key_is_in_doubt_and_release_forgets_it(tmp_path):
    store = Store(str(tmp_path / "idem.sqlite"))
    store.claim("k", "b", action_id="a1", attempt=1)
    assert store.claim("k", "b", action_id="a2", attempt=1).state == "pending"
    store.release("k")
    assert store.claim("k", "b", action_id="a3", attempt=1) is None


def test_release_never_forgets_a_done_key(tmp_path):
    store = Store(str(tmp_path / "idem.sqlite"))
    store.claim("k", "b", action_id="a1", attempt=1)
    store.complete("k", 200, {})
    store.release("k")
    assert store.claim("k", "b", action_id="a2", attempt=1).state == "done"


def test_derived_keys_ignore_argument_order_but_not_values():
    assert derive_key("g", "db.execute", {"db": "x", "sql": "s"}) == derive_key("g", "db.execute", {"sql": "s", "db": "x"})
    assert derive_key("g", "db.execute", {"db": "x", "sql": "s"}) != derive_key("g", "db.execute", {"db": "x", "sql": "t"})
    assert derive_key("g", "db.execute", {"db": "x"}) != derive_key("h", "db.execute", {"db": "x"})


def _old_store(path):
    """A store written before keys were bound to their call: no `binding` column, caller keys stored raw."""
    import sqlite3

    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE keys (key TEXT PRIMARY KEY, state TEXT NOT NULL CHECK (state IN ('pending', 'done')), action_id TEXT NOT NULL,"
        " attempt INTEGER NOT NULL, status INTEGER, answer TEXT, created_at REAL NOT NULL)"
    )
    db.execute("INSERT INTO keys VALUES ('key:K', 'done', 'a1', 1, 200, '{\"result\": 1}', 0)")
    db.execute("INSERT INTO keys VALUES ('derived:abc', 'done', 'a2', 1, 200, '{\"result\": 2}', 0)")
    db.commit()
    db.close()


def test_a_store_from_before_bindings_is_migrated_not_a_traceback(tmp_path):
    from assure.core.chain import sha256_hex
    from assure.gateway.idempotency import LEGACY

    path = str(tmp_path / "idem.sqlite")
    _old_store(path)
    store = Store(path)
    prior = store.claim("key:" + sha256_hex(b"K"), "fs.write:d", action_id="a3", attempt=2)  # the caller key, as it is looked up now
    assert (prior.state, prior.action_id, prior.binding, prior.answer) == ("done", "a1", LEGACY, {"result": 1})
    assert store.claim("derived:abc", "fs.write:d", action_id="a4", attempt=2).binding == LEGACY
    assert store.claim("key:new", "fs.write:d", action_id="a5", attempt=2) is None
    store.close()
    assert Store(path).claim("key:new", "x", action_id="a6", attempt=3).binding == "fs.write:d"  # migrated once
