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
